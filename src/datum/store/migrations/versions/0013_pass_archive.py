"""Every host pass kept (issue 23): ``pass_history`` host rows gain the times the host measured, its
``seq``, reason and report digest; ``pass_reports`` holds each distinct report once; ``pass_events`` one row
per resource a pass changed or found failed, drifted or blocked. Rows already there read their receipt as
their finish (the only time they have).

Revision ID: 0013_pass_archive
Revises: 0012_summary_reboot
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0013_pass_archive"
down_revision = "0012_summary_reboot"
branch_labels = None
depends_on = None

_COLUMNS = [
    ("started_at", UTCDateTime),
    ("finished_at", UTCDateTime),
    ("duration_seconds", sa.Float),
    ("seq", sa.BigInteger),
    ("reason", sa.Text),
    ("digest", sa.String(64)),
    ("older", sa.Boolean),
]


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    have = {c["name"] for c in inspector.get_columns("pass_history")}
    missing = [(name, kind) for name, kind in _COLUMNS if name not in have]  # else made by create_all
    if missing:
        with op.batch_alter_table("pass_history") as batch:
            for name, kind in missing:
                batch.add_column(sa.Column(name, kind))
        op.execute("UPDATE pass_history SET finished_at = at WHERE subject = 'host' AND finished_at IS NULL")
    indexes = {i["name"] for i in inspector.get_indexes("pass_history")}
    if "ix_pass_history_finished" not in indexes:
        op.create_index("ix_pass_history_finished", "pass_history", ["subject", "name", "finished_at", "id"])
    if "ix_pass_history_received" not in indexes:
        op.create_index("ix_pass_history_received", "pass_history", ["subject", "at"])
    if not inspector.has_table("pass_reports"):
        op.create_table(
            "pass_reports",
            sa.Column("digest", sa.String(64), primary_key=True),
            sa.Column("host", sa.String(253), nullable=False),
            sa.Column("report", sa.JSON, nullable=False),
            sa.Column("last_seen", UTCDateTime, nullable=False),
        )
        op.create_index("ix_pass_reports_last_seen", "pass_reports", ["last_seen"])
    if not inspector.has_table("pass_events"):
        op.create_table(
            "pass_events",
            sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
            sa.Column("pass_row", sa.BigInteger, nullable=False),
            sa.Column("host", sa.String(253), nullable=False),
            sa.Column("pass_id", sa.String(64)),
            sa.Column("finished_at", UTCDateTime, nullable=False),
            sa.Column("received_at", UTCDateTime, nullable=False),
            sa.Column("resource", sa.String(1000), nullable=False),
            sa.Column("type", sa.String(100), nullable=False),
            sa.Column("action", sa.String(16), nullable=False),
            sa.Column("state", sa.String(16), nullable=False),
            sa.Column("changed", sa.Boolean, nullable=False),
            sa.Column("reason", sa.Text),
        )
        op.create_index("ix_pass_events_finished", "pass_events", ["finished_at", "id"])
        op.create_index("ix_pass_events_host", "pass_events", ["host", "finished_at", "id"])
        op.create_index("ix_pass_events_pass_row", "pass_events", ["pass_row"])


def downgrade() -> None:
    op.drop_table("pass_events")
    op.drop_table("pass_reports")
    op.drop_index("ix_pass_history_received", "pass_history")
    op.drop_index("ix_pass_history_finished", "pass_history")
    with op.batch_alter_table("pass_history") as batch:
        for name, _kind in reversed(_COLUMNS):
            batch.drop_column(name)
