"""Baseline: item memory, reconciler runs, locks and hosts.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "item_memory",
        sa.Column("reconciler", sa.String(100), primary_key=True),
        sa.Column("kind", sa.String(100), primary_key=True),
        sa.Column("item_id", sa.String(500), primary_key=True),
        sa.Column("direction", sa.String(16), nullable=False),
        sa.Column("streak", sa.Integer, nullable=False),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("last_err", sa.Text),
        sa.Column("retry_after_passes", sa.Integer, nullable=False),
    )
    op.create_table(
        "reconciler_runs",
        sa.Column("reconciler", sa.String(100), primary_key=True),
        sa.Column("as_of", UTCDateTime, nullable=False),
        sa.Column("last_ran_at", UTCDateTime),
        sa.Column("completed", sa.Boolean, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("health", sa.String(16), nullable=False),
        sa.Column("drift", sa.Integer, nullable=False),
        sa.Column("blocked", sa.Integer, nullable=False),
        sa.Column("dropped", sa.Integer, nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
        sa.Column("items", sa.JSON, nullable=False),
        sa.Column("duration_seconds", sa.Float),
        sa.Column("executed_passes", sa.Integer, nullable=False),
        sa.Column("skipped_passes", sa.Integer, nullable=False),
    )
    op.create_table(
        "locks",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("holder", sa.String(200)),
        sa.Column("expires_at", UTCDateTime),
    )
    op.create_table(
        "hosts",
        sa.Column("host", sa.String(253), primary_key=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("boot_id", sa.String(100)),
        sa.Column("finished_at", UTCDateTime),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("report", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    for table in ("hosts", "locks", "reconciler_runs", "item_memory"):
        op.drop_table(table)
