"""What agent tokens and user tokens share: how a secret is made, stored and checked, and how it is revoked.

Both are random strings shown once; the database keeps only a SHA-256 of each (a leaked table grants nothing)
and a short listing prefix a person can tell tokens apart by. Lookup is by digest, so timing reveals nothing
of a token; the final comparison is constant-time all the same. Agent tokens (agent_tokens.py) are scoped to
a host, user tokens (user_tokens.py) carry a role.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

SHOWN_PREFIX_CHARS = (
    6  # of the random part, after the kind's prefix: enough to tell tokens apart in a listing
)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class NewToken:
    token: str  # shown once, never stored
    digest: str  # stored
    prefix: str  # stored, listed


def listing_prefix(token: str, kind_prefix: str) -> str:
    return token[: len(kind_prefix) + SHOWN_PREFIX_CHARS]


def new_token(kind_prefix: str) -> NewToken:
    token = kind_prefix + secrets.token_urlsafe(32)
    return NewToken(token, hash_token(token), listing_prefix(token, kind_prefix))


def issue(session: Session, table: Any, kind_prefix: str, now: float | None, **columns: Any) -> str:
    """A new token as a row of ``table`` (its digest and listing prefix, and ``columns``); returns the token,
    which is shown once and never stored."""
    new = new_token(kind_prefix)
    created_at = time.time() if now is None else now
    session.add(table(token_hash=new.digest, prefix=new.prefix, created_at=created_at, **columns))
    return new.token


def digest_matches(stored: str, token: str) -> bool:
    return hmac.compare_digest(stored, hash_token(token))


def revoke(session: Session, table: Any, *where: Any) -> int:
    """Revoke every live token of ``table`` matching ``where``; returns how many."""
    stmt = update(table).where(table.revoked_at.is_(None), *where).values(revoked_at=time.time())
    return int(session.execute(stmt).rowcount)  # type: ignore[attr-defined]
