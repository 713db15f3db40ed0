"""metric rollups: one-minute aggregates of engine metrics for the launch view's wide ranges

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_rollups",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("bucket_ts", sa.Float(), nullable=False),
        sa.Column("launch_id", sa.Integer(), nullable=True),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("v_min", sa.Float(), nullable=False),
        sa.Column("v_mean", sa.Float(), nullable=False),
        sa.Column("v_max", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["series_id"], ["metric_series.id"], name=op.f("fk_metric_rollups_series_id_metric_series")
        ),
        sa.PrimaryKeyConstraint("series_id", "bucket_ts", name=op.f("pk_metric_rollups")),
    )
    op.create_index("ix_metric_rollups_launch_bucket", "metric_rollups", ["launch_id", "bucket_ts"])


def downgrade() -> None:
    op.drop_index("ix_metric_rollups_launch_bucket", table_name="metric_rollups")
    op.drop_table("metric_rollups")
