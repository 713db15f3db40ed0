"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 07:36:53.671056
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "agent_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host_name", sa.String(length=128), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.Column("last_used_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_agent_tokens_token_hash")),
    )
    with op.batch_alter_table("agent_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_agent_tokens_host_name"), ["host_name"], unique=False)

    op.create_table(
        "alert_receivers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("secret", sa.String(length=256), nullable=True),
        sa.Column("kinds", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_receivers")),
        sa.UniqueConstraint("name", name=op.f("uq_alert_receivers_name")),
    )
    op.create_table(
        "deployments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployments")),
        sa.UniqueConstraint("name", name=op.f("uq_deployments_name")),
    )
    op.create_table(
        "hosts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("first_seen", sa.Float(), nullable=False),
        sa.Column("last_seen", sa.Float(), nullable=False),
        sa.Column("agent_version", sa.String(length=64), nullable=True),
        sa.Column("agent_id", sa.String(length=64), nullable=True),
        sa.Column("interval_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_hosts")),
        sa.UniqueConstraint("name", name=op.f("uq_hosts_name")),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
    )
    op.create_table(
        "silences",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=True),
        sa.Column("launch_id", sa.Integer(), nullable=True),
        sa.Column("host", sa.String(length=128), nullable=True),
        sa.Column("rank", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("starts_at", sa.Float(), nullable=False),
        sa.Column("ends_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_silences")),
    )
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=128), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=True),
        sa.Column("mem_total_bytes", sa.BigInteger(), nullable=True),
        sa.Column("power_limit_w", sa.Float(), nullable=True),
        sa.Column("last_seen", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name=op.f("fk_gpus_host_id_hosts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpus")),
        sa.UniqueConstraint("uuid", name=op.f("uq_gpus_uuid")),
    )
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpus_host_id"), ["host_id"], unique=False)

    op.create_table(
        "ingested_batches",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.Float(), nullable=False),
        sa.Column("n_gpus", sa.Integer(), nullable=False),
        sa.Column("n_processes", sa.Integer(), nullable=False),
        sa.Column("n_events", sa.Integer(), nullable=False),
        sa.Column("n_metrics", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name=op.f("fk_ingested_batches_host_id_hosts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingested_batches")),
        sa.UniqueConstraint("agent_id", "seq", name=op.f("uq_ingested_batches_agent_id")),
    )
    with op.batch_alter_table("ingested_batches", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ingested_batches_received_at"), ["received_at"], unique=False)

    op.create_table(
        "launches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment_id", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("last_seen", sa.Float(), nullable=False),
        sa.Column("engine", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("draft_path", sa.Text(), nullable=True),
        sa.Column("info", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["deployment_id"], ["deployments.id"], name=op.f("fk_launches_deployment_id_deployments")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_launches")),
    )
    with op.batch_alter_table("launches", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_launches_deployment_id"), ["deployment_id"], unique=False)

    op.create_table(
        "metric_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("labels_key", sa.String(length=2048), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name=op.f("fk_metric_series_host_id_hosts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_series")),
        sa.UniqueConstraint("host_id", "name", "labels_key", name=op.f("uq_metric_series_host_id")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("launch_id", sa.Integer(), nullable=True),
        sa.Column("rank_label", sa.String(length=64), nullable=True),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=512), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("fields", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name=op.f("fk_events_host_id_hosts")),
        sa.ForeignKeyConstraint(["launch_id"], ["launches.id"], name=op.f("fk_events_launch_id_launches")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index("ix_events_host_ts", ["host_id", "ts"], unique=False)
        batch_op.create_index("ix_events_launch_ts", ["launch_id", "ts"], unique=False)

    op.create_table(
        "gpu_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("util_gpu_pct", sa.Float(), nullable=True),
        sa.Column("util_mem_pct", sa.Float(), nullable=True),
        sa.Column("mem_used_bytes", sa.BigInteger(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("temp_c", sa.Float(), nullable=True),
        sa.Column("sm_clock_mhz", sa.Float(), nullable=True),
        sa.Column("pcie_tx_bytes_s", sa.Float(), nullable=True),
        sa.Column("pcie_rx_bytes_s", sa.Float(), nullable=True),
        sa.Column("processes", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_samples_gpu_id_gpus")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_samples")),
    )
    with op.batch_alter_table("gpu_samples", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_samples_gpu_ts", ["gpu_id", "ts"], unique=False)

    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("launch_id", sa.Integer(), nullable=True),
        sa.Column("host_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("confidence", sa.String(length=16), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("culprit", sa.String(length=64), nullable=True),
        sa.Column("ranks", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("opened_at", sa.Float(), nullable=False),
        sa.Column("resolved_at", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name=op.f("fk_incidents_host_id_hosts")),
        sa.ForeignKeyConstraint(["launch_id"], ["launches.id"], name=op.f("fk_incidents_launch_id_launches")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_incidents")),
    )
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_incidents_key"), ["key"], unique=False)
        batch_op.create_index(batch_op.f("ix_incidents_launch_id"), ["launch_id"], unique=False)
        batch_op.create_index("ix_incidents_status_opened", ["status", "opened_at"], unique=False)

    op.create_table(
        "metric_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("launch_id", sa.Integer(), nullable=True),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["launch_id"], ["launches.id"], name=op.f("fk_metric_samples_launch_id_launches")
        ),
        sa.ForeignKeyConstraint(
            ["series_id"], ["metric_series.id"], name=op.f("fk_metric_samples_series_id_metric_series")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_samples")),
    )
    with op.batch_alter_table("metric_samples", schema=None) as batch_op:
        batch_op.create_index("ix_metric_samples_launch_ts", ["launch_id", "ts"], unique=False)
        batch_op.create_index("ix_metric_samples_series_ts", ["series_id", "ts"], unique=False)

    op.create_table(
        "processes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("create_time", sa.Float(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("engine", sa.String(length=16), nullable=False),
        sa.Column("rank_label", sa.String(length=64), nullable=True),
        sa.Column("launch_id", sa.Integer(), nullable=True),
        sa.Column("cmdline", sa.Text(), nullable=True),
        sa.Column("exited_at", sa.Float(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("last_seen", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name=op.f("fk_processes_host_id_hosts")),
        sa.ForeignKeyConstraint(["launch_id"], ["launches.id"], name=op.f("fk_processes_launch_id_launches")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_processes")),
        sa.UniqueConstraint("host_id", "pid", "create_time", name=op.f("uq_processes_host_id")),
    )
    with op.batch_alter_table("processes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_processes_launch_id"), ["launch_id"], unique=False)

    op.create_table(
        "ranks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("launch_id", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("gpu_uuids", sa.JSON(), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("phase_since", sa.Float(), nullable=False),
        sa.Column("last_progress_at", sa.Float(), nullable=False),
        sa.Column("last_seen", sa.Float(), nullable=False),
        sa.Column("last_log", sa.Text(), nullable=True),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name=op.f("fk_ranks_host_id_hosts")),
        sa.ForeignKeyConstraint(["launch_id"], ["launches.id"], name=op.f("fk_ranks_launch_id_launches")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ranks")),
        sa.UniqueConstraint("launch_id", "label", name=op.f("uq_ranks_launch_id")),
    )
    with op.batch_alter_table("ranks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ranks_launch_id"), ["launch_id"], unique=False)

    op.create_table(
        "incident_changes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("change", sa.String(length=16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["incident_id"], ["incidents.id"], name=op.f("fk_incident_changes_incident_id_incidents")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_incident_changes")),
    )
    with op.batch_alter_table("incident_changes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_incident_changes_incident_id"), ["incident_id"], unique=False)

    op.create_table(
        "process_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("process_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=True),
        sa.Column("rss_bytes", sa.BigInteger(), nullable=True),
        sa.Column("cpu_time_s", sa.Float(), nullable=True),
        sa.Column("cpu_pct", sa.Float(), nullable=True),
        sa.Column("io_read_bytes", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["process_id"], ["processes.id"], name=op.f("fk_process_samples_process_id_processes")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_process_samples")),
    )
    with op.batch_alter_table("process_samples", schema=None) as batch_op:
        batch_op.create_index("ix_process_samples_process_ts", ["process_id", "ts"], unique=False)

    op.create_table(
        "rank_phases",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["rank_id"], ["ranks.id"], name=op.f("fk_rank_phases_rank_id_ranks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rank_phases")),
    )
    with op.batch_alter_table("rank_phases", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_rank_phases_rank_id"), ["rank_id"], unique=False)

    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("delivery_id", sa.String(length=64), nullable=False),
        sa.Column("receiver_id", sa.Integer(), nullable=False),
        sa.Column("change_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=False),
        sa.Column("claimed_until", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("delivered_at", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["change_id"],
            ["incident_changes.id"],
            name=op.f("fk_alert_deliveries_change_id_incident_changes"),
        ),
        sa.ForeignKeyConstraint(
            ["receiver_id"],
            ["alert_receivers.id"],
            name=op.f("fk_alert_deliveries_receiver_id_alert_receivers"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_deliveries")),
        sa.UniqueConstraint("delivery_id", name=op.f("uq_alert_deliveries_delivery_id")),
    )
    with op.batch_alter_table("alert_deliveries", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alert_deliveries_change_id"), ["change_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_alert_deliveries_receiver_id"), ["receiver_id"], unique=False)
        batch_op.create_index("ix_alert_deliveries_status_next", ["status", "next_attempt_at"], unique=False)

    op.create_table(
        "alert_attempts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("delivery_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["alert_deliveries.id"],
            name=op.f("fk_alert_attempts_delivery_id_alert_deliveries"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_attempts")),
    )
    with op.batch_alter_table("alert_attempts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alert_attempts_delivery_id"), ["delivery_id"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("alert_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_alert_attempts_delivery_id"))

    op.drop_table("alert_attempts")
    with op.batch_alter_table("alert_deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_alert_deliveries_status_next")
        batch_op.drop_index(batch_op.f("ix_alert_deliveries_receiver_id"))
        batch_op.drop_index(batch_op.f("ix_alert_deliveries_change_id"))

    op.drop_table("alert_deliveries")
    with op.batch_alter_table("rank_phases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rank_phases_rank_id"))

    op.drop_table("rank_phases")
    with op.batch_alter_table("process_samples", schema=None) as batch_op:
        batch_op.drop_index("ix_process_samples_process_ts")

    op.drop_table("process_samples")
    with op.batch_alter_table("incident_changes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_incident_changes_incident_id"))

    op.drop_table("incident_changes")
    with op.batch_alter_table("ranks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ranks_launch_id"))

    op.drop_table("ranks")
    with op.batch_alter_table("processes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_processes_launch_id"))

    op.drop_table("processes")
    with op.batch_alter_table("metric_samples", schema=None) as batch_op:
        batch_op.drop_index("ix_metric_samples_series_ts")
        batch_op.drop_index("ix_metric_samples_launch_ts")

    op.drop_table("metric_samples")
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.drop_index("ix_incidents_status_opened")
        batch_op.drop_index(batch_op.f("ix_incidents_launch_id"))
        batch_op.drop_index(batch_op.f("ix_incidents_key"))

    op.drop_table("incidents")
    with op.batch_alter_table("gpu_samples", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_samples_gpu_ts")

    op.drop_table("gpu_samples")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("ix_events_launch_ts")
        batch_op.drop_index("ix_events_host_ts")

    op.drop_table("events")
    op.drop_table("metric_series")
    with op.batch_alter_table("launches", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_launches_deployment_id"))

    op.drop_table("launches")
    with op.batch_alter_table("ingested_batches", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ingested_batches_received_at"))

    op.drop_table("ingested_batches")
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpus_host_id"))

    op.drop_table("gpus")
    op.drop_table("silences")
    op.drop_table("leases")
    op.drop_table("hosts")
    op.drop_table("deployments")
    op.drop_table("alert_receivers")
    with op.batch_alter_table("agent_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_agent_tokens_host_name"))

    op.drop_table("agent_tokens")
