"""Per-status counts kept by the database (``count_statuses``) equal a full ``GROUP BY``, whoever writes and when.

Every test compares the counted histogram with the one that counts every row,
on real SQLite and PostgreSQL: after each kind of write, under two writers at
once (with compactions running meanwhile on PostgreSQL), for rows written
before the migration, and across a downgrade and upgrade.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from datum.reconcile.coverage import measure
from datum.reconcile.desired import set_status
from datum.reconcilers.buckets import reconciler as buckets
from datum.store import open_store, status_counts
from datum.store.migrate import MIGRATIONS, current_revisions

STATUSES = buckets.STATUSES
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _by_scan(conn: sa.Connection, table: str = "buckets", status: str = "status") -> dict[str, int]:
    rows = conn.execute(sa.text(f"SELECT {status}, count(*) FROM {table} GROUP BY {status}"))
    return {str(s): int(n) for s, n in rows}


def _by_counts(conn: sa.Connection, table: str = "buckets") -> dict[str, int]:
    c = status_counts.counts_name(table)
    rows = conn.execute(sa.text(f"SELECT status, sum(n) FROM {c} GROUP BY status HAVING sum(n) <> 0"))
    return {str(s): int(n) for s, n in rows}


def assert_exact(store) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The counts equal a GROUP BY, and so does the whole histogram (ages included)."""
    with store.connect() as conn:
        scanned, counted = _by_scan(conn), _by_counts(conn)
    assert counted == scanned
    spec = buckets.coverage_spec()
    assert spec.counted
    now = datetime.now(UTC)
    assert measure(store, [spec], now) == measure(store, [dataclasses.replace(spec, counted=False)], now)
    return scanned


@pytest.fixture
def bstore(store_url):
    s = open_store(store_url, branches=[buckets.BRANCH])
    yield s
    s.dispose()


def _row(name: str, status: str, n: int = 0) -> dict[str, object]:
    return {"name": name, "status": status, "created_at": T0, "updated_at": T0 + timedelta(seconds=n)}


def test_every_kind_of_write_is_counted(bstore):
    assert assert_exact(bstore) == {}
    buckets.create(bstore, "via-create")
    with bstore.begin() as conn:
        conn.execute(sa.insert(buckets.buckets), [_row(f"b{n:03d}", STATUSES[n % 5], n) for n in range(50)])
    assert assert_exact(bstore)["creating"] == 11
    buckets.delete(bstore, "via-create")  # set_status: creating -> deleting
    with bstore.begin() as conn:
        set_status(conn, buckets.buckets, "b000", buckets.ACTIVE, {buckets.CREATING})
        # an operator's SQL: several rows at once, some to a status nobody declared
        conn.execute(sa.text("UPDATE buckets SET status = 'typo' WHERE name IN ('b001', 'b002', 'b003')"))
        conn.execute(sa.text("UPDATE buckets SET updated_at = updated_at WHERE name = 'b004'"))  # no status change
        conn.execute(sa.text("UPDATE buckets SET name = 'renamed' WHERE name = 'b005'"))
        conn.execute(sa.text("DELETE FROM buckets WHERE name IN ('b006', 'b007')"))
        conn.execute(sa.text(
            "INSERT INTO buckets (name, status, created_at, updated_at) "
            "SELECT name || '-copy', status, created_at, updated_at FROM buckets WHERE status = 'deleted'"
        ))
    after = assert_exact(bstore)
    assert after["typo"] == 3 and sum(after.values()) == 51 - 2 + 10
    # a transaction that rolls back leaves the counts as they were
    with pytest.raises(RuntimeError), bstore.begin() as conn:
        conn.execute(sa.text("UPDATE buckets SET status = 'deleted'"))
        raise RuntimeError("changed my mind")
    assert assert_exact(bstore) == after
    with bstore.begin() as conn:
        conn.execute(sa.text("DELETE FROM buckets"))
    assert assert_exact(bstore) == {}


