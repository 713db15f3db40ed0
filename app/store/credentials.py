"""The credential tables: agent tokens, user tokens, browser sessions, and the server's own secret. Imported through app.store.models, the one
name for the schema."""

from __future__ import annotations

from sqlalchemy import (
    Float,
    ForeignKey,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.store.base import Base


class AgentToken(Base):
    """Agent credentials, one host each. Only a SHA-256 of the token is kept; ``prefix`` lets a person tell
    tokens apart in listings without it being usable."""

    __tablename__ = "agent_tokens"
    id: Mapped[int] = mapped_column(primary_key=True)
    host_name: Mapped[str] = mapped_column(String(128), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float)


class UserToken(Base):
    """Credentials of people and tools reading the dashboard and API when access control is on.
    Only a SHA-256 of the token is kept, like agent tokens."""

    __tablename__ = "user_tokens"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), index=True)
    role: Mapped[str] = mapped_column(String(16))  # viewer | admin
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)


class UserSession(Base):
    """One browser login (auth=token): the cookie names it, and it lasts while the user token behind it is
    live, until logout (``ended_at``) or ``expires_at``."""

    __tablename__ = "user_sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # SHA-256 of the cookie's session id
    user_token_id: Mapped[int] = mapped_column(ForeignKey("user_tokens.id"))
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float, index=True)
    ended_at: Mapped[float | None] = mapped_column(Float)


class ServerSecret(Base):
    """Secrets every server behind one database must share (the session-cookie signing key)."""

    __tablename__ = "server_secrets"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))
