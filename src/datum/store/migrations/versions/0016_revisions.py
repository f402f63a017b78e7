"""The fleet directory's revisions a server has served: ``revisions`` (id, first seen, git commit).

Revision ID: 0016_revisions
Revises: 0015_pass_partitions
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0016_revisions"
down_revision = "0015_pass_partitions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("revisions"):  # else made by create_all from a schema that had it
        op.create_table(
            "revisions",
            sa.Column("id", sa.String(100), primary_key=True),
            sa.Column("first_seen", UTCDateTime, nullable=False),
            sa.Column("git_commit", sa.String(64)),
        )
        op.create_index("ix_revisions_first_seen", "revisions", ["first_seen"])


def downgrade() -> None:
    op.drop_index("ix_revisions_first_seen", "revisions")
    op.drop_table("revisions")