def test_the_histogram_reports_counts_ages_and_stranded_rows_from_the_counts(bstore):
    with bstore.begin() as conn:
        conn.execute(sa.insert(buckets.buckets), [
            _row("a1", "active", 10), _row("a2", "active", 5), _row("s1", "parked", 100), _row("d1", "deleted", 0),
        ])
    now = T0 + timedelta(seconds=1000)
    rows = {r.status: r for r in measure(bstore, [buckets.coverage_spec()], now)}
    assert (rows["active"].count, rows["active"].oldest_age_seconds, rows["active"].stranded) == (2, 995.0, False)
    assert (rows["parked"].count, rows["parked"].oldest_age_seconds, rows["parked"].stranded) == (1, 900.0, True)
    assert (rows["creating"].count, rows["creating"].stranded) == (0, False)
    assert rows["deleted"].terminal and not rows["deleted"].stranded


def _writer(url: str, seed: int, names: list[str], rounds: int, start: threading.Barrier, errors: list) -> None:  # type: ignore[type-arg]
    """Moves random rows between statuses, inserts and deletes, several writes per transaction; some roll back."""
    rng = random.Random(seed)
    store = open_store(url)
    try:
        start.wait()
        for i in range(rounds):
            try:
                with store.begin() as conn:
                    # In one order in every writer: two transactions updating the same rows in
                    # opposite orders deadlock on the rows themselves, whatever the counts do.
                    for name in sorted(rng.sample(names, 4)):
                        conn.execute(
                            sa.text("UPDATE buckets SET status = :s, updated_at = :t WHERE name = :n"),
                            {"s": rng.choice(STATUSES), "t": datetime.now(UTC), "n": name},
                        )
                    mine = f"w{seed}-{i}"
                    conn.execute(sa.insert(buckets.buckets).values(_row(mine, rng.choice(STATUSES))))
                    if i % 3 == 0:
                        conn.execute(sa.text("DELETE FROM buckets WHERE name = :n"), {"n": mine})
                    if i % 7 == 0:
                        raise _Rollback
            except _Rollback:
                pass
            except Exception as exc:  # a deadlock or serialization failure would be a finding too
                errors.append(exc)
                return
    finally:
        store.dispose()


class _Rollback(Exception):
    pass


def _compactor(url: str, stop: threading.Event, folds: list[int], errors: list) -> None:  # type: ignore[type-arg]
    engine = open_store(url).engine
    try:
        while not stop.is_set():
            folds.append(int(status_counts.compact(engine, "buckets")))
    except Exception as exc:
        errors.append(exc)
    finally:
        engine.dispose()


def test_two_writers_at_once_leave_the_counts_equal_to_a_group_by(bstore, store_url):
    names = [f"b{n:04d}" for n in range(200)]
    with bstore.begin() as conn:
        conn.execute(sa.insert(buckets.buckets), [_row(n, STATUSES[i % 5], i) for i, n in enumerate(names)])
    rounds = 60
    start = threading.Barrier(2)
    errors: list[Exception] = []
    stop, folds = threading.Event(), []
    writers = [threading.Thread(target=_writer, args=(store_url, seed, names, rounds, start, errors)) for seed in (1, 2)]
    compactor = threading.Thread(target=_compactor, args=(store_url, stop, folds, errors))
    if bstore.dialect == "postgresql":
        compactor.start()
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
    stop.set()
    if compactor.is_alive():
        compactor.join(30)
    assert errors == []
    counts = assert_exact(bstore)
    # each writer kept 2 of every 3 rows it inserted, less the rolled-back ones
    kept = sum(1 for i in range(rounds) if i % 3 and i % 7)
    assert sum(counts.values()) == len(names) + 2 * kept
    if bstore.dialect == "postgresql":
        assert sum(folds) > 0  # compactions ran while the writers wrote
        status_counts.compact(bstore.engine, "buckets")
        assert assert_exact(bstore) == counts


