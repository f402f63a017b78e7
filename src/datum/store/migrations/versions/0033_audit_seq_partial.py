"""The audit log's seq index holds the sealed rows only (``WHERE seq IS NOT NULL``): a row is written with no seq
and sealed a second later, so the index's entry is made by the seal, in its batch, not by the write of every
report's row beside an entry for NULL that the seal then moves. Every query on seq (``seq > n``, ``seq <= n``,
``seq IS NOT NULL``) is one this index answers; it is still unique, so two seals can never give one seq twice.

Revision ID: 0033_audit_seq_partial
Revises: 0032_enroll_labels
"""

import sqlalchemy as sa
from alembic import op

revision = "0033_audit_seq_partial"
down_revision = "0032_enroll_labels"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_audit_log_seq", "audit_log")
    op.create_index("ix_audit_log_seq", "audit_log", ["seq"], unique=True,
                    sqlite_where=sa.text("seq IS NOT NULL"), postgresql_where=sa.text("seq IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_audit_log_seq", "audit_log")
    op.create_index("ix_audit_log_seq", "audit_log", ["seq"], unique=True)
