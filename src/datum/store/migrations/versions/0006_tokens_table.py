"""The ``tokens`` table comes from Alembic, no longer from ``create_all`` on first use.

A store whose ``tokens`` table ``datum token create`` or ``datum serve`` already
made keeps it and its rows: it gains only what it lacks (the principal's index,
and the host binding of migration 0003 if it was made after that ran).

Revision ID: 0006_tokens
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0006_tokens"
down_revision = "0005"
branch_labels = None
depends_on = None

_INDEX = "ix_tokens_principal"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("tokens"):
        op.create_table(
            "tokens",
            sa.Column("sha256", sa.String(64), primary_key=True),
            sa.Column("principal", sa.String(100), nullable=False),
            sa.Column("created_at", UTCDateTime, nullable=False),
            sa.Column("host", sa.String(253)),
        )
        op.create_index(_INDEX, "tokens", ["principal"])
        return
    if "host" not in {c["name"] for c in inspector.get_columns("tokens")}:
        with op.batch_alter_table("tokens") as batch:
            batch.add_column(sa.Column("host", sa.String(253)))
    if _INDEX not in {i["name"] for i in inspector.get_indexes("tokens")}:
        op.create_index(_INDEX, "tokens", ["principal"])


def downgrade() -> None:
    op.drop_table("tokens")
