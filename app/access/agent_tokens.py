"""Agent tokens: random, shown once, stored as SHA-256 (app/access/tokens.py), scoped to one host, revocable."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from app.access import tokens
from app.store.db import any_of, driver_rows
from app.store.models import AgentToken

TOKEN_PREFIX = "swa_"


def create_token(session: Session, host: str, now: float | None = None) -> str:
    return tokens.issue(session, AgentToken, TOKEN_PREFIX, now, host_name=host)


@dataclass(frozen=True, slots=True)
class TokenInfo:
    id: int
    host_name: str


# this runs for every ingest transaction: the driver's SQL (app/store/db.py driver_rows)
_LIVE_TOKENS = (
    f'SELECT id, host_name, token_hash FROM "{AgentToken.__tablename__}" WHERE revoked_at IS NULL AND '
)


def verify_tokens(session: Session, presented: Iterable[str]) -> dict[str, TokenInfo]:
    """The host of each known, unrevoked token among ``presented`` (one query for a whole ingest group)."""
    digests = {tokens.hash_token(t): t for t in presented}
    if not digests:
        return {}
    where, params = any_of(session, "token_hash", list(digests))
    found: dict[str, TokenInfo] = {}
    for id_, host_name, digest in driver_rows(session, _LIVE_TOKENS + where, params):
        token = digests.get(digest)
        if token is not None and tokens.digest_matches(digest, token):
            found[token] = TokenInfo(id=id_, host_name=host_name)
    return found


# Settings shows when each agent token was last used; a minute is precise enough, and writing it on every
# batch would add an UPDATE to every ingest transaction
TOUCH_EVERY_S = 60.0


class LastUsed:
    """Writes tokens' ``last_used_at``, at most once per ``TOUCH_EVERY_S`` per token in this process."""

    def __init__(self, every_s: float = TOUCH_EVERY_S) -> None:
        self.every_s = every_s
        self._written: dict[int, float] = {}

    def touch(self, session: Session, token_ids: Iterable[int], now: float) -> int:
        due = sorted({i for i in token_ids if now - self._written.get(i, float("-inf")) >= self.every_s})
        if not due:
            return 0
        session.execute(update(AgentToken).where(AgentToken.id.in_(due)).values(last_used_at=now))
        for i in due:
            self._written[i] = now
        return len(due)


def verify_token(session: Session, token: str) -> TokenInfo | None:
    """The token's host, or None if unknown or revoked."""
    return verify_tokens(session, [token]).get(token)


def revoke_tokens(session: Session, host: str | None = None, prefix: str | None = None) -> int:
    """Revoke every live token of a host, or the one whose listing prefix matches. Returns how many."""
    where = [] if host is None else [AgentToken.host_name == host]
    where += [] if prefix is None else [AgentToken.prefix == prefix]
    return tokens.revoke(session, AgentToken, *where)


GATE_TTL_S = 60.0


class AgentGate:
    """The check an ingest request passes BEFORE its body is read: is the bearer a live agent token? Tokens
    that passed are remembered for GATE_TTL_S, so an agent's steady stream costs a dict look-up; the check in
    the ingest transaction (app/ingest/queue.py) stays the authority, so a revocation still takes effect at
    once. A token not remembered costs one indexed look-up, far less than reading and validating a body."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory
        self._passed: dict[str, float] = {}

    def _lookup(self, token: str) -> bool:
        with self.factory() as s:
            return verify_token(s, token) is not None

    async def allows(self, token: str, now: float) -> bool:
        seen = self._passed.get(token)
        if seen is not None and now - seen < GATE_TTL_S:
            return True
        if not await asyncio.to_thread(self._lookup, token):
            return False
        if len(self._passed) > 100_000:
            self._passed.clear()
        self._passed[token] = now
        return True
