"""The host pass each history row is (``pass_history.pass_id``): a pass older than the host's latest is
kept in its history once, however often its agent sends it again.

Revision ID: 0010_history_pass_id
Revises: 0009_reboot_leases
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_history_pass_id"
down_revision = "0009_reboot_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "pass_id" not in {c["name"] for c in inspector.get_columns("pass_history")}:  # else made by create_all
        with op.batch_alter_table("pass_history") as batch:
            batch.add_column(sa.Column("pass_id", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("pass_history") as batch:
        batch.drop_column("pass_id")
