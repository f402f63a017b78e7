"""Metrics an alert can be written on: a reason that empties reads 0, items parked at the backoff cap are counted."""

from __future__ import annotations

import shutil

from prometheus_client.parser import text_string_to_metric_families

from .story import pass_report, play


def scrape(story) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(story.get("/metrics").text)
        for s in family.samples
    }


def value(samples, name, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_a_reason_that_empties_reads_zero_and_the_breaker_resets(story):
    play(story)
    b = {"reconciler": "buckets"}
    before = scrape(story)
    assert value(before, "datum_reconciler_items", **b, reason="circuit_breaker", direction="reap") == 3
    assert value(before, "datum_reconciler_breaker_tripped", **b, direction="reap") == 1
    for stray in ("x1", "x2", "x3"):
        shutil.rmtree(story.root / stray)
    story.tick()
    after = scrape(story)
    assert value(after, "datum_reconciler_items", **b, reason="circuit_breaker", direction="reap") == 0
    assert value(after, "datum_reconciler_breaker_tripped", **b, direction="reap") == 0
    assert set(k for k in before if k[0] == "datum_reconciler_items") == set(
        k for k in after if k[0] == "datum_reconciler_items"
    )


def test_items_parked_at_the_backoff_cap_are_counted(story):
    story.settings.reconcilers["buckets"]["backoff"] = {"base_passes": 1, "cap_passes": 2}
    play(story)  # delta: a file squats its name, every apply fails
    b = {"reconciler": "buckets"}
    assert value(scrape(story), "datum_reconciler_items_at_backoff_cap", **b) == 0  # one failure: window 1
    story.tick(4)
    samples = scrape(story)
    assert value(samples, "datum_reconciler_items_at_backoff_cap", **b) == 1
    assert value(samples, "datum_reconciler_seconds_since_last_pass", **b) == 0  # the injected clock, at the tick


def test_items_by_reason_and_direction_count_every_diverged_item_past_drift_cap(story):
    story.settings.reconcilers["buckets"]["drift_cap"] = 2
    play(story)  # five diverged: x1..x3 held by the reap breaker, delta in backoff, gamma blocked on its owner
    b = {"reconciler": "buckets"}
    samples = scrape(story)
    assert value(samples, "datum_reconciler_dropped_items", **b) == 3  # two of five retained
    assert len(story.get("/v1/observability/admin/reconcilers/buckets/drift").json()["items"]) == 2
    assert value(samples, "datum_reconciler_items", **b, reason="circuit_breaker", direction="reap") == 3
    assert value(samples, "datum_reconciler_items", **b, reason="blocked_on_owner", direction="align") == 1
    assert value(samples, "datum_reconciler_items", **b, reason="backoff", direction="align") == 1
    counted = sum(v for (name, labels), v in samples.items() if name == "datum_reconciler_items")
    drift = value(samples, "datum_reconciler_drift", **b) + value(samples, "datum_reconciler_blocked", **b)
    assert counted == drift == 5
    assert value(samples, "datum_reconciler_breaker_tripped", **b, direction="reap") == 1


def test_items_parked_at_the_backoff_cap_are_counted_past_drift_cap(story):
    story.settings.reconcilers["buckets"]["drift_cap"] = 0
    story.settings.reconcilers["buckets"]["backoff"] = {"base_passes": 1, "cap_passes": 2}
    play(story)  # delta: a file squats its name, every apply fails
    story.tick(4)
    assert value(scrape(story), "datum_reconciler_items_at_backoff_cap", reconciler="buckets") == 1


def test_a_tripped_breaker_shows_with_no_item_retained(story):
    story.settings.reconcilers["buckets"]["drift_cap"] = 0
    play(story)
    b = {"reconciler": "buckets"}
    samples = scrape(story)
    assert story.get("/v1/observability/admin/reconcilers/buckets/drift").json()["items"] == []
    assert value(samples, "datum_reconciler_breaker_tripped", **b, direction="reap") == 1
    assert value(samples, "datum_reconciler_breaker_tripped", **b, direction="restore") == 0
    assert value(samples, "datum_reconciler_items", **b, reason="circuit_breaker", direction="reap") == 3


def test_a_silent_host_reads_unknown_in_the_metrics_as_in_the_api(story):
    silent = pass_report()
    silent["intervalSeconds"] = 60  # an agent's report, finished weeks ago: its agent fell silent
    for host, report in (("web1", silent), ("web2", pass_report("web2"))):
        assert story.client.post(f"/v1/hosts/{host}/passes", json=report, headers=story.agent(host)).status_code == 201
    assert story.get("/v1/hosts/web1").json()["state"] == "unknown"
    samples = scrape(story)
    assert value(samples, "datum_host_state", host="web1", state="unknown") == 1
    assert ("datum_host_state", (("host", "web1"), ("state", "failed"))) not in samples
    # A one-off `datum apply` report has no interval to miss: its state stands.
    assert value(samples, "datum_host_state", host="web2", state="failed") == 1
    assert value(samples, "datum_hosts", state="unknown") == 1
    assert value(samples, "datum_hosts", state="failed") == 1
