"""Per-status row counts of a desired-state table, kept by the database itself.

The coverage histogram needs, per status, how many rows and the oldest row's
age. Counting at query time is a scan of every row (300 ms for 1,000,000 on
SQLite); this keeps the counts in ``<table>_status_counts`` (``status``,
``n``), maintained by triggers on the table in the transaction of every write,
whoever writes (the reconciler, the CLI, a route, an operator's SQL). The ages
come from an index on (status, since), one index probe per status.

SQLite: one row per status, upserted by row triggers. SQLite has one writer at
a time, so the counts are exact. A ``REPLACE`` fires the delete triggers of
the row it removes only with ``recursive_triggers`` on, which the store's
connections set (``datum.store.engine``); a connection of another tool
without it counts a replaced row twice (docs/extending.md says so).

PostgreSQL: the table is a log of signed deltas. Statement triggers (with
transition tables) *append* ``(status, ±rows)``; they never update a shared
counter row, so concurrent writers neither wait on each other nor deadlock,
and a rolled-back writer leaves nothing. The count of a status is the sum of
its deltas, read in one statement (one snapshot). ``compact`` folds the log
into one row per status in one statement (``DELETE ... RETURNING`` feeding an
``INSERT``): a delta committed meanwhile is not in its snapshot and stays;
one compaction at a time (an advisory lock); it then vacuums the log, whose
folded rows every read would otherwise still scan. A coverage read folds a
log longer than ``COMPACT_AT`` rows. ``TRUNCATE`` of the table empties the
counts (a statement trigger).

A plugin turns this on in a migration of its own branch (``count_statuses``),
which also counts the rows already there, and declares it with
``CoverageSpec(..., counted=True)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import sqlalchemy as sa

log = logging.getLogger(__name__)

SUFFIX = "_status_counts"
# A delta log longer than this is folded after a coverage read (PostgreSQL).
COMPACT_AT = 1000
_SMALL_PAGES = 16  # a folded log larger than this is folded once more, to give its pages back
_MAX_IDENTIFIER = 63  # PostgreSQL truncates longer names silently


def counts_name(table: str, counts: str | None = None) -> str:
    """The name of ``table``'s count table: ``counts`` when the table keeps more than one (a second counted
    column), else ``<table>_status_counts``."""
    return counts or f"{table}{SUFFIX}"


def counts_table(table: str, counts: str | None = None, by: Iterable[str] = ()) -> sa.TableClause:
    """``table``'s count table, to query: ``by``'s columns, ``status``, ``n`` (a count on SQLite, a delta on
    PostgreSQL)."""
    return sa.table(
        counts_name(table, counts), *(sa.column(k, sa.String) for k in by), sa.column("status", sa.String),
        sa.column("n", sa.BigInteger),
    )


def _index_name(table: str, status_column: str, since_column: str) -> str:
    return f"ix_{table}_{status_column}_{since_column}"


def _names(table: str, counts: str | None = None) -> dict[str, str]:
    if counts is not None:  # a second count of the table: everything named after its count table
        return {"counts": counts, **{k: f"{counts}_{k}" for k in ("function", "insert", "update", "delete", "truncate")}}
    return {
        "counts": counts_name(table),
        "function": f"{table}_count_statuses",
        "insert": f"{table}_count_insert",
        "update": f"{table}_count_update",
        "delete": f"{table}_count_delete",
        "truncate": f"{table}_count_truncate",
    }


def _lock_key(table: str, counts: str | None = None) -> str:
    return f"datum-status-counts:{counts or table}"


def count_statuses(
    table: str,
    *,
    status_column: str = "status",
    since_column: str | None = "updated_at",
    bind: sa.Connection | None = None,
    counts: str | None = None,
    by: Mapping[str, str] | None = None,
) -> None:
    """Keep per-status counts of ``table`` from now on, counting the rows it already holds.

    Call it in an ``upgrade()`` of the plugin's own Alembic branch (``bind``
    defaults to the migration's connection). Creates ``<table>_status_counts``,
    the triggers that maintain it, and an index on (``status_column``,
    ``since_column``) for the ages. The rows already there are counted in the
    same transaction as the triggers are made, with the table's writers held
    off meanwhile: no write is counted twice or missed. ``status_column`` must
    be ``NOT NULL``.

    A second count of the same table is named ``counts`` (its triggers are
    named after it), and may count by more than the status: ``by`` maps each
    further column of the count table to the table's column it counts (the
    fleet's hosts by group and state: ``counts="hosts_group_status_counts",
    by={"group_name": "group_name"}``); a NULL there is counted as ``''``.
    """
    conn = bind if bind is not None else _migration_connection()
    names = _names(table, counts)
    index = _index_name(table, status_column, since_column or "")
    if any(len(n) > _MAX_IDENTIFIER for n in [*names.values(), index]):
        raise ValueError(f"{table!r} is too long a name to name its count table, triggers and index after")
    columns = {c["name"]: c for c in sa.inspect(conn).get_columns(table)}
    if status_column not in columns:
        raise ValueError(f"{table} has no column {status_column!r}")
    if columns[status_column]["nullable"]:
        raise ValueError(f"{table}.{status_column} must be NOT NULL to be counted")
    missing = [c for c in (by or {}).values() if c not in columns]
    if missing:
        raise ValueError(f"{table} has no column {missing[0]!r}")
    q = conn.dialect.identifier_preparer.quote
    t, s, c = q(table), q(status_column), q(names["counts"])
    keys = _Keys(conn.dialect, by or {}, status_column)
    if conn.dialect.name == "postgresql":
        _install_postgresql(conn, _lock_key(table, counts), names, t, keys, c)
    else:
        _install_sqlite(conn, names, t, keys, c)
    if since_column is not None:
        conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {q(index)} ON {t} ({s}, {q(since_column)})"))


class _Keys:
    """What a count table counts by, as SQL: its key columns (``by``'s, then ``status``) and the counted
    table's columns they come from (NULL counted as ``''``)."""

    def __init__(self, dialect: sa.Dialect, by: Mapping[str, str], status_column: str) -> None:
        q = dialect.identifier_preparer.quote
        self.pairs = [(q(k), q(v)) for k, v in by.items()] + [(q("status"), q(status_column))]
        self.columns = ", ".join(k for k, _v in self.pairs)  # the count table's key columns
        self.sources = [v for _k, v in self.pairs]  # the counted table's columns

    def values(self, row: str = "") -> list[str]:
        """The key's values from ``row`` (``NEW``, ``OLD``, or the table's own columns): ``by``'s NULL as ``''``,
        the status as it is (NOT NULL)."""
        prefix = f"{row}." if row else ""
        *further, status = [f"{prefix}{v}" for _k, v in self.pairs]
        return [f"COALESCE({v}, '')" for v in further] + [status]

    def of(self, row: str = "") -> str:
        return ", ".join(self.values(row))

    def aliased(self) -> str:
        """``of()`` with each value named as its count table's column."""
        return ", ".join(f"{v} AS {k}" for (k, _v), v in zip(self.pairs, self.values(), strict=True))

    @property
    def positions(self) -> str:
        return ", ".join(str(i + 1) for i in range(len(self.pairs)))


def _install_sqlite(conn: sa.Connection, names: dict[str, str], t: str, keys: _Keys, c: str) -> None:
    q = conn.dialect.identifier_preparer.quote
    # Python's sqlite3 runs DDL outside a transaction unless one is open: the table may
    # outlive a failed attempt, hence IF NOT EXISTS and the DELETE. The DELETE is a write:
    # it opens the transaction and takes SQLite's write lock before the backfill reads,
    # and the triggers below are made in that same transaction.
    declared = ", ".join(f"{k} VARCHAR NOT NULL" for k, _v in keys.pairs)
    conn.execute(sa.text(
        f"CREATE TABLE IF NOT EXISTS {c} ({declared}, n BIGINT NOT NULL, PRIMARY KEY ({keys.columns}))"
    ))
    conn.execute(sa.text(f"DELETE FROM {c}"))
    conn.execute(sa.text(
        f"INSERT INTO {c} ({keys.columns}, n) SELECT {keys.of()}, count(*) FROM {t} GROUP BY {keys.positions}"
    ))

    def bump(row: str, sign: str) -> str:
        return (
            f"INSERT INTO {c} ({keys.columns}, n) VALUES ({keys.of(row)}, {sign}1) "
            f"ON CONFLICT ({keys.columns}) DO UPDATE SET n = n {sign} 1;"
        )

    moved = " OR ".join(f"OLD.{v} IS NOT NEW.{v}" for v in keys.sources)
    conn.execute(sa.text(
        f"CREATE TRIGGER {q(names['insert'])} AFTER INSERT ON {t} BEGIN {bump('NEW', '+')} END"
    ))
    conn.execute(sa.text(
        f"CREATE TRIGGER {q(names['delete'])} AFTER DELETE ON {t} BEGIN {bump('OLD', '-')} END"
    ))
    conn.execute(sa.text(
        f"CREATE TRIGGER {q(names['update'])} AFTER UPDATE OF {', '.join(keys.sources)} ON {t} "
        f"WHEN {moved} BEGIN {bump('OLD', '-')} {bump('NEW', '+')} END"
    ))


def _install_postgresql(conn: sa.Connection, lock: str, names: dict[str, str], t: str, keys: _Keys, c: str) -> None:
    q = conn.dialect.identifier_preparer.quote
    # Held to the end of the migration's transaction: no write to the table between the
    # backfill's snapshot and the triggers (SHARE ROW EXCLUSIVE conflicts with every writer).
    conn.execute(sa.text(f"LOCK TABLE {t} IN SHARE ROW EXCLUSIVE MODE"))
    # Its dead tuples (folded or rolled-back deltas) are scanned by every read until vacuumed.
    declared = ", ".join(f"{k} TEXT NOT NULL" for k, _v in keys.pairs)
    conn.execute(sa.text(
        f"CREATE TABLE {c} ({declared}, n BIGINT NOT NULL) "
        "WITH (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0)"
    ))
    k, at = keys.columns, keys.positions
    conn.execute(sa.text(f"INSERT INTO {c} ({k}, n) SELECT {keys.of()}, count(*) FROM {t} GROUP BY {at}"))
    key = lock.replace("'", "''")
    function = q(names["function"])
    conn.execute(sa.text(f"""
CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO {c} ({k}, n) SELECT {keys.of()}, count(*) FROM new_rows GROUP BY {at};
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO {c} ({k}, n) SELECT {keys.of()}, -count(*) FROM old_rows GROUP BY {at};
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO {c} ({k}, n)
      SELECT {k}, sum(d) FROM (
        SELECT {keys.aliased()}, -1 AS d FROM old_rows
        UNION ALL SELECT {keys.of()}, 1 FROM new_rows
      ) moved GROUP BY {k} HAVING sum(d) <> 0;
  ELSIF TG_OP = 'TRUNCATE' THEN
    -- after any compaction under way has committed, so its folded rows are seen and removed
    PERFORM pg_advisory_xact_lock(hashtext('{key}'));
    DELETE FROM {c};
  END IF;
  RETURN NULL;
END
$body$"""))
    for op, referencing in (
        ("INSERT", "REFERENCING NEW TABLE AS new_rows"),
        ("UPDATE", "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"),
        ("DELETE", "REFERENCING OLD TABLE AS old_rows"),
    ):
        conn.execute(sa.text(
            f"CREATE TRIGGER {q(names[op.lower()])} AFTER {op} ON {t} {referencing} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        ))
    conn.execute(sa.text(
        f"CREATE TRIGGER {q(names['truncate'])} AFTER TRUNCATE ON {t} FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
    ))


def drop_status_counts(
    table: str,
    *,
    status_column: str = "status",
    since_column: str | None = "updated_at",
    bind: sa.Connection | None = None,
    counts: str | None = None,
) -> None:
    """Undo ``count_statuses`` (in a ``downgrade()``): the triggers, the count table and the index."""
    conn = bind if bind is not None else _migration_connection()
    names = _names(table, counts)
    q = conn.dialect.identifier_preparer.quote
    t = q(table)
    for which in ("insert", "update", "delete", "truncate"):
        on = f" ON {t}" if conn.dialect.name == "postgresql" else ""
        conn.execute(sa.text(f"DROP TRIGGER IF EXISTS {q(names[which])}{on}"))
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text(f"DROP FUNCTION IF EXISTS {q(names['function'])}()"))
    conn.execute(sa.text(f"DROP TABLE IF EXISTS {q(names['counts'])}"))
    if since_column is not None:
        conn.execute(sa.text(f"DROP INDEX IF EXISTS {q(_index_name(table, status_column, since_column))}"))


def _migration_connection() -> sa.Connection:
    from alembic import op

    return op.get_bind()


def recount(
    engine: sa.Engine, table: str, status_column: str = "status", counts: str | None = None,
    by: Mapping[str, str] | None = None,
) -> dict[str, tuple[int, int]]:
    """Count ``table``'s rows per status again and make the kept counts say so: the repair after
    writes the triggers did not see (a ``REPLACE`` from a SQLite connection without
    ``recursive_triggers``, triggers disabled). Returns each status whose count was wrong,
    with (what was kept, what is true); a count ``by`` further columns names a key by its values
    and the status, space-separated (``"web failed"``).

    One transaction, with the table's writers held off (PostgreSQL: a ``SHARE ROW EXCLUSIVE``
    lock on the table, reads go on, and the compaction lock; SQLite: its write lock, taken by
    the first statement), so no write lands between the count and the replacement.
    """
    q = engine.dialect.identifier_preparer.quote
    t, c = q(table), q(counts_name(table, counts))
    keys = _Keys(engine.dialect, by or {}, status_column)
    width = len(keys.pairs)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text(f"LOCK TABLE {t} IN SHARE ROW EXCLUSIVE MODE"))
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": _lock_key(table, counts)})
        else:  # a write first: SQLite's write lock, before anything is read
            conn.execute(sa.text(f"UPDATE {c} SET n = n"))
        kept = {tuple(r[:width]): int(r[width]) for r in conn.execute(
            sa.text(f"SELECT {keys.columns}, sum(n) FROM {c} GROUP BY {keys.columns}"))}
        true = {tuple(r[:width]): int(r[width]) for r in conn.execute(
            sa.text(f"SELECT {keys.of()}, count(*) FROM {t} GROUP BY {keys.positions}"))}
        conn.execute(sa.text(f"DELETE FROM {c}"))
        if true:
            marks = ", ".join(f":k{i}" for i in range(width))
            conn.execute(
                sa.text(f"INSERT INTO {c} ({keys.columns}, n) VALUES ({marks}, :n)"),
                [{**{f"k{i}": v for i, v in enumerate(key)}, "n": n} for key, n in true.items()],
            )
    return {
        " ".join(k): (kept.get(k, 0), true.get(k, 0))
        for k in sorted({*kept, *true}) if kept.get(k, 0) != true.get(k, 0)
    }


def compact(engine: sa.Engine, table: str, counts: str | None = None, by: Iterable[str] = ()) -> bool:
    """Fold ``table``'s delta log into one row per status (PostgreSQL); whether this call did it.
    ``counts`` and ``by``: a second count of the table and the columns it counts by beside the status.

    Skipped when another compaction holds the table's lock. Exact under
    concurrent writers: the ``DELETE`` returns exactly the deltas its snapshot
    sees, and the same statement inserts their sums; deltas committed
    meanwhile stay in the log.
    """
    if engine.dialect.name != "postgresql":
        return False  # SQLite's triggers keep one row per status already
    q = engine.dialect.identifier_preparer.quote
    c = q(counts_name(table, counts))
    k = ", ".join(q(column) for column in [*by, "status"])
    for _ in range(2):
        with engine.begin() as conn:
            if not conn.execute(
                sa.text("SELECT pg_try_advisory_xact_lock(hashtext(:k))"), {"k": _lock_key(table, counts)}
            ).scalar():
                return False
            conn.execute(sa.text(
                f"WITH moved AS (DELETE FROM {c} RETURNING {k}, n) "
                f"INSERT INTO {c} ({k}, n) SELECT {k}, sum(n) FROM moved GROUP BY {k} HAVING sum(n) <> 0"
            ))
        # The folded rows are dead tuples every read would still scan: reclaim them now (skipped when
        # another vacuum of the table runs), not when autovacuum wakes.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text(f"VACUUM (SKIP_LOCKED) {c}"))
            pages = conn.execute(sa.text("SELECT pg_relation_size(:t) / current_setting('block_size')::int"),
                                 {"t": counts_name(table, counts)}).scalar_one()
        # After a bulk load the folded rows sit on the last of many emptied pages, which a vacuum
        # cannot cut off; folding once more puts them on the first free page, then it can.
        if pages <= _SMALL_PAGES:
            break
    return True
