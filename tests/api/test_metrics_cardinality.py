"""Series per host are bounded, so the count documented in docs/server.md for 10,000 hosts holds."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from datum.config import MetricsSettings
from datum.store.hosts import record_pass

from .story import pass_report, serve_fleet


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
        r = story.client.post("/v1/hosts/web1/passes", json=report, headers=story.agent("web1"))
        assert r.status_code in (200, 201), r.text
    refused = story.client.post("/v1/hosts/web2/passes", json=pass_report("web1"), headers=story.agent("web2"))
    assert refused.status_code == 422  # not taken: not counted
    seen = samples(story)
    assert seen[("datum_reports_received_total", (("outcome", "stored"),))] == 1.0
    assert seen[("datum_reports_received_total", (("outcome", "duplicate"),))] == 1.0
    assert seen[("datum_reports_received_total", (("outcome", "older"),))] == 1.0
    assert seen[("datum_report_intake_seconds_count", ())] == 3.0
    assert seen[("datum_report_intake_seconds_bucket", (("le", "+Inf"),))] == 3.0


GROUPED = """\
labels:
  db1: {role: tester}
nodes:
  - match: {name: "web*"}
    manifests: [web.yaml]
    group: web
  - match: {labels: {role: tester}}
    manifests: [web.yaml]
    group: testers
  - match: {facts: {os_release.ID: testos}}
    manifests: [web.yaml]
  - match: {name: "db*"}
    manifests: [web.yaml]
"""


def grouped(story) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["group"], dict(labels)["state"]): value
        for (name, labels), value in samples(story).items() if name == "datum_fleet_hosts"
    }


def report_with(story, host: str, state: str = "converged", facts: str | None = None, **extra: object):
    report = pass_report(host, state=state) | extra
    if state == "converged":
        report |= {"counts": {"converged": 1}, "resources": [report["resources"][0]]}
        del report["reason"]
    headers = story.agent(host) | ({"X-Datum-Facts": facts} if facts is not None else {})
    r = story.client.post(f"/v1/hosts/{host}/passes", json=report, headers=headers)
    assert r.status_code in (200, 201), r.text


def test_hosts_by_group_and_state_come_from_the_name_and_labels_never_the_facts_sent(story, tmp_path):
    directory = serve_fleet(story, tmp_path / "fleet")
    (directory / "nodes.yaml").write_text(GROUPED)
    for i in range(3):
        report_with(story, f"web{i}")
    report_with(story, "web9", state="failed")
    report_with(story, "db1")  # its label's rule: a later rule's group wins
    report_with(story, "db2", facts='{"os_release": {"ID": "testos"}}')  # claims: no group of the facts' rule
    report_with(story, "db3", facts="{not json")  # taken all the same
    seen = grouped(story)
    assert seen[("web", "converged")] == 3 and seen[("web", "failed")] == 1
    assert seen[("testers", "converged")] == 1 and seen[("default", "converged")] == 2
    assert sum(seen.values()) == 7
    # every group nodes.yaml names and default, by every state: 0 when none
    assert {g for g, _s in seen} == {"web", "testers", "default"} and len(seen) == 3 * 6
    # facts sent with the next reports move no host: not db1 out of its label's group, not web1 out of web
    report_with(story, "db1", facts="{}", seq=5, passId="p5")
    report_with(story, "web1", facts='{"os_release": {"ID": "testos"}}', state="failed", seq=6, passId="p6")
    seen = grouped(story)
    assert seen[("testers", "converged")] == 1 and seen[("default", "converged")] == 2
    assert seen[("web", "failed")] == 2 and seen[("web", "converged")] == 2


def test_hosts_by_group_are_bounded_by_groups_and_states_in_every_mode(story, tmp_path):
    directory = serve_fleet(story, tmp_path / "fleet")
    (directory / "nodes.yaml").write_text(GROUPED)
    fill(story)  # 62 hosts in no group (recorded without intake's group: default)
    for mode in ("all", "problems", "none"):
        count, seen = per_host(story, per_host=mode)
        by_group = {key: v for (name, key), v in seen.items() if name == "datum_fleet_hosts"}
        assert len(by_group) == 3 * 6, mode  # web, testers, default: whatever the fleet's size
        assert sum(by_group.values()) == 62


def test_a_stale_host_reads_unknown_in_its_group(story, tmp_path):
    from datetime import timedelta

    directory = serve_fleet(story, tmp_path / "fleet")
    (directory / "nodes.yaml").write_text(GROUPED)
    old = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    report_with(story, "web1", finishedAt=old, intervalSeconds=60)
    report_with(story, "web2", finishedAt=datetime.now(UTC).isoformat(), intervalSeconds=60)
    seen = grouped(story)
    assert seen[("web", "unknown")] == 1 and seen[("web", "converged")] == 1


def test_the_store_keeps_the_counts_by_group_through_every_write(story):
    """The triggers count every write, whoever makes it: an insert, a state or group changed, a delete."""
    import sqlalchemy as sa

    from datum.store.hosts import group_counts
    from datum.store.schema import hosts

    now = datetime.now(UTC)
    for host in ("a", "b", "c"):
        record_pass(story.store, host, pass_report(host))
    assert group_counts(story.store, 3.0, now) == {("default", "failed"): 3}
    with story.store.begin() as conn:
        conn.execute(sa.update(hosts).where(hosts.c.host == "a").values(group_name="web"))
        conn.execute(sa.update(hosts).where(hosts.c.host == "b").values(state="converged", group_name="db"))
        conn.execute(sa.delete(hosts).where(hosts.c.host == "c"))
    assert group_counts(story.store, 3.0, now) == {("web", "failed"): 1, ("db", "converged"): 1}