def _alembic(conn: sa.Connection, direction: str, revision: str) -> None:
    """Move the buckets branch of the store ``conn`` is in to ``revision``."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", str(buckets.BRANCH.versions))
    cfg.attributes["connection"] = conn
    cfg.attributes["version_table"] = buckets.BRANCH.version_table
    getattr(command, direction)(cfg, revision)


def _buckets_branch_at(store_url: str, revision: str, *statements: str) -> None:
    """An empty store's core at its heads and the buckets branch at ``revision`` only, then ``statements``."""
    open_store(store_url).dispose()
    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        _alembic(conn, "upgrade", revision)
        for statement in statements:
            conn.execute(sa.text(statement))
    engine.dispose()


def test_rows_written_before_the_migration_are_counted_and_a_round_trip_keeps_every_row(store_url):
    values = ", ".join(
        f"('old{n}', '{s}', '2026-01-01 00:00:00', '2026-01-01 00:00:0{n % 10}')"
        for n, s in enumerate(["active"] * 5 + ["delete_blocked"] * 2 + ["mystery"])
    )
    _buckets_branch_at(store_url, "buckets_0001", f"INSERT INTO buckets (name, status, created_at, updated_at) VALUES {values}")
    store = open_store(store_url, branches=[buckets.BRANCH])
    try:
        with store.connect() as conn:
            assert current_revisions(conn, buckets.BRANCH) == {"buckets_0002"}
        assert assert_exact(store) == {"active": 5, "delete_blocked": 2, "mystery": 1}
        with store.engine.begin() as conn:
            _alembic(conn, "downgrade", "buckets_0001")
        with store.connect() as conn:
            assert not sa.inspect(conn).has_table("buckets_status_counts")
            assert {i["name"] for i in sa.inspect(conn).get_indexes("buckets")} == {"ix_buckets_status"}
            conn.execute(sa.text("DELETE FROM buckets WHERE name = 'old0'")) and conn.commit()  # no trigger left
        with store.engine.begin() as conn:
            _alembic(conn, "upgrade", "heads")
        assert assert_exact(store) == {"active": 4, "delete_blocked": 2, "mystery": 1}
    finally:
        store.dispose()


def test_a_writer_in_flight_while_the_migration_runs_is_counted_once(store_url):
    """The backfill and the triggers are one step for writers: a transaction open when the migration
    starts is either in the backfill or seen by the triggers, never both, never neither."""
    _buckets_branch_at(store_url, "buckets_0001")
    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    writer = engine.connect()
    writer.begin()
    writer.execute(sa.insert(buckets.buckets).values(_row("in-flight", "active")))
    opened: list[object] = []
    migration = threading.Thread(target=lambda: opened.append(open_store(store_url, branches=[buckets.BRANCH])))
    migration.start()
    migration.join(1.0)
    writer.commit()  # the migration waits for it (a table lock, or SQLite's write lock)
    writer.execute(sa.insert(buckets.buckets).values(_row("after", "creating")))
    writer.commit()
    migration.join(60)
    writer.close()
    engine.dispose()
    assert len(opened) == 1
    store = opened[0]
    try:
        with store.begin() as conn:  # type: ignore[attr-defined]
            conn.execute(sa.insert(buckets.buckets).values(_row("later", "creating")))
        assert assert_exact(store) == {"active": 1, "creating": 2}
    finally:
        store.dispose()  # type: ignore[attr-defined]


