"""Pass history: one row per executed reconciler pass and per stored host pass (``datum.store.history``).

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("pass_history"):
        return  # made by create_all from a schema that had it
    op.create_table(
        "pass_history",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("subject", sa.String(16), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("completed", sa.Boolean, nullable=False),
        sa.Column("drift", sa.Integer, nullable=False),
        sa.Column("blocked", sa.Integer, nullable=False),
        sa.Column("counts", sa.JSON, nullable=False),
        sa.Column("items", sa.JSON(none_as_null=True)),
    )
    op.create_index("ix_pass_history_subject_at", "pass_history", ["subject", "name", "at"])


def downgrade() -> None:
    op.drop_index("ix_pass_history_subject_at", "pass_history")
    op.drop_table("pass_history")
