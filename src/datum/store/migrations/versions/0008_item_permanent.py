"""A permanent failure's mark on its item: ``item_memory.permanent``.

The fingerprint of the desired value an apply failed on with
``PermanentError``; the item is not retried until its desired value no longer
matches it. NULL for every other item.

Revision ID: 0008_permanent
Revises: host_summaries
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_permanent"
down_revision = "host_summaries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("item_memory")}
    if "permanent" in columns:
        return  # made by create_all from a schema that had it
    with op.batch_alter_table("item_memory") as batch:
        batch.add_column(sa.Column("permanent", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("item_memory") as batch:
        batch.drop_column("permanent")
