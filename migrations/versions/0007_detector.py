"""detector: stack requests and detector state

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "stack_requests",
        sa.Column("id", BigId, nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("requested_at", sa.Float(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=True),
        sa.Column("sent_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name=op.f("fk_stack_requests_host_id_hosts")),
        sa.ForeignKeyConstraint(
            ["incident_id"], ["incidents.id"], name=op.f("fk_stack_requests_incident_id_incidents")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stack_requests")),
    )
    op.create_index("ix_stack_requests_host_sent", "stack_requests", ["host_id", "sent_at"])
    op.create_table(
        "detector_state",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_detector_state")),
    )


def downgrade() -> None:
    op.drop_table("detector_state")
    op.drop_index("ix_stack_requests_host_sent", table_name="stack_requests")
    op.drop_table("stack_requests")
