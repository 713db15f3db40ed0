"""incident ledger: the culprit an incident opened with, and the signals that confirmed it

The detector's decisions are applied by one ledger (app/detect/ledger.py) for the server and for replay/eval.
eval judges the culprit named at opening and the confirmations; the server now stores both, so what eval
measures is what the server says.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("culprit_at_open", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("confirmed_by", sa.JSON(), nullable=False, server_default="[]"))
    # incidents from before: the culprit they carry is the best record of the one they opened with
    op.execute("UPDATE incidents SET culprit_at_open = culprit")


def downgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.drop_column("confirmed_by")
        batch.drop_column("culprit_at_open")
