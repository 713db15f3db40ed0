"""alert outbox: what a delivery announces, its grouping key, the claiming process; receiver removal; silence creation time

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("alert_receivers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("removed_at", sa.Float(), nullable=True))
    with op.batch_alter_table("alert_deliveries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("event", sa.String(length=16), nullable=False, server_default="opened"))
        batch_op.add_column(sa.Column("launch_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("claimed_by", sa.String(length=64), nullable=True))
    with op.batch_alter_table("silences", schema=None) as batch_op:
        batch_op.add_column(sa.Column("created_at", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("silences", schema=None) as batch_op:
        batch_op.drop_column("created_at")
    with op.batch_alter_table("alert_deliveries", schema=None) as batch_op:
        batch_op.drop_column("claimed_by")
        batch_op.drop_column("launch_id")
        batch_op.drop_column("event")
    with op.batch_alter_table("alert_receivers", schema=None) as batch_op:
        batch_op.drop_column("removed_at")
