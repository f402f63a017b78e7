"""A token may be scoped to host groups (``datum token create --group web``): ``tokens.groups``.

The groups a token sees and acts on, comma-separated and sorted (``db,web``); NULL for every group, which is
what every token made before this migration keeps (``datum.api.front.tokens``). The hosts of some groups are
read through an index on (``group_name``, ``host``): every list such a token reads filters by it.

Revision ID: 0026_token_groups
Revises: 0025_rollout_events
"""

import sqlalchemy as sa
from alembic import op

revision = "0026_token_groups"
down_revision = "0025_rollout_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A table made by create_all from the current schema (before 0006 took it over) has the column already.
    inspector = sa.inspect(op.get_bind())
    if "groups" not in {c["name"] for c in inspector.get_columns("tokens")}:
        with op.batch_alter_table("tokens") as batch:
            batch.add_column(sa.Column("groups", sa.Text))
    if "ix_hosts_group_host" not in {i["name"] for i in inspector.get_indexes("hosts")}:
        op.create_index("ix_hosts_group_host", "hosts", ["group_name", "host"])


def downgrade() -> None:
    op.drop_index("ix_hosts_group_host", "hosts")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("groups")
