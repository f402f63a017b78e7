"""``host_identities.hook_due``: a pending enrollment the approval hook is asked about off the request
(``datum.fleet.approvals``), by whichever server takes it.

Revision ID: 0031_enroll_hook_due
Revises: 0030_audit_sealed_later
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0031_enroll_hook_due"
down_revision = "0030_audit_sealed_later"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A store made by create_all before its migrations ran (the tests' pre-migration stores) may have it already.
    if "hook_due" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("host_identities")}:
        op.add_column("host_identities", sa.Column("hook_due", UTCDateTime))


def downgrade() -> None:
    with op.batch_alter_table("host_identities") as batch:
        batch.drop_column("hook_due")
