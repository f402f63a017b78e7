"""Metrics an alert can be written on: a reason that empties reads 0, items parked at the backoff cap are counted."""

from __future__ import annotations

import shutil

from prometheus_client.parser import text_string_to_metric_families

from .story import play


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
