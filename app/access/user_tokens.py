"""User tokens: for people and tools (Prometheus, a script) reading the dashboard and API when access control
is on. Random, shown once, stored as SHA-256 (app/access/tokens.py, as agent tokens are), carrying a role."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.access import tokens
from app.store.models import UserToken

USER_TOKEN_PREFIX = "swu_"
ROLES = ("viewer", "admin")


def create_user_token(session: Session, name: str, role: str, now: float | None = None) -> str:
    """A token for a person or tool (Prometheus, a script) reading the dashboard and API. Shown once."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    return tokens.issue(session, UserToken, USER_TOKEN_PREFIX, now, name=name, role=role)


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
    digest = tokens.hash_token(token)
    row = session.execute(
        select(UserToken.id, UserToken.name, UserToken.role, UserToken.token_hash).where(
            UserToken.token_hash == digest, UserToken.revoked_at.is_(None)
        )
    ).first()
    if row is None or not tokens.digest_matches(row.token_hash, token):
        return None
    return Principal(name=row.name, role=row.role, via="bearer", token_id=row.id)


def revoke_user_tokens(session: Session, name: str) -> int:
    """Revoke every live token of ``name``; returns how many."""
    return tokens.revoke(session, UserToken, UserToken.name == name)
