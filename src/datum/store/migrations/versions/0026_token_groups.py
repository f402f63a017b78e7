"""A token may be scoped to host groups (``datum token create --group web``): ``tokens.groups``.

The groups a token sees and acts on, comma-separated and sorted (``db,web``); NULL for every group, which is
what every token made before this migration keeps (``datum.api.front.tokens``).

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
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("groups", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("groups")
