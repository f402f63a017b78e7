"""The runner, item memory in the store, skipped ticks, failing passes and coverage, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from datum.config import ReconcilerSettings, Settings
from datum.core.coverage import CoverageDecl
from datum.core.vocab import Health, Reason
from datum.reconcile import CoverageSpec, Registry, SubstrateError
from datum.reconcile.report import drift_report, summaries
from datum.reconcile.runner import Runner, TickOutcome
from datum.store import open_store
from datum.store.locks import try_acquire
from datum.store.types import UTCDateTime

T0 = datetime(2026, 1, 1, tzinfo=UTC)

desired_rows = sa.MetaData()
widgets = sa.Table(
    "widgets",
    desired_rows,
    sa.Column("name", sa.String(50), primary_key=True),
    sa.Column("status", sa.String(20)),
    sa.Column("updated_at", UTCDateTime),
)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now

    def advance(self, seconds=30):
        self.now += timedelta(seconds=seconds)


class World:
    """The substrate of a test reconciler: plain dicts that the test edits."""

    desired: dict = {}
    actual: dict = {}
    broken_read = False
    failing: set = set()


class Widgets:
    name = "widgets"
    items_reported = True

    def __init__(self, settings, store):
        self.store = store
        store.ensure(desired_rows)
        self.coverage = [
            CoverageSpec(
                CoverageDecl(
                    "widget",
                    selected=frozenset({"active"}),
                    terminal=frozenset({"gone"}),
                    owned_by={"provisioning": "LifecycleWorker"},
                ),
                widgets,
            )
        ]

    def run(self, ctx):
        if World.broken_read:
            raise SubstrateError("substrate API answered 500")
        ctx.converge("widget", dict(World.desired), dict(World.actual), self.apply)

    def apply(self, direction, key, want, have):
        if key in World.failing:
            raise RuntimeError(f"cannot touch {key}")
        if want is None:
            World.actual.pop(key)
        else:
            World.actual[key] = want


class Silent:
    """A bespoke reconciler that computes its own diff and reports no items or coverage."""

    name = "silent"
    items_reported = False
    coverage = None

    def __init__(self, settings, store):
        pass

    def run(self, ctx):
        pass


def make(store_url, clock, **section):
    World.desired, World.actual, World.broken_read, World.failing = {}, {}, False, set()
    registry = Registry()
    registry.register("widgets", Widgets, ReconcilerSettings)
    registry.register("silent", Silent, ReconcilerSettings)
    settings = Settings(store=store_url, reconcilers={"widgets": {"confirmation_ticks": 1, **section}})
    store = open_store(store_url)
    store.ensure(desired_rows)
    return registry, settings, store, Runner(registry, settings, store, clock)


def report(registry, settings, store, clock, name="widgets"):
    return drift_report(registry, settings, store, name, clock()).dump()


def test_before_any_tick_health_is_unknown_and_empty_means_nothing(store_url):
    clock = Clock()
    registry, settings, store, _ = make(store_url, clock)
    r = report(registry, settings, store, clock)
    assert r["health"] == "unknown" and r["asOf"] is None and r["lastRanAt"] is None
    assert r["itemsReported"] is True and r["items"] == []
    silent = report(registry, settings, store, clock, "silent")
    assert silent["itemsReported"] is False and silent["coverageReported"] is False
    assert silent["coverage"] == [] and "coverageError" not in silent


def test_item_memory_survives_a_restart(store_url):
    clock = Clock()
    registry, settings, store, runner = make(store_url, clock, confirmation_ticks=3)
    World.desired = {"a": 1}
    runner.tick("widgets")
    clock.advance()
    runner.tick("widgets")
    store.dispose()
    # a new process: new store handle, new runner
    store2 = open_store(store_url)
    runner2 = Runner(registry, settings, store2, clock)
    clock.advance()
    runner2.tick("widgets")
    r = report(registry, settings, store2, clock)
    assert r["items"][0]["reason"] == "acting" and r["items"][0]["streak"] == 3
    assert World.actual == {"a": 1}


def test_backoff_fields_and_retry_after_anchored_on_the_last_tick(store_url):
    clock = Clock()
    registry, settings, store, runner = make(store_url, clock, interval="1m")
    World.desired = {"a": 1}
    World.failing = {"a"}
    runner.tick("widgets")
    clock.advance(60)
    runner.tick("widgets")
    clock.advance(60)
    runner.tick("widgets")  # second failure: window 2
    r = report(registry, settings, store, clock)
    (item,) = r["items"]
    assert item["reason"] == "apply_failed"
    assert (item["failures"], item["retryAfterPasses"], item["lastErr"]) == (2, 2, "cannot touch a")
    assert item["retryAfter"] == (clock() + timedelta(minutes=2)).isoformat().replace("+00:00", "Z")
    assert r["health"] == "degraded"


def test_a_skipped_tick_moves_asof_only(store_url):
    clock = Clock()
    registry, settings, store, runner = make(store_url, clock)
    World.desired = {"a": 1}
    World.failing = {"a"}
    runner.tick("widgets")
    before = report(registry, settings, store, clock)
    clock.advance()
    assert try_acquire(store, "reconciler:widgets", "someone-else", clock(), timedelta(minutes=5))
    World.failing = set()
    assert runner.tick("widgets").outcome is TickOutcome.SKIPPED
    after = report(registry, settings, store, clock)
    assert after["asOf"] != before["asOf"]
    assert after["lastRanAt"] == before["lastRanAt"]
    assert after["items"] == [
        {**i, "retryAfter": after["items"][0]["retryAfter"]} for i in before["items"]
    ]
    assert World.actual == {}  # nothing was applied


def test_an_expired_lease_does_not_wedge_the_reconciler(store_url):
    clock = Clock()
    registry, settings, store, runner = make(store_url, clock)
    try_acquire(store, "reconciler:widgets", "crashed", clock(), timedelta(seconds=10))
    clock.advance(60)
    assert runner.tick("widgets").outcome is TickOutcome.EXECUTED


def test_unreadable_substrate_fails_the_pass_and_never_reaps(store_url):
    clock = Clock()
    registry, settings, store, runner = make(store_url, clock)
    World.desired = {"a": 1}
    World.actual = {"a": 1, "stray": 2}
    runner.tick("widgets")
    clock.advance()
    World.broken_read = True
    before = dict(World.actual)
    tick = runner.tick("widgets")
    assert tick.health is Health.FAILING
    r = report(registry, settings, store, clock)
    assert r["health"] == "failing" and "substrate API answered 500" in r["error"]
    assert r["lastRanAt"] == r["asOf"]
    assert World.actual == before  # the failing pass touched nothing


def test_coverage_histogram_and_the_stranded_signature(store_url):
    clock = Clock()
    registry, settings, store, runner = make(store_url, clock)
    with store.begin() as conn:
        conn.execute(
            sa.insert(widgets),
            [
                {"name": "w1", "status": "active", "updated_at": T0},
                {"name": "w2", "status": "provisioning", "updated_at": T0},
                {"name": "w3", "status": "gone", "updated_at": T0},
                {"name": "w4", "status": "delete_blocked", "updated_at": T0 - timedelta(hours=1)},
                {"name": "w5", "status": "delete_blocked", "updated_at": T0},
            ],
        )
    clock.advance(100)
    r = report(registry, settings, store, clock)
    rows = {c["status"]: c for c in r["coverage"]}
    assert r["coverageReported"] is True
    assert rows["delete_blocked"] == {
        "kind": "widget",
        "status": "delete_blocked",
        "count": 2,
        "selected": False,
        "terminal": False,
        "oldestAgeSeconds": 3700.0,
        "stranded": True,
    }
    assert rows["provisioning"]["ownedBy"] == "LifecycleWorker" and not rows["provisioning"]["stranded"]
    assert rows["gone"]["terminal"] and not rows["gone"]["stranded"]
    assert rows["active"]["selected"] and not rows["active"]["stranded"]
    assert "ownedBy" not in rows["active"]
    (summary,) = [s for s in summaries(registry, settings, store, clock()) if s.name == "widgets"]
    assert summary.stranded == 1


def test_a_failing_coverage_query_is_reported_not_raised(store_url):
    clock = Clock()
    registry, settings, store, runner = make(store_url, clock)
    runner.tick("widgets")
    with store.begin() as conn:
        conn.execute(sa.text("DROP TABLE widgets"))
    r = report(registry, settings, store, clock)
    assert r["coverage"] == [] and r["coverageError"]
    assert r["health"] == "ok"


def test_breaker_and_drift_cap_reach_the_report(store_url):
    clock = Clock()
    registry, settings, store, runner = make(
        store_url, clock, breaker={"reap": 2}, drift_cap=2
    )
    World.actual = {"x": 1, "y": 1, "z": 1}
    runner.tick("widgets")
    r = report(registry, settings, store, clock)
    assert {i["reason"] for i in r["items"]} == {Reason.CIRCUIT_BREAKER.value}
    assert (len(r["items"]), r["dropped"], r["drift"], r["driftCap"]) == (2, 1, 3, 2)
    assert World.actual == {"x": 1, "y": 1, "z": 1}


def test_a_tick_whose_predecessor_is_still_running_is_skipped(store_url):
    import threading

    clock = Clock()
    registry, settings, store, runner = make(store_url, clock)
    started, release = threading.Event(), threading.Event()

    class Slow(Silent):
        def run(self, ctx):
            started.set()
            release.wait(10)

    registry.register("slow", Slow, ReconcilerSettings)
    first = threading.Thread(target=runner.tick, args=("slow",))
    first.start()
    assert started.wait(10)
    clock.advance()
    try:
        assert runner.tick("slow").outcome is TickOutcome.SKIPPED
    finally:
        release.set()
        first.join()
    r = report(registry, settings, store, clock, "slow")
    assert r["asOf"] != r["lastRanAt"]
    assert r["lastRanAt"] == T0.isoformat().replace("+00:00", "Z")
