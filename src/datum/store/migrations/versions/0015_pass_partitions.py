"""The pass archive by day on PostgreSQL (issue 23 item 1, ``datum.store.partitions``): ``pass_history`` becomes
partitioned by LIST on ``subject`` (its host rows RANGE-partitioned by day of ``at``, everything else in a
default partition) and ``pass_events`` RANGE-partitioned by day of ``received_at``, each with a default
partition. The rows there are copied into the new tables (a day partition for every day they hold, and today
and ``AHEAD`` days after); ids keep their sequence. Primary keys hold the partition keys, as PostgreSQL
requires: ``(id, subject, at)`` and ``(id, received_at)``. ``pass_reports`` stays as it is (see the module).
SQLite: nothing (retention deletes in batches there).

Revision ID: 0015_pass_partitions
Revises: 0014_host_counts
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from datum.store.partitions import EVENTS, HISTORY, ahead, make_days, partitioned

revision = "0015_pass_partitions"
down_revision = "0014_host_counts"
branch_labels = None
depends_on = None

# Each table's indexes, as datum.store.schema names them (made on the parent: every partition gets its own).
_HISTORY_INDEXES = {
    "ix_pass_history_subject_at": "subject, name, at",
    "ix_pass_history_finished": "subject, name, finished_at, id",
    "ix_pass_history_received": "subject, at",
}
_EVENTS_INDEXES = {
    "ix_pass_events_finished": "finished_at, id",
    "ix_pass_events_host": "host, finished_at, id",
    "ix_pass_events_pass_row": "pass_row",
}


def _set_aside(table: str, indexes: dict[str, str]) -> str:
    """Rename ``table`` out of the way with its key and drop its indexes (their names are the new table's)."""
    old = f"{table}_unpartitioned"
    op.execute(f"ALTER TABLE {table} RENAME TO {old}")
    op.execute(f"ALTER TABLE {old} RENAME CONSTRAINT {table}_pkey TO {old}_pkey")
    for name in indexes:
        op.execute(f"DROP INDEX IF EXISTS {name}")
    return old


def _take_over(table: str, old: str, indexes: dict[str, str]) -> None:
    """Copy ``old``'s rows into the new ``table``, give it the id sequence and the indexes, drop ``old``."""
    op.execute(f"INSERT INTO {table} SELECT * FROM {old}")
    seq = op.get_bind().execute(sa.text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": old}).scalar()
    if seq:
        op.execute(f"ALTER SEQUENCE {seq} OWNED BY {table}.id")
    op.execute(f"DROP TABLE {old}")
    for name, columns in indexes.items():
        op.execute(f"CREATE INDEX {name} ON {table} ({columns})")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or partitioned(bind):
        return
    old = _set_aside("pass_history", _HISTORY_INDEXES)
    op.execute(f"CREATE TABLE pass_history (LIKE {old} INCLUDING DEFAULTS) PARTITION BY LIST (subject)")
    op.execute("ALTER TABLE pass_history ADD PRIMARY KEY (id, subject, at)")
    op.execute(f"CREATE TABLE {HISTORY.parent} PARTITION OF pass_history FOR VALUES IN ('host') PARTITION BY RANGE (at)")
    op.execute(f"CREATE TABLE {HISTORY.default} PARTITION OF {HISTORY.parent} DEFAULT")
    op.execute("CREATE TABLE pass_history_other PARTITION OF pass_history DEFAULT")

    old_events = _set_aside("pass_events", _EVENTS_INDEXES)
    op.execute(f"CREATE TABLE pass_events (LIKE {old_events} INCLUDING DEFAULTS) PARTITION BY RANGE (received_at)")
    op.execute("ALTER TABLE pass_events ADD PRIMARY KEY (id, received_at)")
    op.execute(f"CREATE TABLE {EVENTS.default} PARTITION OF pass_events DEFAULT")

    # A day partition for every day the rows there were received, and the days ahead, before the copy.
    held = bind.execute(sa.text(
        f"SELECT DISTINCT CAST(date_trunc('day', at AT TIME ZONE 'UTC') AS date) FROM {old} WHERE subject = 'host' "
        f"UNION SELECT DISTINCT CAST(date_trunc('day', received_at AT TIME ZONE 'UTC') AS date) FROM {old_events}"
    )).scalars().all()
    make_days(bind, [*held, *ahead(datetime.now(UTC).date())])
    _take_over("pass_history", old, _HISTORY_INDEXES)
    _take_over("pass_events", old_events, _EVENTS_INDEXES)


def _flatten(table: str, indexes: dict[str, str], key: str) -> None:
    old = f"{table}_partitioned"
    op.execute(f"ALTER TABLE {table} RENAME TO {old}")
    for name in indexes:
        op.execute(f"DROP INDEX IF EXISTS {name}")
    op.execute(f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS)")
    op.execute(f"ALTER TABLE {old} RENAME CONSTRAINT {table}_pkey TO {old}_pkey")
    op.execute(f"ALTER TABLE {table} ADD PRIMARY KEY ({key})")
    _take_over(table, old, indexes)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or not partitioned(bind):
        return
    _flatten("pass_history", _HISTORY_INDEXES, "id")
    _flatten("pass_events", _EVENTS_INDEXES, "id")
