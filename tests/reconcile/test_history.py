"""Pass history: written fenced with each executed pass, proportional to what diverged, pruned by age."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from slow_reconciler import NAME, Slow
from test_claims import _no_hook, _steal, runners  # noqa: F401 - the fixture resets Slow's hooks

from api.story import build_story, play
from datum.reconcile.runner import TickOutcome
from datum.store.history import (
    HOST,
    KEYFRAME,
    RECONCILER,
    first_seen,
    first_seen_many,
    recent,
    record,
    record_host_pass,
)
from datum.store.schema import pass_history

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def stored_items(store, subject, name):
    with store.connect() as conn:
        rows = conn.execute(
            sa.select(pass_history.c["items"]).where(pass_history.c.subject == subject, pass_history.c.name == name)
            .order_by(pass_history.c.id)
        ).all()
    return [r[0] for r in rows]


def test_every_executed_pass_leaves_one_row_and_a_steady_divergence_is_stored_once(tmp_path):
    story = build_story(tmp_path)
    play(story)  # three passes
    story.tick(2)
    with story.store.connect() as conn:
        passes = recent(conn, RECONCILER, "buckets")
    assert len(passes) == 5
    assert [p.outcome for p in passes] == ["ok", "degraded", "degraded", "degraded", "degraded"]
    last = passes[-1]
    assert last.completed and last.drift == 4 and last.blocked == 1
    assert last.counts == {"backoff": 1, "circuit_breaker": 3, "blocked_on_owner": 1}
    assert last.items is not None and last.items["bucket/x1"] == "circuit_breaker"
    assert last.items["bucket/gamma"] == "blocked_on_owner"
    # every pass reads back its items; a map is stored only when it differs from the one before
    assert all(p.items is not None for p in passes)
    maps = stored_items(story.store, RECONCILER, "buckets")
    assert all(m is None or m != before for before, m in zip(maps, maps[1:], strict=False))
    # x1 has diverged on every pass: it first diverged at the first pass
    with story.store.connect() as conn:
        assert first_seen(conn, RECONCILER, "buckets", 5) == passes[0].at
        assert first_seen(conn, RECONCILER, "buckets", 6) is None  # history does not reach that far
        assert first_seen_many(conn, RECONCILER, "buckets", [1, 5, 6, 5]) == {
            1: passes[-1].at, 5: passes[0].at, 6: None
        }
    story.client.close()


def test_a_skipped_tick_writes_no_history(tmp_path, store_url):
    _root, (a, b), stores = runners(tmp_path, store_url, ["p"])
    assert a.tick(NAME).outcome is TickOutcome.EXECUTED
    assert b._skip(NAME).outcome is TickOutcome.SKIPPED
    with stores[0].connect() as conn:
        assert len(recent(conn, RECONCILER, NAME)) == 1
    for s in stores:
        s.dispose()


def test_an_overtaken_pass_writes_no_history(tmp_path, store_url):
    root, (a, b), stores = runners(tmp_path, store_url, ["p", "q"])

    def overtake(ctx, key):
        Slow.on_apply = None
        _steal(store_url, root)
        b.tick(NAME)

    Slow.on_apply = overtake
    assert a.tick(NAME).outcome is TickOutcome.LOST_CLAIM
    with stores[1].connect() as conn:
        assert len(recent(conn, RECONCILER, NAME)) == 1  # the overtaking pass's only
    for s in stores:
        s.dispose()


def test_items_are_stored_when_they_change_and_at_least_every_keyframe(store):
    same = {"backoff": ["bucket/a"]}
    with store.begin() as conn:
        for n in range(KEYFRAME + 2):
            record(conn, RECONCILER, "r", T0 + timedelta(seconds=n), outcome="degraded", completed=True, items=same)
        record(conn, RECONCILER, "r", T0 + timedelta(seconds=100), outcome="failing", completed=False, items=None)
        record(conn, RECONCILER, "r", T0 + timedelta(seconds=101), outcome="ok", completed=True, items={})
    maps = stored_items(store, RECONCILER, "r")
    assert maps[0] == same and maps[KEYFRAME] == same and maps.count(same) == 2
    assert maps[-2:] == [None, {}]
    with store.connect() as conn:
        passes = recent(conn, RECONCILER, "r")  # the last 50: their base is a keyframe before them
    assert len(passes) == 50
    assert all(p.items == {"bucket/a": "backoff"} for p in passes[:-2])
    assert passes[-2].items is None and not passes[-2].completed  # a pass that could not complete saw nothing
    assert passes[-1].items == {}


def test_history_is_kept_14_days_unless_configured():
    from datum.config import Settings

    assert Settings().server.history == timedelta(days=14)
    assert Settings.model_validate({"server": {"history": "36h"}}).server.history == timedelta(hours=36)


def test_rows_older_than_the_retention_are_pruned(store):
    keep = timedelta(days=14)
    with store.begin() as conn:
        for day in range(20):
            record(conn, RECONCILER, "r", T0 + timedelta(days=day), outcome="ok", completed=True, items={}, keep=keep)
        record(conn, RECONCILER, "other", T0, outcome="ok", completed=True, items={}, keep=keep)
    with store.connect() as conn:
        passes = recent(conn, RECONCILER, "r")
        assert [p.at for p in passes][0] == T0 + timedelta(days=5)  # day 19 - 14 days: days 5..19 kept
        assert len(recent(conn, RECONCILER, "other")) == 1  # another subject's rows are its own


def test_a_host_pass_keeps_its_state_and_the_resources_behind_it(store):
    report = {
        "host": "web1",
        "state": "failed",
        "resources": [
            {"id": "Package[nginx]", "state": "converged"},
            {"id": "File[motd]", "state": "failed"},
            {"id": "Service[nginx]", "state": "blocked"},
        ],
    }
    with store.begin() as conn:
        record_host_pass(conn, "web1", report, T0)
    with store.connect() as conn:
        [p] = recent(conn, HOST, "web1")
    assert p.outcome == "failed" and p.drift == 2
    assert p.counts == {"converged": 1, "failed": 1, "blocked": 1}
    assert p.items == {"File[motd]": "failed", "Service[nginx]": "blocked"}
