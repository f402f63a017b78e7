"""The pass archive by day on PostgreSQL (issue 23 item 1, ``datum.store.partitions``): days made ahead,
retention dropping whole days, intake that no day partition takes, an existing store migrated with its
rows; SQLite keeps its batched deletes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from datum.store import open_store
from datum.store.history import record_host_pass, record_reconciler_pass
from datum.store.hosts import take_pass
from datum.store.partitions import AHEAD, EVENTS, HISTORY, days, make_days
from datum.store.passes import host_passes, prune_passes, retain
from datum.store.runs import store_now

from .migrated import at_revision


@pytest.fixture
def store(pg_database):
    s = open_store(pg_database)
    yield s
    s.dispose()


def a_pass(seq: int, host: str = "web1") -> dict:
    """A failed pass of ``host``: one converged, one failed and one blocked resource (two events)."""
    return {
        "host": host, "mode": "enforce", "state": "failed", "reason": "File[motd] failed: permission denied",
        "startedAt": "2026-11-01T12:00:00Z", "finishedAt": "2026-11-01T12:00:02Z", "durationSeconds": 2.0,
        "bootId": "b00t", "exitCode": 4, "counts": {"converged": 1, "failed": 1, "blocked": 1},
        "seq": seq, "passId": f"{host}-{seq}",
        "resources": [
            {"id": "Package[nginx]", "type": "Package", "name": "nginx", "action": "none", "state": "converged"},
            {"id": "File[motd]", "type": "File", "name": "motd", "action": "update", "state": "failed",
             "error": "permission denied"},
            {"id": "Service[nginx]", "type": "Service", "name": "nginx", "action": "restart", "state": "blocked",
             "reason": "blocked by File[motd]", "blockedBy": ["File[motd]"]},
        ],
    }


def today(store) -> datetime:  # type: ignore[no-untyped-def]
    with store.connect() as conn:
        return store_now(conn).astimezone(UTC)


def day_names(store, table) -> dict:  # type: ignore[no-untyped-def]
    with store.connect() as conn:
        return days(conn, table)


def count(store, table: str) -> int:  # type: ignore[no-untyped-def]
    with store.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


def received(store, host: str, seq: int, at: datetime) -> None:  # type: ignore[no-untyped-def]
    """One pass of ``host`` as if received at ``at`` (the archive's own writer, as intake calls it)."""
    with store.begin() as conn:
        record_host_pass(conn, host, a_pass(seq, host), at)


@pytest.mark.postgres
def test_a_new_store_has_today_and_the_days_ahead_on_both_tables_and_a_default(store):
    now = today(store).date()
    wanted = {now + timedelta(days=i) for i in range(AHEAD + 1)}
    assert set(day_names(store, HISTORY)) == wanted
    assert set(day_names(store, EVENTS)) == wanted
    with store.connect() as conn:
        kinds = dict(conn.execute(sa.text(
            "SELECT relname, relkind FROM pg_class WHERE relname IN "
            "('pass_history', 'pass_history_host', 'pass_history_host_default', 'pass_history_other', "
            "'pass_events', 'pass_events_default', 'pass_reports')"
        )).all())
    assert kinds == {"pass_history": "p", "pass_history_host": "p", "pass_history_host_default": "r",
                     "pass_history_other": "r", "pass_events": "p", "pass_events_default": "r", "pass_reports": "r"}


@pytest.mark.postgres
def test_intake_lands_in_its_day_partition_and_the_strips_reconciler_rows_stay_apart(store):
    assert take_pass(store, "web1", a_pass(1), history=True).outcome == "stored"
    name = HISTORY.day(today(store).date())
    assert count(store, name) == 1
    assert count(store, EVENTS.day(today(store).date())) == 2  # its failed and blocked resources
    with store.begin() as conn:
        record_reconciler_pass(conn, "buckets", {"last_ran_at": datetime.now(UTC), "health": "ok",
                                                  "completed": True, "items": []}, timedelta(days=1))
    assert count(store, "pass_history_other") == 1
    assert count(store, HISTORY.default) == 0


@pytest.mark.postgres
def test_retention_drops_whole_days_past_its_bound_and_keeps_the_day_it_falls_in(store):
    now = today(store)
    old_days = [(now - timedelta(days=n)).date() for n in (20, 16, 15, 14)]
    with store.begin() as conn:
        make_days(conn, old_days)
    for seq, n in enumerate((20, 16, 15, 14), start=1):
        received(store, "web1", seq, now - timedelta(days=n))
    received(store, "web1", 5, now)
    assert count(store, HISTORY.default) == 0
    assert retain(store, timedelta(days=14)) >= 3  # the 20th, 16th and 15th days ago, whole
    left = set(day_names(store, HISTORY))
    assert not {d for d in old_days[:3]} & left and not {d for d in old_days[:3]} & set(day_names(store, EVENTS))
    # the day 14 days ago ends after the bound: kept whole (a pass outlives its retention by up to a day)
    assert old_days[3] in left
    kept = [p["seq"] for p in host_passes(store, "web1", limit=10)]
    assert kept[0] == 5 and 1 not in kept and 2 not in kept
    with store.connect() as conn:  # the reports the passes left name are all kept
        named = set(conn.execute(sa.text("SELECT digest FROM pass_history WHERE subject = 'host'")).scalars())
        kept_reports = set(conn.execute(sa.text("SELECT digest FROM pass_reports")).scalars())
    assert named <= kept_reports


@pytest.mark.postgres
def test_a_pass_received_on_a_day_without_partition_is_taken_by_the_default_and_moved_when_its_day_is_made(store):
    d = today(store).date()
    with store.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {HISTORY.day(d)}"))
        conn.execute(sa.text(f"DROP TABLE {EVENTS.day(d)}"))
    assert take_pass(store, "web1", a_pass(1), history=True).outcome == "stored"  # intake never fails for it
    assert take_pass(store, "web1", a_pass(0), history=True).outcome == "older"   # nor the python path
    far = datetime(2031, 1, 1, 12, tzinfo=UTC)  # the server's clock jumped: no day made that far
    received(store, "web2", 1, far)
    assert (count(store, HISTORY.default), count(store, EVENTS.default)) == (3, 6)
    assert retain(store, timedelta(days=14)) == 0  # makes today again: its rows move in
    assert count(store, HISTORY.day(d)) == 2 and count(store, EVENTS.day(d)) == 4
    assert count(store, HISTORY.default) == 1  # the far one waits for its day
    with store.begin() as conn:
        make_days(conn, [far.date()])
    assert (count(store, HISTORY.default), count(store, HISTORY.day(far.date()))) == (0, 1)
    assert sorted(p["seq"] for p in host_passes(store, "web1", limit=10)) == [0, 1]


@pytest.mark.postgres
def test_old_rows_in_the_default_partition_go_in_batches(store):
    with store.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {HISTORY.day(today(store).date())}"))
    old = today(store) - timedelta(days=30)
    for seq in range(1, 6):
        received(store, "web1", seq, old)
    received(store, "web1", 6, today(store))
    assert prune_passes(store, today(store) - timedelta(days=14), batch=2) == 5
    assert [p["seq"] for p in host_passes(store, "web1", limit=10)] == [6]
    assert count(store, "pass_events") == 2  # pass 6's only


@pytest.mark.postgres
@pytest.mark.empty_store  # a store left at an older migration: made empty, not a copy of the migrated one
def test_an_existing_store_with_rows_is_migrated_into_day_partitions_ids_and_sequence_kept(pg_database):
    then = datetime.now(UTC) - timedelta(days=3)
    with at_revision(pg_database, "0014_host_counts") as conn:
        for seq, at in ((1, then), (2, then + timedelta(days=1))):
            record_host_pass(conn, "web1", a_pass(seq), at)
        record_reconciler_pass(conn, "buckets", {"last_ran_at": then, "health": "ok", "completed": True,
                                                  "items": []}, None)
        ids = conn.execute(sa.text("SELECT id FROM pass_history ORDER BY id")).scalars().all()
    store = open_store(pg_database)
    try:
        assert set(day_names(store, HISTORY)) >= {then.date(), (then + timedelta(days=1)).date()}
        assert count(store, HISTORY.day(then.date())) == 1 and count(store, EVENTS.day(then.date())) == 2
        assert count(store, "pass_history_other") == 1 and count(store, HISTORY.default) == 0
        with store.connect() as conn:
            assert conn.execute(sa.text("SELECT id FROM pass_history ORDER BY id")).scalars().all() == ids
            assert conn.execute(sa.text("SELECT to_regclass('pass_history_unpartitioned')")).scalar() is None
        assert take_pass(store, "web1", a_pass(3), history=True).outcome == "stored"
        with store.connect() as conn:
            newest = conn.execute(sa.text("SELECT max(id) FROM pass_history")).scalar()
        assert newest > max(ids)  # the sequence went on
        assert [p["seq"] for p in host_passes(store, "web1", limit=10)][:1] == [3]
    finally:
        store.dispose()


def test_sqlite_keeps_one_table_and_batched_deletes(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'datum.db'}")
    try:
        now = today(store)
        for seq in range(1, 4):
            received(store, "web1", seq, now - timedelta(days=20))
        received(store, "web1", 4, now)
        assert retain(store, timedelta(days=14), batch=2) == 3
        assert [p["seq"] for p in host_passes(store, "web1", limit=10)] == [4]
    finally:
        store.dispose()
