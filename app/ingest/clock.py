"""Hosts refused for their clock: remembered when it happens, shown on the dashboard until a batch is stored.

An agent whose clock is further off than ``max_clock_skew_s`` has every batch refused (app/ingest/batches.py,
``clock_offset``); it keeps its data and retries, but nothing of that host is stored, so without this the
dashboard would not show the host at all. The refusal is written by the token's host name (the token is
checked before the body; the body's host name is a claim), at most once per ``WRITE_EVERY_S`` per host and
process, and a batch stored later makes it history without a write of its own (``hosts.last_seen``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from app.access.agent_tokens import verify_token
from app.ingest.batches import ClockRefused
from app.store import models
from app.store.db import insert_ignore, transaction

log = logging.getLogger("specwatch.ingest")
WRITE_EVERY_S = 10.0
# a refusal older than this with no retry since is an agent that stopped, not one still refused
SHOWN_FOR_S = 3600.0


@dataclass(frozen=True, slots=True)
class Refused:
    """What the dashboard says of a host refused for its clock."""

    host: str
    refused_at: float
    offset_s: float  # server clock minus the agent's
    limit_s: float

    @property
    def summary(self) -> str:
        side = "behind" if self.offset_s > 0 else "ahead of"
        return (
            f"Batches refused: this host's clock is {abs(self.offset_s):.0f} s {side} the server's "
            f"(the server corrects up to {self.limit_s:.0f} s)"
        )

    @property
    def remedy(self) -> str:
        return (
            "fix time sync on the host (`timedatectl`, `chronyc tracking`); its agent keeps the data and sends "
            "it once the clock is right"
        )


class ClockRefusals:
    """Writes refusals, throttled per host in this process."""

    def __init__(self, sessions: sessionmaker[Session], every_s: float = WRITE_EVERY_S) -> None:
        self.sessions = sessions
        self.every_s = every_s
        self._written: dict[str, float] = {}

    def record(self, token: str, refusal: ClockRefused, now: float) -> None:
        """Never raises: the agent's answer is the 422 whether or not this could be written."""
        try:
            self._record(token, refusal, now)
        except Exception:
            log.exception("could not record a clock refusal")

    def _record(self, token: str, refusal: ClockRefused, now: float) -> None:
        with transaction(self.sessions) as s:
            info = verify_token(s, token)
            if info is None or now - self._written.get(info.host_name, float("-inf")) < self.every_s:
                return
            row = {"refused_at": now, "offset_s": refusal.offset_s, "limit_s": refusal.limit_s}
            table = models.ClockRefusal.__table__
            if not insert_ignore(s, table, [{"host_name": info.host_name, **row}], ["host_name"]):
                C = models.ClockRefusal
                s.execute(update(C).where(C.host_name == info.host_name).values(**row))
        if len(self._written) > 10_000:
            self._written.clear()
        self._written[info.host_name] = now


def current(session: Session, now: float) -> dict[str, Refused]:
    """Hosts refused for their clock with no batch stored since, by name."""
    C, H = models.ClockRefusal, models.Host
    rows = session.execute(
        select(C, H.last_seen)
        .outerjoin(H, H.name == C.host_name)
        .where(C.refused_at > now - SHOWN_FOR_S)
        .order_by(C.host_name)
    ).all()
    return {
        c.host_name: Refused(c.host_name, c.refused_at, c.offset_s, c.limit_s)
        for c, last_seen in rows
        if last_seen is None or last_seen < c.refused_at
    }
