"""The audit log (issue 37 item 4): ``audit_log``, one hash-chained row per acting request and per refusal, and
``audit_chain``, its head (the last row written, which every write locks) and its anchor (the last row pruned).

A store made by ``create_all`` before this ran keeps its tables and gains the chain's two rows.

Revision ID: 0028_audit_log
Revises: 0027_enrollment
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0028_audit_log"
down_revision = "0027_enrollment"
branch_labels = None
depends_on = None

GENESIS = "0" * 64


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("audit_log"):
        op.create_table(
            "audit_log",
            sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("at", UTCDateTime, nullable=False),
            sa.Column("principal", sa.String(253)),
            sa.Column("token", sa.String(12)),
            sa.Column("source", sa.String(253)),
            sa.Column("action", sa.String(200)),
            sa.Column("resource", sa.Text),
            sa.Column("request", sa.Text),
            sa.Column("outcome", sa.String(20), nullable=False),
            sa.Column("status", sa.Integer),
            sa.Column("policy", sa.Text),
            sa.Column("detail", sa.Text),
            sa.Column("prev", sa.String(64), nullable=False),
            sa.Column("hash", sa.String(64), nullable=False),
        )
        op.create_index("ix_audit_log_at", "audit_log", ["at"])
        op.create_index("ix_audit_log_principal", "audit_log", ["principal", "seq"])
    if not inspector.has_table("audit_chain"):
        op.create_table(
            "audit_chain",
            sa.Column("name", sa.String(16), primary_key=True),
            sa.Column("seq", sa.BigInteger, nullable=False),
            sa.Column("hash", sa.String(64), nullable=False),
            sa.Column("at", UTCDateTime),
            sa.Column("prev", sa.String(64)),
        )
    chain = sa.table("audit_chain", sa.column("name"), sa.column("seq"), sa.column("hash"))
    there = set(op.get_bind().execute(sa.select(chain.c.name)).scalars())
    op.bulk_insert(chain, [{"name": n, "seq": 0, "hash": GENESIS} for n in ("head", "anchor") if n not in there])


def downgrade() -> None:
    op.drop_table("audit_chain")
    op.drop_table("audit_log")
