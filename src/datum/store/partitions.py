"""The pass archive's day partitions on PostgreSQL: made ahead, dropped whole (issue 23 item 1).

On PostgreSQL the archive's two large tables are range-partitioned by the day (UTC) the server received
a pass, so ``[server] retention`` drops a day at a time (``DROP TABLE`` of a partition: no row-by-row
delete, no dead rows to vacuum) instead of deleting rows:

- ``pass_history`` is partitioned by LIST on ``subject``: its host rows go to ``pass_history_host``,
  itself partitioned by RANGE on ``at`` (the receipt) into ``pass_history_host_YYYYMMDD``; the
  reconciler's rows go to ``pass_history_other`` (the default), untouched: their writer prunes them
  (``datum.store.history.record``, ``[server] history``) as before.
- ``pass_events`` is partitioned by RANGE on ``received_at`` (a pass's receipt, the same instant as its
  ``pass_history.at``) into ``pass_events_YYYYMMDD``: a pass and its events live in the same day and go
  together.
- ``pass_reports`` is not partitioned: it is keyed by a report's digest, shared by passes of many days
  (most passes name a report kept days earlier), its ``last_seen`` moves forward with every pass that
  names it, and ``ON CONFLICT (digest)`` needs a unique key on the digest alone (a partitioned table's
  keys must hold the partition key). It holds one row per distinct report, a small fraction of the
  passes, and keeps its batched deletes by ``last_seen`` (``datum.store.passes.prune_passes``).

Partitions are keyed by the server's clock (the receipt), never the agent's, so the day being written is
always one made ahead (``AHEAD`` days, by the migration, at ``datum serve`` start and by every retention
run). A row no day partition takes (the server's clock jumped, the retention task has not run for days)
lands in the *default* partition: intake never fails for want of a partition, and no DDL ever runs in the
request path. When a day is made later, rows of that day the default holds are moved into it in the same
transaction. Retention deletes the default's old rows in batches, as on SQLite.

A day is dropped once it ends before the retention's bound: a pass is kept at least ``retention`` and at
most a day longer.

Tables, partitions and their names are PostgreSQL's; on SQLite every function here does nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

AHEAD = 3  # days made ahead of today
LOCK = 0x64617475_6D706172  # advisory lock key ("datumpar"): one maker of partitions at a time


@dataclass(frozen=True)
class Ranged:
    """One table partitioned by day: the parent that holds the days, its day prefix and the receipt column."""

    parent: str
    prefix: str
    column: str

    @property
    def default(self) -> str:
        return f"{self.prefix}_default"

    def day(self, d: date) -> str:
        return f"{self.prefix}_{d:%Y%m%d}"


HISTORY = Ranged("pass_history_host", "pass_history_host", "at")
EVENTS = Ranged("pass_events", "pass_events", "received_at")
RANGED = (HISTORY, EVENTS)


def day_start(at: datetime) -> datetime:
    """The start (UTC midnight) of the day ``at`` falls in: the lower bound of its day partition."""
    at = at.astimezone(UTC)
    return datetime(at.year, at.month, at.day, tzinfo=UTC)


def _bounds(d: date) -> tuple[str, str]:
    lo = datetime(d.year, d.month, d.day, tzinfo=UTC)
    return lo.isoformat(), (lo + timedelta(days=1)).isoformat()


def partitioned(conn: Connection) -> bool:
    """Whether the archive is day-partitioned here (PostgreSQL, migration 0015 run)."""
    if conn.dialect.name != "postgresql":
        return False
    return bool(conn.execute(sa.text(
        "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid "
        "WHERE c.relname = 'pass_history_host' AND c.relnamespace = to_regnamespace(current_schema()))"
    )).scalar())


def days(conn: Connection, table: Ranged) -> dict[date, str]:
    """The day partitions of ``table`` there are now, by day."""
    names = conn.execute(sa.text(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass(:parent)"
    ), {"parent": table.parent}).scalars()
    out = {}
    for name in names:
        suffix = name[len(table.prefix) + 1:]
        if name.startswith(table.prefix + "_") and suffix.isdigit() and len(suffix) == 8:
            out[datetime.strptime(suffix, "%Y%m%d").date()] = name
    return out


def make_days(conn: Connection, wanted: Iterable[date]) -> list[str]:
    """Make the day partitions of ``wanted`` days that are missing, on both tables, in the caller's
    transaction (under an advisory lock: replicas never race): the rows of such a day the default
    partition holds move into it. The partitions made."""
    wanted = sorted(set(wanted))
    if not wanted or not partitioned(conn):
        return []
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK})
    made = []
    for table in RANGED:
        have = days(conn, table)
        for d in wanted:
            if d in have:
                continue
            made.append(_make_day(conn, table, d))
    return made


def _make_day(conn: Connection, table: Ranged, d: date) -> str:
    name, (lo, hi) = table.day(d), _bounds(d)
    col, default = table.column, table.default
    # Nothing the default holds may belong to the new day once it is attached: move such rows first, under a
    # lock that keeps intake from adding more meanwhile (taken only when a day is made, a few times a day).
    conn.execute(sa.text(f"LOCK TABLE {default} IN SHARE ROW EXCLUSIVE MODE"))
    stray = conn.execute(sa.text(
        f"SELECT EXISTS (SELECT 1 FROM {default} WHERE {col} >= CAST(:lo AS timestamptz) AND {col} < CAST(:hi AS timestamptz))"
    ), {"lo": lo, "hi": hi}).scalar()
    if not stray:
        conn.execute(sa.text(
            f"CREATE TABLE {name} PARTITION OF {table.parent} FOR VALUES FROM ('{lo}') TO ('{hi}')"
        ))
        return name
    conn.execute(sa.text(f"CREATE TABLE {name} (LIKE {table.parent} INCLUDING DEFAULTS)"))
    conn.execute(sa.text(
        f"WITH moved AS (DELETE FROM {default} WHERE {col} >= CAST(:lo AS timestamptz) AND {col} < CAST(:hi AS timestamptz) "
        f"RETURNING *) INSERT INTO {name} SELECT * FROM moved"
    ), {"lo": lo, "hi": hi})
    conn.execute(sa.text(f"ALTER TABLE {table.parent} ATTACH PARTITION {name} FOR VALUES FROM ('{lo}') TO ('{hi}')"))
    return name


def ahead(today: date, n: int = AHEAD) -> list[date]:
    """Today and the ``n`` days after it."""
    return [today + timedelta(days=i) for i in range(n + 1)]


def drop_days(conn: Connection, before: datetime) -> tuple[int, list[str]]:
    """Drop the day partitions (both tables) whose day ends at or before ``before``, in the caller's
    transaction: how many host passes they held, and the partitions dropped."""
    if not partitioned(conn):
        return 0, []
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK})
    gone, dropped = 0, []
    bound = day_start(before)
    for table in RANGED:
        for d, name in sorted(days(conn, table).items()):
            if datetime(d.year, d.month, d.day, tzinfo=UTC) + timedelta(days=1) > bound:
                continue
            if table is HISTORY:
                gone += int(conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one())
            conn.execute(sa.text(f"DROP TABLE {name}"))
            dropped.append(name)
    return gone, dropped



def is_partition(table: str) -> bool:
    """Whether ``table`` is one of the archive's partitions (not declared in ``datum.store.schema``: made here)."""
    return table in ("pass_history_host", "pass_history_other", HISTORY.default, EVENTS.default) or any(
        table.startswith(t.prefix + "_") and table[len(t.prefix) + 1:].isdigit() for t in RANGED
    )
