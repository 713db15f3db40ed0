"""hosts refused for their clock

- ``clock_refusals``: per host (by its agent token's host name), when its batches were last refused because its
  clock was further off than ``max_clock_skew_s``, by how much, and the limit: what the dashboard shows for a
  host that sends but has nothing stored.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clock_refusals",
        sa.Column("host_name", sa.String(length=128), nullable=False),
        sa.Column("refused_at", sa.Float(), nullable=False),
        sa.Column("offset_s", sa.Float(), nullable=False),
        sa.Column("limit_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("host_name", name=op.f("pk_clock_refusals")),
    )


def downgrade() -> None:
    op.drop_table("clock_refusals")
