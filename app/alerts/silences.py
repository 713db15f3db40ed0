"""Silences: mute alerts for a kind, a launch, a host or a rank for a while.

A silenced change still writes its outbox row, with status ``suppressed`` and the silence named in
``last_error``: the history shows what was muted and by whom, /metrics counts it, and nothing is sent.
Removing a silence ends it now (the row stays, for the record).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from agents.wire import INCIDENT_KINDS
from app.store.models import Silence


class SilenceError(ValueError):
    """A silence that cannot be created: said in one sentence."""


@dataclass(frozen=True, slots=True)
class Matcher:
    id: int
    kind: str | None
    launch_id: int | None
    host: str | None
    rank: str | None
    reason: str

    def matches(self, snap: dict[str, Any]) -> bool:
        """Every matcher that is set must agree. A rank matches the culprit; only an incident without a
        culprit is matched by any rank involved (muting TP6 must not mute a deadlock that TP3 causes)."""
        if self.kind is not None and snap.get("kind") != self.kind:
            return False
        if self.launch_id is not None and snap.get("launch_id") != self.launch_id:
            return False
        if self.host is not None and snap.get("host") != self.host:
            return False
        if self.rank is None:
            return True
        if snap.get("culprit"):
            return bool(self.rank == snap["culprit"])
        return self.rank in (snap.get("ranks") or [])


def active(session: Session, now: float) -> list[Matcher]:
    rows = session.execute(
        select(Silence).where(Silence.starts_at <= now, Silence.ends_at > now).order_by(Silence.id)
    ).scalars()
    return [Matcher(r.id, r.kind, r.launch_id, r.host, r.rank, r.reason) for r in rows]


def first_match(matchers: list[Matcher], snap: dict[str, Any]) -> Matcher | None:
    return next((m for m in matchers if m.matches(snap)), None)


def create(
    session: Session,
    *,
    now: float,
    duration_s: float,
    kind: str | None = None,
    launch_id: int | None = None,
    host: str | None = None,
    rank: str | None = None,
    reason: str = "",
    created_by: str = "",
) -> Silence:
    if kind is None and launch_id is None and host is None and rank is None:
        raise SilenceError(
            "say what to silence: a kind, a launch, a host or a rank (a silence of everything is refused)"
        )
    if kind is not None and kind not in INCIDENT_KINDS:
        known = ", ".join(INCIDENT_KINDS)
        raise SilenceError(f"unknown incident kind {kind!r}; one of: {known}")
    if not duration_s > 0:
        raise SilenceError("a silence needs a positive duration")
    row = Silence(
        kind=kind,
        launch_id=launch_id,
        host=host,
        rank=rank,
        reason=reason,
        created_by=created_by,
        created_at=now,
        starts_at=now,
        ends_at=now + duration_s,
    )
    session.add(row)
    session.flush()
    return row


def end(session: Session, silence_id: int, now: float) -> Silence | None:
    row = session.get(Silence, silence_id)
    if row is None:
        return None
    row.ends_at = min(row.ends_at, now)
    return row


def as_dict(row: Silence, now: float) -> dict[str, Any]:
    return {
        "id": row.id,
        "kind": row.kind,
        "launch_id": row.launch_id,
        "host": row.host,
        "rank": row.rank,
        "reason": row.reason,
        "created_by": row.created_by,
        "created_at": row.created_at,
        "starts_at": row.starts_at,
        "ends_at": row.ends_at,
        "active": row.starts_at <= now < row.ends_at,
    }


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``2h``, ``1d``, ``1h30m`` or plain seconds."""
    import re

    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise SilenceError(f"cannot read duration {text!r}: use e.g. 30m, 2h, 1d or 1h30m")
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    return sum(float(n) * unit[u] for n, u in parts)
