"""Failures a resume accepted: ``rollout_hosts.accepted_at`` (datum.store.rollouts.command, ``resume``).

Revision ID: 0022_rollout_accepted
Revises: 0021_reboot_requests
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0022_rollout_accepted"
down_revision = "0021_reboot_requests"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "accepted_at" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("rollout_hosts")}:
        op.add_column("rollout_hosts", sa.Column("accepted_at", UTCDateTime))


def downgrade() -> None:
    with op.batch_alter_table("rollout_hosts") as batch:
        batch.drop_column("accepted_at")