@pytest.mark.postgres
def test_the_delta_log_is_folded_after_a_read_and_truncate_empties_it(pg_database):
    store = open_store(pg_database, branches=[buckets.BRANCH])
    try:
        for n in range(status_counts.COMPACT_AT + 50):  # one delta row per statement
            with store.begin() as conn:
                conn.execute(sa.insert(buckets.buckets).values(_row(f"b{n:05d}", STATUSES[n % 5], n)))
        with store.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM buckets_status_counts")).scalar() > status_counts.COMPACT_AT
        counts = assert_exact(store)  # the read folds the log
        with store.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM buckets_status_counts")).scalar() == len(STATUSES)
        assert assert_exact(store) == counts
        # a bulk load's log: many pages, whose space the fold gives back (net-zero deltas, written directly)
        with store.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO buckets_status_counts (status, n) SELECT 'active', 1 - 2 * (i % 2) FROM generate_series(1, 100000) i"
            ))
        pages = "SELECT pg_relation_size('buckets_status_counts') / 8192"
        with store.connect() as conn:
            assert conn.execute(sa.text(pages)).scalar() > 100
        assert assert_exact(store) == counts
        with store.connect() as conn:
            assert conn.execute(sa.text(pages)).scalar() <= 16
            assert conn.execute(sa.text("SELECT count(*) FROM buckets_status_counts")).scalar() == len(STATUSES)
        with store.begin() as conn:
            conn.execute(sa.text("TRUNCATE buckets"))
        assert assert_exact(store) == {}
        buckets.create(store, "again")
        assert assert_exact(store) == {"creating": 1}
    finally:
        store.dispose()


def test_a_plugin_table_with_its_own_column_names_is_counted(store_url, tmp_path):
    """The SDK surface: a plugin's branch calls ``count_statuses`` on its table and declares ``counted=True``."""
    from datum.sdk import CoverageDecl, CoverageSpec

    versions = tmp_path / "versions"
    versions.mkdir()
    (versions / "w1.py").write_text(
        "import sqlalchemy as sa\nfrom alembic import op\nfrom datum.sdk import UTCDateTime, count_statuses\n"
        "revision = 'w1'\ndown_revision = None\nbranch_labels = None\ndepends_on = None\n"
        "def upgrade():\n"
        "    op.create_table('widgets', sa.Column('id', sa.Integer, primary_key=True),\n"
        "                    sa.Column('state', sa.String(20), nullable=False),\n"
        "                    sa.Column('changed_at', UTCDateTime, nullable=False))\n"
        "    op.execute(\"INSERT INTO widgets VALUES (1, 'on', '2026-01-01 00:00:00')\")\n"
        "    count_statuses('widgets', status_column='state', since_column='changed_at')\n"
    )
    from datum.store.migrate import Branch

    store = open_store(store_url, branches=[Branch.of_plugin("widgets", versions)])
    try:
        meta = sa.MetaData()
        widgets = sa.Table("widgets", meta, autoload_with=store.engine)
        with store.begin() as conn:
            conn.execute(sa.insert(widgets), [{"id": i, "state": ("on", "off", "lost")[i % 3], "changed_at": T0}
                                              for i in range(2, 12)])
            conn.execute(sa.text("UPDATE widgets SET state = 'off' WHERE id = 1"))
        with store.connect() as conn:
            assert _by_counts(conn, "widgets") == _by_scan(conn, "widgets", "state") == {"on": 3, "off": 4, "lost": 4}
            names = {i["name"] for i in sa.inspect(conn).get_indexes("widgets")}
        assert "ix_widgets_state_changed_at" in names
        decl = CoverageDecl("widget", selected=frozenset({"on", "off"}))
        spec = CoverageSpec(decl, widgets, status_column="state", since_column="changed_at", counted=True)
        now = T0 + timedelta(hours=1)
        rows = measure(store, [spec], now)
        assert rows == measure(store, [dataclasses.replace(spec, counted=False)], now)
        assert [(r.status, r.count, r.stranded) for r in rows] == [("lost", 4, True), ("off", 4, False), ("on", 3, False)]
    finally:
        store.dispose()


def test_a_nullable_status_column_or_a_name_too_long_is_refused(store_url):
    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE loose (id INTEGER PRIMARY KEY, status VARCHAR(10))"))
            with pytest.raises(ValueError, match="NOT NULL"):
                status_counts.count_statuses("loose", bind=conn)
            with pytest.raises(ValueError, match="no column"):
                status_counts.count_statuses("loose", status_column="state", bind=conn)
            with pytest.raises(ValueError, match="too long"):  # PostgreSQL would cut its trigger names silently
                status_counts.count_statuses("t" * 49, bind=conn)
    finally:
        engine.dispose()


