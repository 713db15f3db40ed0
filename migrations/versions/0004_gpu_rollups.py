"""gpu rollups: one-minute aggregates for long-range charts

Revision ID: 0004
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_rollups",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("bucket_ts", sa.Float(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("util_gpu_min", sa.Float(), nullable=True),
        sa.Column("util_gpu_mean", sa.Float(), nullable=True),
        sa.Column("util_gpu_max", sa.Float(), nullable=True),
        sa.Column("mem_used_mean", sa.Float(), nullable=True),
        sa.Column("mem_used_max", sa.Float(), nullable=True),
        sa.Column("power_min", sa.Float(), nullable=True),
        sa.Column("power_mean", sa.Float(), nullable=True),
        sa.Column("power_max", sa.Float(), nullable=True),
        sa.Column("temp_max", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_rollups_gpu_id_gpus")),
        sa.PrimaryKeyConstraint("gpu_id", "bucket_ts", name=op.f("pk_gpu_rollups")),
    )


def downgrade() -> None:
    op.drop_table("gpu_rollups")
