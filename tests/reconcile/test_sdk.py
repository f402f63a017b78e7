"""What datum.sdk promises a plugin: Result, the error classes, bespoke reporting, plugin reasons, requeue.

Real stores (SQLite and PostgreSQL), the real runner; only the substrate is a dict.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import datum.sdk as sdk
from datum.reconcile.report import drift_report
from datum.reconcile.runner import Runner, TickOutcome
from datum.store import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now

    def advance(self, seconds=30):
        self.now += timedelta(seconds=seconds)


class Behaviour:
    """What the test reconciler does on its next pass."""

    said = None
    desired: dict = {}
    actual: dict = {}
    raise_for: dict = {}
    applied: list = []
    items = None
    coverage = None


class Scripted:
    """Converges ``Behaviour.desired`` into ``Behaviour.actual``, or reports ``Behaviour.items`` itself."""

    name = "scripted"

    def __init__(self, settings, store):
        pass

    def run(self, ctx):
        if Behaviour.items is not None:
            ctx.report_items("thing", Behaviour.items)
        elif Behaviour.desired or Behaviour.actual:
            ctx.converge("thing", dict(Behaviour.desired), dict(Behaviour.actual), self.apply)
        if Behaviour.coverage is not None:
            ctx.report_coverage(*Behaviour.coverage)
        return Behaviour.said

    def apply(self, direction, key, want, have):
        Behaviour.applied.append(key)
        error = Behaviour.raise_for.get(key)
        if error is not None:
            raise error
        Behaviour.actual[key] = want


@pytest.fixture
def world(store_url):
    Behaviour.said, Behaviour.desired, Behaviour.actual = None, {}, {}
    Behaviour.raise_for, Behaviour.applied, Behaviour.items, Behaviour.coverage = {}, [], None, None
    from datum.reconcile import Registry

    registry = Registry()
    registry.register("scripted", Scripted, sdk.ReconcilerSettings)
    from datum.config import Settings

    settings = Settings(store=store_url, reconcilers={"scripted": {"confirmation_ticks": 1, "interval": "30s"}})
    store = open_store(store_url)
    clock = Clock()
    runner = Runner(registry, settings, store, clock)

    def report():
        return drift_report(registry, settings, store, "scripted", clock()).dump()

    yield runner, clock, report
    store.dispose()


def test_the_sdk_is_versioned_lazy_and_names_what_a_plugin_needs():
    assert sdk.API_VERSION == 1
    for name in ("Reconciler", "Converge", "ConvergeConfig", "BlockedOnOwner", "Waiting", "Reason",
                 "CoverageDecl", "Provider", "Spec", "Problem", "Result", "TemporaryError", "PermanentError",
                 "ReconcilerPlugin", "Item"):
        assert name in sdk.__all__ and getattr(sdk, name) is not None
    with pytest.raises(AttributeError):
        sdk.Runner  # noqa: B018 - private: not part of the SDK


def test_a_result_says_degraded_or_failing_and_why(world):
    runner, clock, report = world
    Behaviour.desired = Behaviour.actual = {"a": 1}
    Behaviour.items = [sdk.Item("restore", "a", "unexpected_state", last_err="odd")]
    runner.tick("scripted")
    Behaviour.said = sdk.Result.degraded("quota nearly exhausted")
    tick = runner.tick("scripted")
    assert tick.health.value == "degraded"
    r = report()
    assert (r["health"], r["error"]) == ("degraded", "quota nearly exhausted")
    Behaviour.items, Behaviour.said = None, sdk.Result.failing("the API refused our credentials")
    runner.tick("scripted")
    r = report()
    assert (r["health"], r["error"]) == ("failing", "the API refused our credentials")
    assert [i["id"] for i in r["items"]] == ["a"]  # the last completed pass's items stay
    Behaviour.said = sdk.Result.ok()
    runner.tick("scripted")
    assert report()["health"] == "ok" and "error" not in report()
    Behaviour.said = "fine"  # not a Result: the reconciler's bug, said as such
    runner.tick("scripted")
    assert report()["health"] == "failing" and "not a Result" in report()["error"]
    with pytest.raises(ValueError):
        sdk.Result.degraded("")


def test_requeue_after_n_passes_delays_the_next_scheduled_tick_only(world):
    runner, clock, _ = world
    Behaviour.said = sdk.Result.ok(requeue_after=3)
    assert runner.tick("scripted", scheduled=True).outcome is TickOutcome.EXECUTED
    Behaviour.said = None
    for _ in range(2):
        clock.advance(30)
        assert runner.tick("scripted", scheduled=True).outcome is TickOutcome.NOT_DUE
    assert runner.tick("scripted").outcome is TickOutcome.EXECUTED  # explicit passes ignore it
    clock.advance(30)
    assert runner.tick("scripted", scheduled=True).outcome is TickOutcome.EXECUTED  # one interval again
    Behaviour.said = sdk.Result.failing("backing off", requeue_after=2)
    clock.advance(30)
    assert runner.tick("scripted", scheduled=True).outcome is TickOutcome.EXECUTED
    clock.advance(30)
    assert runner.tick("scripted", scheduled=True).outcome is TickOutcome.NOT_DUE
    clock.advance(30)
    assert runner.tick("scripted", scheduled=True).outcome is TickOutcome.EXECUTED


def test_a_permanent_error_is_not_retried_until_the_desired_state_changes(world):
    runner, _, report = world
    Behaviour.desired = {"a": "v1"}
    Behaviour.raise_for = {"a": sdk.PermanentError("the name is reserved")}
    for _ in range(4):
        runner.tick("scripted")
    assert Behaviour.applied == ["a"]  # tried once, never again on the same wish
    (item,) = report()["items"]
    assert item["reason"] == "apply_failed" and item["lastErr"] == "permanent: the name is reserved"
    assert report()["health"] == "degraded"
    Behaviour.desired = {"a": "v2"}  # the desired state changed: tried again
    Behaviour.raise_for = {}
    runner.tick("scripted")
    assert Behaviour.applied == ["a", "a"] and Behaviour.actual == {"a": "v2"}
    runner.tick("scripted")
    assert report()["items"] == [] and report()["health"] == "ok"


def test_a_temporary_error_backs_off_for_the_window_it_gives(world):
    runner, _, report = world
    Behaviour.desired = {"a": 1}
    Behaviour.raise_for = {"a": sdk.TemporaryError("rate limited", delay_passes=3)}
    runner.tick("scripted")
    (item,) = report()["items"]
    assert (item["reason"], item["retryAfterPasses"], item["lastErr"]) == ("apply_failed", 3, "rate limited")
    for _ in range(3):
        runner.tick("scripted")
    assert Behaviour.applied == ["a"]
    assert report()["items"][0]["reason"] == "backoff"
    runner.tick("scripted")
    assert Behaviour.applied == ["a", "a"]


def test_owner_errors_are_blocked_on_owner_never_drift(world):
    runner, _, report = world
    Behaviour.desired = {"a": 1}
    Behaviour.raise_for = {"a": sdk.BlockedOnOwner("the tenant must empty it")}
    runner.tick("scripted")
    r = report()
    assert (r["drift"], r["blocked"], r["items"][0]["lastErr"]) == (0, 1, "the tenant must empty it")


def test_a_bespoke_reconciler_reports_items_and_coverage_or_reads_itemsreported_false(world):
    runner, _, report = world
    runner.tick("scripted")  # reports nothing at all
    r = report()
    assert r["itemsReported"] is False and r["items"] == [] and r["coverageReported"] is False
    Behaviour.items = [sdk.Item("align", "x", "awaiting_confirmation", desired="3 replicas", actual="2 replicas")]
    decl = sdk.CoverageDecl("thing", selected=frozenset({"live"}), owned_by={"new": "provisioner"})
    Behaviour.coverage = (decl, {"live": 4, "new": (2, 60.0), "limbo": 1})
    runner.tick("scripted")
    runner.tick("scripted")
    r = report()
    assert r["itemsReported"] is True and r["coverageReported"] is True
    (item,) = r["items"]
    assert (item["streak"], item["actual"], item["desired"]) == (2, "2 replicas", "3 replicas")  # streaks from memory
    rows = {c["status"]: c for c in r["coverage"]}
    assert rows["new"]["ownedBy"] == "provisioner" and not rows["new"]["stranded"]
    assert rows["limbo"]["stranded"] and rows["new"]["oldestAgeSeconds"] == 60.0
    Behaviour.items = [sdk.Item("reap", "x", "no_such_reason")]
    runner.tick("scripted")
    assert report()["health"] == "failing" and "not in the registry" in report()["error"]


def test_a_plugin_reason_is_registered_under_its_namespace_and_checked(world):
    from datum.core.vocab import register_reason, unregister_namespace

    runner, _, report = world
    unregister_namespace("scripted")
    with pytest.raises(ValueError):
        sdk.Waiting("scripted.jammed")  # not registered yet
    register_reason("scripted", "jammed", "the widget is jammed; reported, never forced")
    Behaviour.desired = {"a": 1}
    Behaviour.raise_for = {"a": sdk.Waiting("scripted.jammed", "gear 3 stuck")}
    runner.tick("scripted")
    (item,) = report()["items"]
    assert (item["reason"], item["lastErr"]) == ("scripted.jammed", "gear 3 stuck")
    with pytest.raises(ValueError):
        register_reason("scripted", "jammed", "another meaning")
    with pytest.raises(ValueError):
        register_reason("Bad-Name", "x", "d")


def test_datum_explain_knows_a_loaded_plugins_reason(datum_cli):
    code, out, _ = datum_cli("explain", "pg_roles.membership_outside_prefix")
    assert code == 0 and "pg_roles reconciler plugin" in out and "outside the prefix" in out


@pytest.mark.parametrize("how", ["converge", "report_items"])
def test_a_reason_of_another_plugin_built_at_run_time_is_refused_when_reported(world, how):
    """The load-time scan sees only literal reasons in the plugin's source; one built at run time
    is checked when reported: shown as unexpected_value with what it said, the health degraded with why."""
    from datum.core.vocab import register_reason, unregister_namespace

    runner, _, report = world
    unregister_namespace("other")
    register_reason("other", "jammed", "another plugin's reason")
    borrowed = ".".join(["other", "jammed"])  # built at run time, as a careless plugin would
    if how == "converge":
        Behaviour.desired = {"a": 1}
        Behaviour.raise_for = {"a": sdk.Waiting(borrowed, "gear 3 stuck")}
    else:
        Behaviour.items = [sdk.Item("restore", "a", borrowed, last_err="gear 3 stuck")]
    for _ in range(2):  # stays so pass after pass
        runner.tick("scripted")
        r = report()
        (item,) = r["items"]
        assert item["reason"] == "unexpected_value"
        assert item["lastErr"] == "reported other.jammed, a reason of other, not scripted's: gear 3 stuck"
        assert r["health"] == "degraded", r
        assert r["error"] == "reported reasons of other plugins (other.jammed): shown as unexpected_value"
    Behaviour.raise_for, Behaviour.items = {}, None
    Behaviour.desired, Behaviour.actual = {}, {}
    runner.tick("scripted")
    assert report()["health"] == "ok"  # its own reasons again: nothing held against it
    unregister_namespace("other")


def test_a_pass_running_past_its_pass_timeout_reads_failing_with_why_until_it_ends(world):
    """Read while the pass is still in an apply (hung, as far as any reader can tell): ``ok`` until
    ten intervals (pass_timeout's default), then ``failing`` saying for how long; the end of the pass
    is the truth again."""
    runner, clock, report = world
    seen = []

    def hang(direction, key, want, have):
        seen.append((report()["health"], report().get("error")))
        clock.advance(301)  # ten intervals of 30 s, and a second
        seen.append((report()["health"], report().get("error")))
        Behaviour.actual[key] = want

    Behaviour.desired = {"a": 1}
    runner.tick("scripted")  # a first pass: ok
    clock.advance(30)
    Behaviour.desired = {"a": 1, "b": 2}
    Scripted.apply, original = staticmethod(hang), Scripted.apply
    try:
        tick = runner.tick("scripted")
    finally:
        Scripted.apply = original
    assert tick.health is sdk.Health.OK, report()["items"]
    assert seen[0] == ("ok", None)
    assert seen[1] == (
        "failing",
        "a pass has been running for 5m 1s (interval 30s, pass_timeout 5m 0s): hung, or its process stopped mid-pass",
    )
    assert report()["health"] == "ok"  # it ended: running_since cleared


def test_a_pass_stops_at_its_next_item_once_past_its_pass_timeout(store_url):
    """Cancellation where the plugin allows it: before each apply. The item being applied finishes."""
    import time

    from datum.config import Settings
    from datum.reconcile import Registry

    Behaviour.said, Behaviour.actual, Behaviour.applied, Behaviour.items, Behaviour.coverage = None, {}, [], None, None
    Behaviour.desired, Behaviour.raise_for = {"a": 1, "b": 2}, {}
    registry = Registry()
    registry.register("scripted", Scripted, sdk.ReconcilerSettings)
    config = {"confirmation_ticks": 1, "pass_timeout": "1s"}
    settings = Settings(store=store_url, reconcilers={"scripted": config})
    store = open_store(store_url)

    def slow(direction, key, want, have):
        Behaviour.applied.append(key)
        time.sleep(2.2)  # past the 1 s pass_timeout, with room for a loaded machine
        Behaviour.actual[key] = want

    Scripted.apply, original = staticmethod(slow), Scripted.apply
    try:
        tick = Runner(registry, settings, store).tick("scripted")
    finally:
        Scripted.apply = original
    assert Behaviour.applied == ["a"]  # b waits for the next pass
    assert tick.health is sdk.Health.FAILING and "ran past its pass_timeout (0:00:01)" in tick.error, tick.error
    store.dispose()
