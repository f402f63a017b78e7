"""The ``buckets`` table: one row per bucket asked for, and its status.

A store whose table was made by ``create_all`` (before this branch existed)
keeps it as it is: this revision is then only recorded.

Revision ID: buckets_0001
Revises: (root of the buckets branch)
"""

import sqlalchemy as sa
from alembic import op

from datum.sdk import UTCDateTime

revision = "buckets_0001"
down_revision = None
branch_labels = ("buckets",)
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("buckets"):
        return  # made by create_all before the branch existed
    op.create_table(
        "buckets",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_buckets_status", "buckets", ["status"])


def downgrade() -> None:
    op.drop_table("buckets")
