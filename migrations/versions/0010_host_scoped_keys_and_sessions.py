"""host-scoped idempotency keys and GPU identities; server-side browser sessions

- ``ingested_batches``: the idempotency key becomes (host_id, agent_id, seq). With (agent_id, seq) alone one
  host's token could claim another host's next key, and that host's real batch came back ``duplicate`` and was
  deleted from its agent's spool unstored (a machine image with a baked-in agent id did it by accident).
- ``gpus``: a GPU is (host_id, uuid). Keyed by UUID alone, one host's samples naming another's GPU went into
  that GPU's series and moved it under the writer.
- ``hosts.spool_dropped_*``: what each host's agent spool dropped unsent, from the totals every batch carries.
- ``user_sessions``: a browser login is a row, checked (within the same 10 s as bearer tokens) on every
  request: revoking the user token behind it, or logging out, ends it.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch_op:
        for name in ("spool_dropped_batches", "spool_dropped_samples"):
            batch_op.add_column(sa.Column(name, sa.BigInteger(), server_default="0", nullable=False))
    with op.batch_alter_table("ingested_batches") as batch_op:
        batch_op.drop_constraint("uq_ingested_batches_agent_id", type_="unique")
        batch_op.create_unique_constraint("uq_ingested_batches_host_id", ["host_id", "agent_id", "seq"])
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.drop_constraint("uq_gpus_uuid", type_="unique")
        batch_op.create_unique_constraint("uq_gpus_host_id", ["host_id", "uuid"])
    op.create_table(
        "user_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_token_id", sa.Integer(), nullable=False),
        sa.Column("csrf", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_token_id"], ["user_tokens.id"], name=op.f("fk_user_sessions_user_token_id_user_tokens")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_user_sessions")),
    )
    op.create_index(op.f("ix_user_sessions_expires_at"), "user_sessions", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_user_sessions_expires_at"), table_name="user_sessions")
    op.drop_table("user_sessions")
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.drop_constraint("uq_gpus_host_id", type_="unique")
        batch_op.create_unique_constraint("uq_gpus_uuid", ["uuid"])
    with op.batch_alter_table("ingested_batches") as batch_op:
        batch_op.drop_constraint("uq_ingested_batches_host_id", type_="unique")
        batch_op.create_unique_constraint("uq_ingested_batches_agent_id", ["agent_id", "seq"])
    with op.batch_alter_table("hosts") as batch_op:
        batch_op.drop_column("spool_dropped_samples")
        batch_op.drop_column("spool_dropped_batches")
