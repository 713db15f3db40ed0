"""Browser logins (auth=token) as rows: the cookie carries a random session id, the database keeps its
SHA-256 with the user token it was opened with. A session is live while that token is unrevoked, until
logout or its expiry, so ``specwatch user revoke`` and /logout end it on every server (each re-checks within
``access.TOKEN_CACHE_S``), as for bearer tokens. A signed cookie alone could not be taken back."""

from __future__ import annotations

import secrets

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.access.tokens import hash_token
from app.access.user_tokens import Principal
from app.store.db import transaction
from app.store.models import UserSession, UserToken


def start(factory: sessionmaker[Session], who: Principal, ttl_s: float, now: float) -> tuple[str, str]:
    """A new session for the user token behind ``who``: (session id for the cookie, its CSRF token)."""
    assert who.token_id is not None
    sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
    with transaction(factory) as s:
        # the expired ones of everybody go with each login: the table stays the size of the live sessions
        s.execute(delete(UserSession).where(UserSession.expires_at < now))
        s.add(
            UserSession(
                id=hash_token(sid),
                user_token_id=who.token_id,
                csrf=csrf,
                created_at=now,
                expires_at=now + ttl_s,
            )
        )
    return sid, csrf


def verify(session: Session, sid: str, now: float) -> Principal | None:
    """Who a live session belongs to, or None (unknown, ended, expired, or its user token revoked)."""
    S, U = UserSession, UserToken
    row = session.execute(
        select(U.id, U.name, U.role, S.csrf)
        .join(U, U.id == S.user_token_id)
        .where(S.id == hash_token(sid), S.ended_at.is_(None), S.expires_at > now, U.revoked_at.is_(None))
    ).first()
    if row is None:
        return None
    return Principal(name=row.name, role=row.role, via="session", csrf=row.csrf, token_id=row.id)


def end(factory: sessionmaker[Session], sid: str, now: float) -> None:
    with transaction(factory) as s:
        s.execute(update(UserSession).where(UserSession.id == hash_token(sid)).values(ended_at=now))
