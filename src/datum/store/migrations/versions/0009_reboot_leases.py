"""The fleet's reboot budget: ``reboot_groups`` (one row per group, the grant's lock) and ``reboot_leases``.

Revision ID: 0009_reboot_leases
Revises: 0008_permanent
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0009_reboot_leases"
down_revision = "0008_permanent"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("reboot_groups"):  # else made by create_all from a schema that had it
        op.create_table(
            "reboot_groups",
            sa.Column("group_name", sa.String(253), primary_key=True),
            sa.Column("grants", sa.BigInteger, nullable=False, server_default="0"),
        )
    if not inspector.has_table("reboot_leases"):
        op.create_table(
            "reboot_leases",
            sa.Column("host", sa.String(253), primary_key=True),
            sa.Column("group_name", sa.String(253), nullable=False),
            sa.Column("boot_id", sa.String(100), nullable=False),
            sa.Column("since", UTCDateTime, nullable=False),
            sa.Column("expires_at", UTCDateTime, nullable=False),
        )
        op.create_index("ix_reboot_leases_group", "reboot_leases", ["group_name", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_reboot_leases_group", "reboot_leases")
    op.drop_table("reboot_leases")
    op.drop_table("reboot_groups")
