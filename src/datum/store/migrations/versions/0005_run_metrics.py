"""Exact metric counts of the last executed pass: ``reconciler_runs.metrics``.

Every diverged item by reason and direction (not only the ``driftCap``
retained ones) and the directions whose breaker tripped. NULL for a row
written before this revision, until its reconciler's next executed pass.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("reconciler_runs")}
    if "metrics" in columns:
        return  # made by create_all from a schema that had it
    with op.batch_alter_table("reconciler_runs") as batch:
        batch.add_column(sa.Column("metrics", sa.JSON(none_as_null=True)))


def downgrade() -> None:
    with op.batch_alter_table("reconciler_runs") as batch:
        batch.drop_column("metrics")