def test_upserts_and_replaces_are_counted_once(bstore):
    """SQLite's REPLACE deletes the old row without delete triggers unless ``recursive_triggers`` is on
    (the store turns it on); PostgreSQL's ON CONFLICT fires the insert and update triggers for what each did."""
    buckets.create(bstore, "one")
    with bstore.begin() as conn:
        if bstore.dialect == "sqlite":
            conn.execute(sa.text("INSERT OR REPLACE INTO buckets VALUES ('one', 'active', '2026-01-01', '2026-01-01')"))
            conn.execute(sa.text("REPLACE INTO buckets VALUES ('one', 'deleting', '2026-01-01', '2026-01-01')"))
            conn.execute(sa.text("INSERT OR IGNORE INTO buckets VALUES ('one', 'typo', '2026-01-01', '2026-01-01')"))
        upsert = (
            "INSERT INTO buckets (name, status, created_at, updated_at) VALUES (:n, :s, :t, :t)"
            " ON CONFLICT (name) DO UPDATE SET status = excluded.status"
        )
        conn.execute(sa.text(upsert), [{"n": "one", "s": "active", "t": T0}, {"n": "two", "s": "creating", "t": T0}])
        conn.execute(sa.text(
            "INSERT INTO buckets (name, status, created_at, updated_at) VALUES ('two', 'typo', :t, :t)"
            " ON CONFLICT (name) DO NOTHING"
        ), {"t": T0})
    assert assert_exact(bstore) == {"active": 1, "creating": 1}


def test_recount_repairs_counts_a_write_went_around(bstore):
    """A REPLACE from a SQLite connection without recursive_triggers (or, on PostgreSQL, a delta
    written by hand) leaves the counts wrong; ``recount`` makes them a GROUP BY again, and says what was wrong."""
    with bstore.begin() as conn:
        conn.execute(sa.insert(buckets.buckets), [_row(f"r{n}", STATUSES[n % 5], n) for n in range(20)])
    assert status_counts.recount(bstore.engine, "buckets") == {}  # nothing wrong: nothing said
    if bstore.dialect == "sqlite":
        import sqlite3

        plain = sqlite3.connect(bstore.engine.url.database)  # another tool: recursive_triggers off
        plain.execute("REPLACE INTO buckets (name, status, created_at, updated_at) "
                      "SELECT name, status, created_at, updated_at FROM buckets WHERE name = 'r0'")
        plain.commit()
        plain.close()
    else:
        with bstore.begin() as conn:
            conn.execute(sa.text("INSERT INTO buckets_status_counts (status, n) VALUES (:s, 1)"), {"s": STATUSES[0]})
    with bstore.connect() as conn:
        assert _by_counts(conn)[STATUSES[0]] == _by_scan(conn)[STATUSES[0]] + 1  # the fault is real
    assert status_counts.recount(bstore.engine, "buckets") == {STATUSES[0]: (5, 4)}
    assert_exact(bstore)
    buckets.create(bstore, "after")  # the triggers go on counting from the repaired counts
    assert_exact(bstore)


def test_datum_store_recount_repairs_every_counted_table(tmp_path, datum_cli):
    config = tmp_path / "datum.toml"
    url = f"sqlite:///{tmp_path / 'datum.db'}"
    config.write_text(f'store = "{url}"\n[reconcilers.buckets]\nroot = "{tmp_path / "buckets"}"\n')
    code, out, err = datum_cli("store", "recount", "--config", str(config))
    assert code == 0 and "buckets: buckets: the counts were right" in out, out + err
    store = open_store(url, branches=[buckets.BRANCH])
    try:
        buckets.create(store, "one")
        with store.begin() as conn:
            conn.execute(sa.text("UPDATE buckets_status_counts SET n = n + 3 WHERE status = 'creating'"))
        code, out, err = datum_cli("store", "recount", "--config", str(config))
        assert code == 0 and "buckets: buckets: creating was counted 4, is 1: corrected" in out, out + err
        assert_exact(store)
    finally:
        store.dispose()
