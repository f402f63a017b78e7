"""When the pass now running claimed its reconciler (``reconciler_runs.running_since``): a pass that
runs past its ``pass_timeout`` (hung, or its process gone mid-pass) makes the reconciler read ``failing``.

Revision ID: 0011_running_since
Revises: 0010_history_pass_id
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0011_running_since"
down_revision = "0010_history_pass_id"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "running_since" not in {c["name"] for c in inspector.get_columns("reconciler_runs")}:  # else made by create_all
        with op.batch_alter_table("reconciler_runs") as batch:
            batch.add_column(sa.Column("running_since", UTCDateTime()))


def downgrade() -> None:
    with op.batch_alter_table("reconciler_runs") as batch:
        batch.drop_column("running_since")
