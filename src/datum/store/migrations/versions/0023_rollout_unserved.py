"""A released host its rollout's revision could not be served to: ``rollout_hosts.unserved`` and
``unserved_code`` (datum.store.rollouts.unserved).

Revision ID: 0023_rollout_unserved
Revises: 0022_rollout_accepted
"""

import sqlalchemy as sa
from alembic import op

revision = "0023_rollout_unserved"
down_revision = "0022_rollout_accepted"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("rollout_hosts")}
    if "unserved" not in have:
        op.add_column("rollout_hosts", sa.Column("unserved", sa.Text))
    if "unserved_code" not in have:
        op.add_column("rollout_hosts", sa.Column("unserved_code", sa.String(20)))


def downgrade() -> None:
    with op.batch_alter_table("rollout_hosts") as batch:
        batch.drop_column("unserved_code")
        batch.drop_column("unserved")
