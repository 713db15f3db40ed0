"""Agent tokens: random, shown once, stored as SHA-256, scoped to one host, revocable."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.store.models import AgentToken

TOKEN_PREFIX = "swa_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, host: str, now: float | None = None) -> str:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        AgentToken(
            host_name=host,
            token_hash=hash_token(token),
            prefix=token[: len(TOKEN_PREFIX) + 6],
            created_at=time.time() if now is None else now,
        )
    )
    return token


@dataclass(frozen=True, slots=True)
class TokenInfo:
    id: int
    host_name: str


_T = AgentToken.__table__.c
# built once: this runs for every ingest transaction
_LIVE_TOKENS = select(_T.id, _T.host_name, _T.token_hash).where(
    _T.token_hash.in_(bindparam("digests", expanding=True)), _T.revoked_at.is_(None)
)


def verify_tokens(session: Session, tokens: Iterable[str]) -> dict[str, TokenInfo]:
    """The host of each known, unrevoked token among ``tokens`` (one query for a whole ingest group). Lookup
    is by hash, so timing reveals nothing of a token; the final comparison is constant-time all the same."""
    digests = {hash_token(t): t for t in tokens}
    rows = session.connection().execute(_LIVE_TOKENS, {"digests": list(digests)}).all()
    found: dict[str, TokenInfo] = {}
    for row in rows:
        token = digests.get(row.token_hash)
        if token is not None and hmac.compare_digest(row.token_hash, hash_token(token)):
            found[token] = TokenInfo(id=row.id, host_name=row.host_name)
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
    stmt = update(AgentToken).where(AgentToken.revoked_at.is_(None)).values(revoked_at=time.time())
    if host is not None:
        stmt = stmt.where(AgentToken.host_name == host)
    if prefix is not None:
        stmt = stmt.where(AgentToken.prefix == prefix)
    return session.execute(stmt).rowcount  # type: ignore[attr-defined]


USER_TOKEN_PREFIX = "swu_"
ROLES = ("viewer", "admin")


def create_user_token(session: Session, name: str, role: str, now: float | None = None) -> str:
    """A token for a person or tool (Prometheus, a script) reading the dashboard and API. Shown once."""
    from app.store.models import UserToken

    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    token = USER_TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        UserToken(
            name=name,
            role=role,
            token_hash=hash_token(token),
            prefix=token[: len(USER_TOKEN_PREFIX) + 6],
            created_at=time.time() if now is None else now,
        )
    )
    return token


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking: a user token's name and role, or a reverse proxy's user."""

    name: str
    role: str
    via: str  # bearer | session | proxy | open
    csrf: str | None = None
    token_id: int | None = None  # the user token behind a bearer request or a browser session

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def verify_user_token(session: Session, token: str) -> Principal | None:
    from app.store.models import UserToken

    digest = hash_token(token)
    row = session.execute(
        select(UserToken.id, UserToken.name, UserToken.role, UserToken.token_hash).where(
            UserToken.token_hash == digest, UserToken.revoked_at.is_(None)
        )
    ).first()
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        return None
    return Principal(name=row.name, role=row.role, via="bearer", token_id=row.id)


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
