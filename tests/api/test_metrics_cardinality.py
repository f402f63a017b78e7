"""Series per host are bounded, so the count documented in docs/server.md for 10,000 hosts holds."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from datum.config import MetricsSettings
from datum.store.hosts import record_pass

from .story import pass_report


def series(story) -> dict[str, int]:
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(story.get("/metrics").text):
        for s in family.samples:
            counts[s.name] = counts.get(s.name, 0) + 1
    return counts


def fill(story) -> None:
    """62 hosts: 50 converged without an interval, 10 agents' converged, db1 failed, db2 awaiting a manual reboot."""
    converged = pass_report(state="converged") | {
        "counts": {"converged": 40},
        "resources": [{"id": "Package[nginx]", "type": "Package", "name": "nginx", "action": "none", "state": "converged"}],
    }
    del converged["reason"]
    now = datetime.now(UTC).isoformat()
    for i in range(50):
        record_pass(story.store, f"web{i}", converged | {"host": f"web{i}"})
    for i in range(10):  # an agent's: its interval is one more series
        record_pass(story.store, f"app{i}", converged | {"host": f"app{i}", "finishedAt": now, "intervalSeconds": 600})
    record_pass(story.store, "db1", pass_report("db1"))  # failed: converged, failed, blocked resources
    record_pass(story.store, "db2", converged | {  # awaiting a reboot by hand: one more while it waits
        "host": "db2", "state": "awaiting-reboot", "reboot": {"required": True, "policy": "manual"},
    })


def test_host_series_grow_by_two_plus_the_resource_states_of_each_host(story):
    fill(story)
    counts = series(story)
    host_series = sum(n for name, n in counts.items() if name.startswith("datum_host"))
    assert counts["datum_hosts"] == 6  # one per host state, whatever the fleet's size
    assert counts["datum_fleet_stale_after"] == 1
    assert counts["datum_host_interval_seconds"] == 10
    assert counts["datum_host_awaiting_manual_reboot"] == 1
    assert host_series == 6 + 50 * (2 + 1) + 10 * (3 + 1) + (2 + 3) + (2 + 1 + 1)
    # per reconciler: a fixed set, plus three per coverage row
    # (buckets, pg_roles with its one reason of its own and hosts with its two: the contract's 20
    # reasons and their own, per direction)
    per_reconciler = sum(n for name, n in counts.items() if name.startswith("datum_reconciler"))
    assert counts["datum_reconciler_items"] == 20 * 3 + (20 + 1) * 3 + (20 + 2) * 3
    assert per_reconciler <= 3 * 85 + 3 + 3 * counts["datum_reconciler_coverage_rows"]


def test_a_scrape_reads_the_summary_intake_wrote_and_a_row_without_one_its_report(story):
    """The resource counts and the interval come from the summary columns (what /v1/hosts reads), not
    the report; a row with no summary (one intake could not summarize) still reads its report's."""
    import sqlalchemy as sa

    from datum.store.schema import hosts

    report = pass_report(state="converged") | {
        "counts": {"converged": 40}, "intervalSeconds": 60,
        "resources": [{"id": "Package[nginx]", "type": "Package", "name": "nginx", "action": "none", "state": "converged"}],
    }
    record_pass(story.store, "web1", report | {"host": "web1"})
    record_pass(story.store, "old1", report | {"host": "old1", "counts": {"converged": 7}})
    with story.store.begin() as conn:  # as a row from before summaries, or one intake could not summarize
        conn.execute(sa.update(hosts).where(hosts.c.host == "old1").values(summary=None, interval_seconds=None))
    samples = {
        (s.name, s.labels.get("host"), s.labels.get("state")): s.value
        for family in text_string_to_metric_families(story.get("/metrics").text)
        for s in family.samples
    }
    # web1: its summary's counts (its one resource), not the 40 its report claims
    assert samples[("datum_host_resources", "web1", "converged")] == 1.0
    assert samples[("datum_host_resources", "old1", "converged")] == 7.0
    # both silent for more than a few of their 60 s intervals: unknown, the interval read either way
    assert samples[("datum_host_state", "web1", "unknown")] == 1.0
    assert samples[("datum_host_state", "old1", "unknown")] == 1.0


