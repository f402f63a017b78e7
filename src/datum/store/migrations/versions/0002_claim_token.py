"""The reconciler's fencing token: ``reconciler_runs.claim``, raised on every claim.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("reconciler_runs")}
    if "claim" in columns:
        return  # a store made by create_all before migrations, from a schema that had it
    with op.batch_alter_table("reconciler_runs") as batch:
        batch.add_column(sa.Column("claim", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("reconciler_runs") as batch:
        batch.drop_column("claim")
