"""One typed settings object for the server: ``SPECWATCH_*`` environment variables, then an optional TOML file
(``SPECWATCH_CONFIG``), then defaults. docs/configuration.md is generated from this class."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from app.detect.config import DetectConfig


def default_data_dir() -> Path:
    """`$XDG_DATA_HOME/specwatch`, else `~/.local/share/specwatch`"""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "specwatch"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPECWATCH_", extra="ignore", env_nested_delimiter="__")

    data_dir: Path = Field(
        default_factory=default_data_dir, description="Where the embedded SQLite file lives."
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL: sqlite:///path or postgresql+psycopg://user@host/db. "
        "Default: an SQLite file in data_dir.",
    )
    host: str = Field("127.0.0.1", description="Address `specwatch serve` binds.")
    port: int = Field(8000, description="Port `specwatch serve` binds.")
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Server processes `specwatch serve` runs on the one port. Each takes ingest and serves the "
        "dashboard; one at a time (the leader) runs the detector and the alert sender. One process stores "
        "about one core's worth of batches (docs/scaling.md).",
    )
    public_url: str | None = Field(None, description="Base URL of the dashboard, used in alert links.")
    max_body_bytes: int = Field(8 * 1024 * 1024, description="Largest decompressed ingest body accepted.")
    max_future_skew_s: float = Field(
        300.0, description="Samples further in the future than this are refused."
    )
    clock_correct_above_s: float = Field(
        2.0,
        description="An agent clock further off than this (measured from its X-Specwatch-Sent-At header) has "
        "its batch's timestamps shifted onto the server's clock.",
    )
    max_clock_skew_s: float = Field(
        3600.0, description="An agent clock further off than this is refused with a message, not corrected."
    )
    max_past_age_s: float = Field(
        30 * 86400.0,
        description="Samples older than this are refused (beyond raw retention they would be pruned).",
    )
    retention_raw_s: float = Field(7 * 86400.0, description="How long raw samples and events are kept.")
    retention_rollup_s: float = Field(
        90 * 86400.0, description="How long one-minute GPU rollups (what long-range charts read) are kept."
    )
    retention_alerts_s: float = Field(
        90 * 86400.0,
        description="How long the history of finished alert deliveries (and their attempts) is kept; pending "
        "ones are kept until sent.",
    )
    prune_interval_s: float = Field(600.0, description="How often the pruning job runs.")
    partition_ahead_days: int = Field(
        3,
        ge=1,
        description="PostgreSQL: daily partitions of the sample and event tables are created this many days "
        "ahead (by the pruning job); rows of a day without one wait in a default partition.",
    )
    detect_interval_s: float = Field(
        1.0,
        description="Period of the detector tick (every tick adds up to one period to each detection; a tick of 8,192 "
        "ranks costs ~0.1 s of CPU: benchmarks/detector_tick.py).",
    )
    detect: DetectConfig = Field(
        default_factory=DetectConfig,
        description="Detection thresholds (docs/detection.md); e.g. SPECWATCH_DETECT__STALL_SERVING_S=30.",
    )
    auth: Literal["none", "token", "proxy"] = Field(
        "none",
        description="Access control of the dashboard and API: none (open; the server refuses to bind anything "
        "but a loopback address), token (user tokens from `specwatch user add`, browser login), proxy (a "
        "reverse proxy at a proxy_trusted address passes the user in headers).",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names (the Host header) this server answers; empty: any with auth=token/proxy, only "
        "loopback names and public_url's host with auth=none (DNS rebinding).",
    )
    public_metrics: bool = Field(
        False,
        description="Let /metrics answer without a user token (for a Prometheus without one); it carries host "
        "and GPU figures, nothing that changes state.",
    )
    proxy_trusted: list[str] = Field(
        default_factory=lambda: ["127.0.0.1", "::1"],
        description="auth=proxy: addresses or networks (CIDR) of the reverse proxy; user and group headers "
        "from any other client are ignored.",
    )
    proxy_user_header: str = Field("X-Forwarded-User", description="auth=proxy: header naming the user.")
    proxy_groups_header: str = Field("X-Forwarded-Groups", description="auth=proxy: header listing groups.")
    proxy_admin_group: str = Field(
        "specwatch-admins", description="auth=proxy: the group given the admin role."
    )
    session_ttl_s: float = Field(12 * 3600.0, description="auth=token: how long a browser login lasts.")
    cookie_secure: bool = Field(
        False,
        description="Mark session cookies Secure even when the server itself sees plain HTTP (behind TLS).",
    )
    background: bool = Field(
        True,
        description="Run the background jobs (leader lease, detector, alert sender, retention). false: this "
        "server only takes ingest and serves the dashboard.",
    )
    jobs_process: bool = Field(
        True,
        description="`specwatch serve` runs the background jobs in a process of their own beside the HTTP "
        "server(s), so ingest and the detector each get a core instead of sharing one interpreter lock "
        "(docs/scaling.md). false: they run in threads of each server process.",
    )
    alert_group_wait_s: float = Field(
        5.0,
        description="Incidents of one launch that open within this many seconds of each other are sent as "
        "one message; the first waits this long for the others.",
    )
    alert_reminder_interval_s: float = Field(
        3600.0, description="Repeat a reminder for an incident still open after this long (0: never)."
    )
    alert_timeout_s: float = Field(10.0, description="How long one webhook request may take.")
    alert_retry_initial_s: float = Field(2.0, description="First retry delay of a failed webhook.")
    alert_retry_max_s: float = Field(300.0, description="Longest delay between two retries of one webhook.")
    alert_give_up_after_s: float = Field(
        6 * 3600.0, description="A webhook not delivered this long after it was written is marked failed."
    )
    alert_receiver_concurrency: int = Field(
        2, ge=1, description="Most requests in flight to one receiver (across all server processes)."
    )
    receiver_allow: list[str] = Field(
        default_factory=list,
        description="Receiver destinations allowed although the outbound filter refuses them by default "
        "(loopback, link-local, cloud metadata names and addresses): addresses, networks (CIDR) or host names, "
        'e.g. ["127.0.0.1"] for an Alertmanager on this host. Private ranges need no entry.',
    )
    alert_poll_interval_s: float = Field(0.5, description="How often the sender looks for due webhooks.")
    leader_lease_s: float = Field(
        8.0,
        description="Lease of the leader role among servers sharing a database; fail-over takes at most this long.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("SPECWATCH_CONFIG")
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'specwatch.db'}"

    def dashboard_url(self) -> str:
        """The dashboard's base URL as alert links spell it: ``public_url``, else where this server listens."""
        return str(self.public_url or f"http://{self.host}:{self.port}").rstrip("/")


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, with explicit CLI values (non-None) taking precedence."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