def samples(story) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(story.get("/metrics").text)
        for s in family.samples
    }


def per_host(story, **metrics: object) -> tuple[int, dict]:
    state = story.app.state.datum
    state.settings = state.settings.model_copy(update={"metrics": MetricsSettings.model_validate(metrics)})
    counts = series(story)
    return sum(n for name, n in counts.items() if name.startswith("datum_host_")), samples(story)


def test_per_host_series_are_a_choice_and_the_fleet_wide_ones_are_always_there(story):
    fill(story)
    every, seen = per_host(story, per_host="all")
    assert every == 50 * (2 + 1) + 10 * (3 + 1) + (2 + 3) + (2 + 1 + 1)
    assert seen[("datum_metrics_per_host", (("mode", "all"),))] == 1.0
    # problems: only the hosts that do not read converged, with every series the shipped alerts read
    problems, seen = per_host(story, per_host="problems")
    assert problems == (2 + 3) + (2 + 1 + 1)
    assert seen[("datum_host_state", (("host", "db1"), ("state", "failed")))] == 1.0
    assert seen[("datum_host_awaiting_manual_reboot", (("host", "db2"), ("policy", "manual")))] == 1.0
    assert not any(name == "datum_host_state" and dict(labels)["host"].startswith("web") for name, labels in seen)
    # none: not one per-host series; the fleet's own say what the alerts need
    none, seen = per_host(story, per_host="none")
    assert none == 0
    assert seen[("datum_hosts", (("state", "failed"),))] == 1.0
    assert seen[("datum_hosts", (("state", "converged"),))] == 60.0
    assert seen[("datum_fleet_awaiting_manual_reboot", (("policy", "manual"),))] == 1.0
    assert seen[("datum_fleet_awaiting_manual_reboot", (("policy", "never"),))] == 0.0
    assert seen[("datum_fleet_stale_hosts", ())] == 0.0
    assert seen[("datum_metrics_per_host", (("mode", "none"),))] == 1.0
    # auto: every host's up to the limit, the problems above it
    assert per_host(story, per_host="auto", per_host_limit=62)[0] == every
    assert per_host(story, per_host="auto", per_host_limit=61)[0] == problems


def test_the_fleet_counts_stale_hosts_whatever_the_mode(story):
    from datetime import timedelta

    old = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    report = pass_report(state="converged") | {"finishedAt": old, "intervalSeconds": 60}
    for host in ("web1", "web2"):
        record_pass(story.store, host, report | {"host": host})
    _count, seen = per_host(story, per_host="none")
    assert seen[("datum_fleet_stale_hosts", ())] == 2.0
    assert seen[("datum_hosts", (("state", "unknown"),))] == 2.0


def test_the_process_counts_the_reports_it_took_and_how_long_each_took(story):
    for seq, pass_id in ((2, "p2"), (2, "p2"), (1, "p1")):  # then the same pass again, then an older one
        report = pass_report("web1") | {"seq": seq, "passId": pass_id}
        r = story.client.post("/v1/hosts/web1/passes", json=report, headers=story.auth("agent"))
        assert r.status_code in (200, 201), r.text
    refused = story.client.post("/v1/hosts/web2/passes", json=pass_report("web1"), headers=story.auth("agent"))
    assert refused.status_code == 422  # not taken: not counted
    seen = samples(story)
    assert seen[("datum_reports_received_total", (("outcome", "stored"),))] == 1.0
    assert seen[("datum_reports_received_total", (("outcome", "duplicate"),))] == 1.0
    assert seen[("datum_reports_received_total", (("outcome", "older"),))] == 1.0
    assert seen[("datum_report_intake_seconds_count", ())] == 3.0
    assert seen[("datum_report_intake_seconds_bucket", (("le", "+Inf"),))] == 3.0
