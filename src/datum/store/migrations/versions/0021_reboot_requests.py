"""Reboots in order, health first: ``reboot_requests`` (who waits for a reboot lease, until when) and
``reboot_leases.unhealthy`` (why a host back from its reboot does not free its lease yet).

Revision ID: 0021_reboot_requests
Revises: 0020_rollouts
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0021_reboot_requests"
down_revision = "0020_rollouts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("reboot_requests"):  # else made by create_all from a schema that had it
        op.create_table(
            "reboot_requests",
            sa.Column("host", sa.String(253), primary_key=True),
            sa.Column("group_name", sa.String(253), nullable=False),
            sa.Column("boot_id", sa.String(100), nullable=False),
            sa.Column("asked_at", UTCDateTime, nullable=False),
            sa.Column("expires_at", UTCDateTime, nullable=False),
        )
        op.create_index("ix_reboot_requests_group", "reboot_requests", ["group_name", "expires_at"])
    if "unhealthy" not in {c["name"] for c in inspector.get_columns("reboot_leases")}:
        op.add_column("reboot_leases", sa.Column("unhealthy", sa.String(1000)))


def downgrade() -> None:
    with op.batch_alter_table("reboot_leases") as batch:
        batch.drop_column("unhealthy")
    op.drop_index("ix_reboot_requests_group", "reboot_requests")
    op.drop_table("reboot_requests")
