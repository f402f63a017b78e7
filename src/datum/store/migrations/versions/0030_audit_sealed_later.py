"""The audit log's rows are written unchained and sealed into the chain afterwards (``datum.store.auditchain.seal``).

``audit_log`` gains ``id``, its key (given by the store at the insert: no lock, so any number of acting requests
commit at once), and its ``seq``, ``prev`` and ``hash`` may be empty until the row is sealed. The rows there keep
their seq, prev and hash, and take their seq for id, so the chain verifies as before and the ids go on after them.

A table made by ``create_all`` with ``id`` already is left as it is.

Revision ID: 0030_audit_sealed_later
Revises: 0029_spent_nonces
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0030_audit_sealed_later"
down_revision = "0029_spent_nonces"
branch_labels = None
depends_on = None

FIELDS = ["at", "principal", "token", "source", "action", "resource", "request", "outcome", "status", "policy",
          "detail", "prev", "hash"]


def _table(name: str, *, sealed_later: bool) -> None:
    op.create_table(
        name,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True)
        if sealed_later else sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        *([sa.Column("seq", sa.BigInteger)] if sealed_later else []),
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
        sa.Column("prev", sa.String(64), nullable=sealed_later),
        sa.Column("hash", sa.String(64), nullable=sealed_later),
        sqlite_autoincrement=sealed_later,
    )


def upgrade() -> None:
    bind = op.get_bind()
    if "id" in {c["name"] for c in sa.inspect(bind).get_columns("audit_log")}:
        return
    # Made anew and filled in the chain's order: SQLite cannot change a table's key in place, and one way for both
    # stores keeps their tables alike (the sequence behind ``id`` named as create_all names it).
    op.rename_table("audit_log", "audit_log_chained")
    if bind.dialect.name == "postgresql":  # its key's index keeps its name, which the new table's takes
        op.execute("ALTER INDEX audit_log_pkey RENAME TO audit_log_chained_pkey")
    op.drop_index("ix_audit_log_at", "audit_log_chained")
    op.drop_index("ix_audit_log_principal", "audit_log_chained")
    _table("audit_log", sealed_later=True)
    columns = ", ".join(FIELDS)
    op.execute(f"INSERT INTO audit_log (id, seq, {columns}) SELECT seq, seq, {columns} FROM audit_log_chained "
               "ORDER BY seq")
    op.drop_table("audit_log_chained")
    if bind.dialect.name == "postgresql":
        op.execute("SELECT setval(pg_get_serial_sequence('audit_log', 'id'), COALESCE(MAX(id), 0) + 1, false) "
                   "FROM audit_log")
    _indexes()


def _indexes() -> None:
    op.create_index("ix_audit_log_seq", "audit_log", ["seq"], unique=True)
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_index("ix_audit_log_principal", "audit_log", ["principal", "id"])
    op.create_index("ix_audit_log_unsealed", "audit_log", ["id"], sqlite_where=sa.text("seq IS NULL"),
                    postgresql_where=sa.text("seq IS NULL"))


def downgrade() -> None:
    # Rows not sealed yet have no place in a chain of 0028's: they go (seal them first: datum audit verify).
    op.rename_table("audit_log", "audit_log_sealed_later")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER INDEX audit_log_pkey RENAME TO audit_log_sealed_later_pkey")
    for index in ("ix_audit_log_seq", "ix_audit_log_at", "ix_audit_log_principal", "ix_audit_log_unsealed"):
        op.drop_index(index, "audit_log_sealed_later")
    _table("audit_log", sealed_later=False)
    columns = ", ".join(FIELDS)
    op.execute(f"INSERT INTO audit_log (seq, {columns}) SELECT seq, {columns} FROM audit_log_sealed_later "
               "WHERE seq IS NOT NULL")
    op.drop_table("audit_log_sealed_later")
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_index("ix_audit_log_principal", "audit_log", ["principal", "seq"])
