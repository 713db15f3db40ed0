"""The log panel: one rank's parsed log lines, filtered by minimum severity and text, around a moment or
after the last line the browser already has (live tail)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from app.store import models

SEVERITIES = ("debug", "info", "warning", "error", "critical")


def _row(e: Any) -> dict[str, Any]:
    return {
        "id": e.id,
        "ts": e.ts,
        "rank": e.rank_label,
        "kind": e.kind,
        "severity": e.severity,
        "source": e.source,
        "message": e.message,
    }


def log_lines(
    session: Session,
    launch_id: int,
    *,
    rank: str | None,
    min_severity: str,
    text: str | None,
    around: float | None,
    after_id: int | None,
    limit: int,
) -> dict[str, Any]:
    E = models.Event
    where: list[ColumnElement[bool]] = [E.launch_id == launch_id]
    if rank:
        where.append(E.rank_label == rank)
    if min_severity != "debug":
        where.append(E.severity.in_(SEVERITIES[SEVERITIES.index(min_severity) :]))
    if text:
        # LIKE with the wildcards of the user's text escaped: the filter means "contains", literally
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append(E.message.ilike(f"%{escaped}%", escape="\\"))
    cols = (E.id, E.ts, E.rank_label, E.kind, E.severity, E.source, E.message)
    if after_id is not None:
        rows = session.execute(select(*cols).where(*where, E.id > after_id).order_by(E.id).limit(limit)).all()
        return {"lines": [_row(r) for r in rows], "anchor_id": None}
    if around is None:
        rows = session.execute(
            select(*cols).where(*where).order_by(E.ts.desc(), E.id.desc()).limit(limit)
        ).all()
        return {"lines": [_row(r) for r in reversed(rows)], "anchor_id": None}
    half = max(1, limit // 2)
    before = session.execute(
        select(*cols).where(*where, E.ts <= around).order_by(E.ts.desc(), E.id.desc()).limit(half)
    ).all()
    after = session.execute(select(*cols).where(*where, E.ts > around).order_by(E.ts, E.id).limit(half)).all()
    lines = [_row(r) for r in reversed(before)] + [_row(r) for r in after]
    anchor = before[0].id if before else (after[0].id if after else None)
    return {"lines": lines, "anchor_id": anchor}
