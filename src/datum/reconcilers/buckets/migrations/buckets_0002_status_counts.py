"""Per-status counts of ``buckets`` kept by the database, and an index on (status, updated_at).

The coverage histogram reads the counts (a handful of rows) and one index
probe per status for the oldest row, instead of every row. The rows already
there are counted here, in the same transaction as the triggers are made.
The (status, updated_at) index also serves the work query, so the index on
status alone goes.

Revision ID: buckets_0002
Revises: buckets_0001
"""

import sqlalchemy as sa
from alembic import op

from datum.sdk import count_statuses, drop_status_counts

revision = "buckets_0002"
down_revision = "buckets_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    count_statuses("buckets", status_column="status", since_column="updated_at")
    op.execute(sa.text("DROP INDEX IF EXISTS ix_buckets_status"))


def downgrade() -> None:
    op.create_index("ix_buckets_status", "buckets", ["status"])
    drop_status_counts("buckets", status_column="status", since_column="updated_at")
