"""The nonces hosts have signed (``spent_nonces``): an enrollment's or a session's proof is taken once, on every
replica of the store (``datum.store.nonces``).

Revision ID: 0029_spent_nonces
Revises: 0028_audit_log
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0029_spent_nonces"
down_revision = "0028_audit_log"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A store made by create_all before its migrations ran (the tests' pre-migration stores) may have it already.
    if not sa.inspect(op.get_bind()).has_table("spent_nonces"):
        op.create_table(
            "spent_nonces",
            sa.Column("nonce", sa.String(100), primary_key=True),
            sa.Column("expires_at", UTCDateTime, nullable=False),
        )
        op.create_index("ix_spent_nonces_expires", "spent_nonces", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_spent_nonces_expires", "spent_nonces")
    op.drop_table("spent_nonces")
