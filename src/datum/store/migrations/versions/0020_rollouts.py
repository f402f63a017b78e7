"""Staged rollouts: ``revision_files`` (each revision's files), ``rollouts`` and ``rollout_hosts`` (waves).

Revision ID: 0020_rollouts
Revises: 0019_events_index
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0020_rollouts"
down_revision = "0019_events_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = sa.inspect(op.get_bind()).has_table
    if not have("revision_files"):  # else made by create_all from a schema that had it
        op.create_table(
            "revision_files",
            sa.Column("revision", sa.String(100), primary_key=True),
            sa.Column("content", sa.LargeBinary, nullable=False),
            sa.Column("size", sa.BigInteger, nullable=False),
        )
    if not have("rollouts"):
        op.create_table(
            "rollouts",
            sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("revision", sa.String(100), nullable=False),
            sa.Column("previous", sa.String(100)),
            sa.Column("state", sa.String(16), nullable=False),
            sa.Column("wave", sa.Integer, nullable=False),
            sa.Column("last_wave", sa.Integer, nullable=False),
            sa.Column("started_at", UTCDateTime, nullable=False),
            sa.Column("wave_started_at", UTCDateTime, nullable=False),
            sa.Column("wave_completed_at", UTCDateTime),
            sa.Column("updated_at", UTCDateTime, nullable=False),
            sa.Column("by", sa.String(200)),
            sa.Column("reason", sa.Text),
            sa.Column("failed", sa.JSON(none_as_null=True)),
        )
    if not have("rollout_hosts"):
        op.create_table(
            "rollout_hosts",
            sa.Column("rollout", sa.BigInteger, primary_key=True),
            sa.Column("host", sa.String(253), primary_key=True),
            sa.Column("wave", sa.Integer, nullable=False),
            sa.Column("grp", sa.String(253), nullable=False),
        )
        op.create_index("ix_rollout_hosts_wave", "rollout_hosts", ["rollout", "wave"])


def downgrade() -> None:
    op.drop_index("ix_rollout_hosts_wave", "rollout_hosts")
    op.drop_table("rollout_hosts")
    op.drop_table("rollouts")
    op.drop_table("revision_files")
