"""The drift report and the list surface over HTTP, field by field, against the buckets story."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from datum.api.app import create_app
from datum.reconcile.registry import Registry
from datum.reconcile.report import drift_report
from datum.reconcile.runner import Runner
from datum.reconcilers import buckets as b
from datum.store.locks import try_acquire

from .story import INTERVAL, play

DRIFT = "/v1/observability/admin/reconcilers/buckets/drift"
LIST = "/v1/observability/admin/reconcilers"

REPORT_FIELDS = {
    "reconciler", "asOf", "lastRanAt", "health", "drift", "blocked", "itemsReported",
    "items", "dropped", "driftCap", "coverageReported", "coverage", "enabled",
}
ITEM_FIELDS = {"kind", "direction", "id", "streak", "confirmationsNeeded", "reason"}
OPTIONAL_ITEM_FIELDS = {"lastErr", "desired", "actual", "failures", "retryAfterPasses", "retryAfter"}


def by_id(report):
    return {i["id"]: i for i in report["items"]}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_before_any_tick_the_report_says_unknown_and_that_items_can_be_reported(story):
    r = story.get(DRIFT)
    assert r.status_code == 200
    body = r.json()
    assert set(body) == REPORT_FIELDS  # promised fields are always there
    assert body["asOf"] is None and body["lastRanAt"] is None  # no tick to name yet
    assert body["health"] == "unknown"
    assert (body["itemsReported"], body["items"], body["coverageReported"]) == (True, [], True)
    assert (body["drift"], body["blocked"], body["dropped"], body["driftCap"]) == (0, 0, 0, 500)


def test_the_buckets_story_field_by_field(story):
    play(story)
    r = story.get(DRIFT)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) == REPORT_FIELDS  # no coverageError, no error: absent, not null
    assert body["reconciler"] == "buckets"
    assert at(body["asOf"]) == at(body["lastRanAt"]) == story.clock.now
    # apply_failed/backoff degrade health; blocked_on_owner counts in blocked, never in drift
    assert (body["health"], body["drift"], body["blocked"]) == ("degraded", 4, 1)
    assert (body["itemsReported"], body["dropped"], body["driftCap"]) == (True, 0, 500)

    items = by_id(body)
    assert set(items) == {"delta", "gamma", "x1", "x2", "x3"}
    for item in items.values():
        assert ITEM_FIELDS <= set(item) <= ITEM_FIELDS | OPTIONAL_ITEM_FIELDS
        assert None not in item.values()
        assert (item["kind"], item["confirmationsNeeded"]) == ("bucket", 2)

    # a file squats delta's name: the apply failed on pass 2, pass 3 waits out the backoff
    delta = items["delta"]
    assert (delta["direction"], delta["reason"], delta["streak"], delta["failures"]) == ("align", "backoff", 3, 1)
    assert delta["lastErr"].endswith("delta exists and is not a directory")
    assert (delta["desired"], delta["actual"]) == ("directory (status creating)", "not a directory (8 bytes)")
    assert delta["retryAfterPasses"] == 0
    assert at(delta["retryAfter"]) == at(body["asOf"]) + delta["retryAfterPasses"] * INTERVAL

    # gamma still holds an object: it waits on its owner, with the reason why
    gamma = items["gamma"]
    assert (gamma["direction"], gamma["reason"]) == ("align", "blocked_on_owner")
    assert gamma["lastErr"] == "bucket still holds 1 object; the tenant must empty it"
    assert (gamma["desired"], gamma["actual"]) == ("absent (status delete_blocked)", "directory, 1 object")
    assert not {"failures", "retryAfterPasses", "retryAfter"} & set(gamma)

    # three strays against a reap breaker of two: none is reaped, each says why
    for stray in ("x1", "x2", "x3"):
        assert (items[stray]["direction"], items[stray]["reason"]) == ("reap", "circuit_breaker")
        assert set(items[stray]) == ITEM_FIELDS | {"lastErr"}
        assert items[stray]["lastErr"] == "reap breaker: 3 candidates exceed the breaker count of 2"
        assert (story.root / stray).is_dir()

    coverage = {c["status"]: c for c in body["coverage"]}
    assert set(coverage) == set(b.STATUSES)
    assert {s: c["count"] for s, c in coverage.items()} == {
        "active": 2, "creating": 1, "delete_blocked": 1, "deleted": 0, "deleting": 0,
    }
    assert coverage["deleted"]["terminal"] and not coverage["deleted"]["selected"]
    for c in coverage.values():
        assert set(c) == {"kind", "status", "count", "selected", "terminal", "oldestAgeSeconds", "stranded"}
        assert c["stranded"] is False
    assert coverage["active"]["oldestAgeSeconds"] >= 60  # the clock moved three intervals past creation


def test_a_backoff_item_after_a_second_failure_retries_passes_later_anchored_on_the_last_tick(story):
    play(story)
    story.tick(1)  # pass 4: eligible again, fails again
    story.tick(1)  # pass 5: backing off for longer
    delta = by_id(story.get(DRIFT).json())["delta"]
    assert delta["reason"] == "backoff" and delta["failures"] == 2
    assert delta["retryAfterPasses"] >= 1
    assert at(delta["retryAfter"]) == story.clock.now + delta["retryAfterPasses"] * INTERVAL


def test_the_http_report_is_the_cli_report(story):
    play(story)
    http = story.get(DRIFT).json()
    direct = drift_report(story.registry, story.settings, story.store, "buckets", story.clock()).dump()
    assert http == direct


def test_a_skipped_tick_moves_asof_only_and_items_describe_the_last_executed_pass(story):
    play(story)
    before = story.get(DRIFT).json()
    runner = Runner(story.registry, story.settings, story.store, clock=story.clock)
    # another process holds the reconciler's lease: the next tick is skipped
    assert try_acquire(story.store, "reconciler:buckets", "elsewhere", story.clock(), timedelta(hours=1))
    story.clock.now += INTERVAL
    runner.tick("buckets")
    after = story.get(DRIFT).json()
    assert at(after["asOf"]) == story.clock.now
    assert after["lastRanAt"] == before["lastRanAt"]
    # the same items; only retryAfter moves, anchored on the latest tick, since no pass ran
    strip = [{k: v for k, v in i.items() if k != "retryAfter"} for i in after["items"]]
    assert strip == [{k: v for k, v in i.items() if k != "retryAfter"} for i in before["items"]]
    delta = by_id(after)["delta"]
    assert at(delta["retryAfter"]) == story.clock.now + delta["retryAfterPasses"] * INTERVAL
    assert (after["drift"], after["blocked"], after["health"]) == (before["drift"], before["blocked"], before["health"])


def test_a_stranded_status_is_marked_and_counted_on_the_list_surface(story):
    play(story)
    # a row left in a status the work query does not select, nobody owns, and that is not final
    with story.store.begin() as conn:
        conn.execute(sa.update(b.buckets).where(b.buckets.c.name == "alpha").values(status="archiving"))
    coverage = {c["status"]: c for c in story.get(DRIFT).json()["coverage"]}
    archiving = coverage["archiving"]
    assert (archiving["count"], archiving["selected"], archiving["terminal"], archiving["stranded"]) == (1, False, False, True)
    assert "ownedBy" not in archiving
    row = next(r for r in story.get(LIST).json() if r["name"] == "buckets")
    assert row["stranded"] == 1


def test_the_list_surface(story):
    assert [r["name"] for r in story.get(LIST).json()] == ["buckets", "hosts", "pg_roles"]  # every installed plugin
    row = next(r for r in story.get(LIST).json() if r["name"] == "buckets")
    assert row == {
        "name": "buckets", "health": "unknown", "drift": 0, "blocked": 0, "asOf": None,
        "lastRanAt": None, "itemsReported": True, "coverageReported": True, "stranded": 0, "enabled": True,
    }
    # pg_roles is off by default: said so, its health left as the seed has it
    pg = next(r for r in story.get(LIST).json() if r["name"] == "pg_roles")
    assert (pg["enabled"], pg["health"]) == (False, "unknown")
    play(story)
    row = next(r for r in story.get(LIST).json() if r["name"] == "buckets")
    assert set(row) == {
        "name", "health", "drift", "blocked", "asOf", "lastRanAt", "itemsReported", "coverageReported", "stranded",
        "enabled",
    }
    assert (row["health"], row["drift"], row["blocked"], row["stranded"]) == ("degraded", 4, 1, 0)
    assert at(row["asOf"]) == at(row["lastRanAt"]) == story.clock.now


def test_drift_cap_drops_items_explicitly(tmp_path):
    from .story import build_story

    story = build_story(tmp_path)
    story.settings.reconcilers["buckets"]["drift_cap"] = 2
    story.root.mkdir(parents=True)
    for n in range(5):
        b.create(story.store, f"bucket-{n}")
    story.tick(1)
    body = story.get(DRIFT).json()
    assert (body["drift"], len(body["items"]), body["dropped"], body["driftCap"]) == (5, 2, 3, 2)


def test_a_reconciler_that_cannot_report_items_or_coverage_says_so(tmp_path):
    from datum.config import ReconcilerSettings

    from .story import Clock, settings_for

    class Bespoke:
        name = "bespoke"
        items_reported = False
        coverage = None

        def __init__(self, settings, store):
            pass

        def run(self, ctx):
            pass

    registry = Registry()
    registry.register("bespoke", Bespoke, ReconcilerSettings)
    from fastapi.testclient import TestClient

    from datum.api.front import tokens
    from datum.store import open_store

    settings = settings_for(tmp_path)
    store = open_store(settings.store_url)
    token = tokens.create(store, "operator")
    clock = Clock()
    Runner(registry, settings, store, clock=clock).tick("bespoke")
    with TestClient(create_app(settings, registry, store, clock=clock)) as client:
        body = client.get(
            "/v1/observability/admin/reconcilers/bespoke/drift", headers={"Authorization": f"Bearer {token}"}
        ).json()
    assert (body["health"], body["itemsReported"], body["items"]) == ("ok", False, [])
    assert (body["coverageReported"], body["coverage"]) == (False, [])
    store.dispose()


def test_a_failing_coverage_query_is_reported_in_the_body_not_as_an_error(story):
    play(story)
    with story.store.begin() as conn:
        conn.execute(sa.text("DROP TABLE buckets"))
    r = story.get(DRIFT)
    assert r.status_code == 200
    body = r.json()
    assert body["coverageReported"] is True and body["coverage"] == []
    assert "buckets" in body["coverageError"]
    assert body["drift"] == 4  # the rest of the report stands


def test_the_story_over_http_on_each_store(tmp_path, store_url):
    from .story import build_story

    story = build_story(tmp_path, store_url)
    try:
        play(story)
        body = story.get(DRIFT).json()
        assert (body["health"], body["drift"], body["blocked"]) == ("degraded", 4, 1)
        assert {i["id"]: i["reason"] for i in body["items"]} == {
            "delta": "backoff", "gamma": "blocked_on_owner",
            "x1": "circuit_breaker", "x2": "circuit_breaker", "x3": "circuit_breaker",
        }
        assert story.get(LIST).json()[0]["drift"] == 4
    finally:
        story.client.close()
        story.store.dispose()
