"""Per-status counts of ``pg_roles_desired`` kept by the database, and an index on (status, updated_at).

As ``buckets_0002``: the coverage histogram reads the counts and one index
probe per status; the rows already there are counted here, in the same
transaction as the triggers are made; the index on status alone goes.

Revision ID: pg_roles_0002
Revises: pg_roles_0001
"""

import sqlalchemy as sa
from alembic import op

from datum.sdk import count_statuses, drop_status_counts

revision = "pg_roles_0002"
down_revision = "pg_roles_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    count_statuses("pg_roles_desired", status_column="status", since_column="updated_at")
    op.execute(sa.text("DROP INDEX IF EXISTS ix_pg_roles_desired_status"))


def downgrade() -> None:
    op.create_index("ix_pg_roles_desired_status", "pg_roles_desired", ["status"])
    drop_status_counts("pg_roles_desired", status_column="status", since_column="updated_at")
