"""Store and forward: each host row remembers the pass id and sequence number of its latest pass;
a bearer token may be bound to one host.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    columns = {c["name"] for c in inspector.get_columns("hosts")}
    with op.batch_alter_table("hosts") as batch:
        if "pass_id" not in columns:
            batch.add_column(sa.Column("pass_id", sa.String(64)))
        if "seq" not in columns:
            batch.add_column(sa.Column("seq", sa.BigInteger))
    # ``tokens`` was made by datum.api.front.tokens on first use (migration 0006 makes it now); a store that has it gets the binding column.
    if inspector.has_table("tokens") and "host" not in {c["name"] for c in inspector.get_columns("tokens")}:
        with op.batch_alter_table("tokens") as batch:
            batch.add_column(sa.Column("host", sa.String(253)))


def downgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("seq")
        batch.drop_column("pass_id")
