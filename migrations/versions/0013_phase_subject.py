"""whose start-up step a phase band is: ``rank_phases.subject``

- ``rank_phases.subject``: "draft" for the draft model's own weight load, KV pool and CUDA-graph capture (a
  speculative engine repeats those steps for its draft after the target's), NULL for the target's and for
  every other phase. The timeline labels such a band "loading draft weights" / "capturing draft graphs"
  instead of a second "loading weights".

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rank_phases") as batch_op:
        batch_op.add_column(sa.Column("subject", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rank_phases") as batch_op:
        batch_op.drop_column("subject")
