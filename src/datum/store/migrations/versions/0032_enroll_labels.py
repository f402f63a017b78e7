"""Labels set at enrollment: ``join_tokens.labels`` (``datum enroll create --label``) and ``host_identities.labels``
(the token's, given to each host enrolled with it), each a JSON object; ``nodes.yaml`` matches on them as on its
own ``labels:`` (``datum.fleet.labels``).

Revision ID: 0032_enroll_labels
Revises: 0031_enroll_hook_due
"""

import sqlalchemy as sa
from alembic import op

revision = "0032_enroll_labels"
down_revision = "0031_enroll_hook_due"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A store made by create_all before its migrations ran (the tests' pre-migration stores) may have them already.
    inspector = sa.inspect(op.get_bind())
    for table in ("join_tokens", "host_identities"):
        if "labels" not in {c["name"] for c in inspector.get_columns(table)}:
            op.add_column(table, sa.Column("labels", sa.Text))


def downgrade() -> None:
    for table in ("host_identities", "join_tokens"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("labels")
