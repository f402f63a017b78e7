"""The ``hosts_revoked`` table: the undeclared hosts whose agent tokens the ``hosts`` reconciler revoked.

Revision ID: hosts_0001
Revises: (root of the hosts branch)
"""

import sqlalchemy as sa
from alembic import op

from datum.sdk import UTCDateTime

revision = "hosts_0001"
down_revision = None
branch_labels = ("hosts",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hosts_revoked",
        sa.Column("host", sa.String(253), primary_key=True),
        sa.Column("revoked_at", UTCDateTime, nullable=False),
        sa.Column("tokens", sa.Integer, nullable=False),
        sa.Column("last_report_at", UTCDateTime),
    )


def downgrade() -> None:
    op.drop_table("hosts_revoked")
