"""a launch is one engine world, not a deployment name

- ``launches.world``: the engine's own world key the agent reports (its rendezvous, its torchelastic run, or
  its process tree on one host; agents/collectors/ownership.py). Replicas of one deployment are launches of
  their own, told apart by it; NULL for data an agent could not place (old agents, log-only launches).
- ``launches.host_id``: the host whose batch opened the launch (a world with no key of its own is the
  launch of one host).
- ``launches.acknowledged_at``: when a person acknowledged how the launch ended; until then the overview keeps
  showing a crashed launch's cause ("crashed after a deadlock, suspect TP3").
- ``hosts.reported_until``: the newest time the host's agent has reported up to (the ``sent_at`` of its newest
  stored batch, on the server's clock). The detector judges a launch's silence up to there, not up to its own
  wall clock: a server late reading its own ingest must not call its lag the engine's stall.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch_op:
        batch_op.add_column(sa.Column("reported_until", sa.Float(), nullable=True))
    with op.batch_alter_table("launches") as batch_op:
        batch_op.add_column(sa.Column("world", sa.String(length=256), nullable=True))
        batch_op.add_column(sa.Column("host_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("acknowledged_at", sa.Float(), nullable=True))
        batch_op.create_foreign_key(op.f("fk_launches_host_id_hosts"), "hosts", ["host_id"], ["id"])


def downgrade() -> None:
    with op.batch_alter_table("hosts") as batch_op:
        batch_op.drop_column("reported_until")
    with op.batch_alter_table("launches") as batch_op:
        batch_op.drop_constraint(op.f("fk_launches_host_id_hosts"), type_="foreignkey")
        batch_op.drop_column("acknowledged_at")
        batch_op.drop_column("host_id")
        batch_op.drop_column("world")
