"""The shipped alert rules (contrib/prometheus/) against real promtool and a real ``datum serve``.

promtool checks the rules and runs their unit tests (contrib/prometheus/tests/);
then one ``datum serve`` on loopback is scraped and its text parsed with
prometheus_client's parser: every series the rules read is there, with the
labels they join on, zero-valued series included.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from .story import build_story, config_file, pass_report, play, serving

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "prometheus"
RULES = CONTRIB / "datum-rules.yml"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is missing: scripts/setup-promtool installs Debian's prometheus package")
    return found


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def alerts() -> list[dict]:
    return [rule for rule in rules() if "alert" in rule]


def read_series(rule: dict) -> set[str]:
    """The series of ``/metrics`` a rule's expression reads (not the recorded ones, ``level:metric``)."""
    return {m for m in re.findall(r"\b(datum_[a-z_:]+)", rule["expr"]) if ":" not in m}


def test_promtool_checks_the_rules():
    run = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(rules())} rules found" in run.stdout


def test_promtool_unit_tests_of_the_rules_pass():
    tests = sorted((CONTRIB / "tests").glob("*.yml"))
    assert tests
    run = subprocess.run(
        [promtool(), "test", "rules", *map(str, tests)], capture_output=True, text=True, timeout=120, cwd=CONTRIB
    )
    assert run.returncode == 0, run.stdout + run.stderr
    tested = set(re.findall(r"alertname: (\w+)", "\n".join(t.read_text() for t in tests)))
    assert tested == {a["alert"] for a in alerts()}, "every alert has a unit test"


def test_every_alert_says_what_to_do():
    names = {a["alert"] for a in alerts()}
    assert {
        "DatumStrandedRows", "DatumBreakerTripped", "DatumItemsAtBackoffCap", "DatumReconcilerFailing",
        "DatumReconcilerNotExecuting", "DatumReconcilerNeverRan", "DatumHostFailed", "DatumHostSilent",
        "DatumHostUnknown", "DatumHostAwaitingManualReboot", "DatumHostAwaitingRebootTooLong", "DatumRebootOverdue",
    } <= names
    for a in alerts():
        assert a["annotations"]["summary"] and a["annotations"]["description"], a["alert"]
        assert ":" in a["annotations"]["summary"], f"{a['alert']}: the summary says what happened: then what to do"
        # a count is said in good English ("1 item", "2 items"): never "(s)", never a bare {{ $value }} before a noun
        # outside the template's conditional (the unit tests render both forms)
        assert "(s)" not in a["annotations"]["summary"], a["alert"]
        if re.search(r"\{\{ \$value \}\} [a-z{]", a["annotations"]["summary"]):
            assert "{{ if eq $value 1.0 }}" in a["annotations"]["summary"], a["alert"]


def _scraped(tmp_path: Path) -> dict[str, list]:
    story = build_story(tmp_path)
    # leave delete_blocked out of the work query: gamma's row is stranded (the seed's failure)
    story.settings.reconcilers["buckets"]["work_query"] = ["creating", "active", "deleting"]
    play(story)
    story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
    now = datetime.now(UTC).isoformat()
    converged = pass_report("web2", "converged") | {
        "startedAt": now, "finishedAt": now, "exitCode": 0, "counts": {"converged": 1},
        "resources": [{"id": "Package[nginx]", "type": "Package", "name": "nginx", "action": "none", "state": "converged"}],
    }
    del converged["reason"]
    assert story.client.post("/v1/hosts/web2/passes", json=converged | {"intervalSeconds": 600},
                             headers=story.agent("web2")).is_success
    # awaiting a reboot: by hand (manual), by hand but already requested, and by the maintenance window
    kernel = {"required": True, "reason": "kernel 6.1.0-9 in /boot, running 6.1.0-8"}
    for host, reboot in (
        ("db1", {"policy": "manual"}),
        ("db2", {"policy": "manual", "requestedAt": now}),
        ("db3", {"policy": "maintenance"}),
    ):
        awaiting = converged | {"host": host, "state": "awaiting-reboot", "reboot": kernel | reboot}
        assert story.client.post(f"/v1/hosts/{host}/passes", json=awaiting, headers=story.agent(host)).is_success
    token = story.tokens["operator"]
    story.client.close()
    story.store.dispose()
    cfg = config_file(tmp_path, scheduler=False)
    cfg.write_text(cfg.read_text().replace("[server]\n", 'work_query = ["creating", "active", "deleting"]\n[server]\n'))
    with serving(cfg, tmp_path / "serve.log") as base:
        r = httpx.get(base + "metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    families: dict[str, list] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            families.setdefault(s.name, []).append(s)
    return families


# Series exposed only with a setting, and the test that scrapes them from a live server with it.
WITH_A_SETTING = {
    "datum_fleet_reboots_blocked": "[fleet] reboot_block_query: tests/agent/test_reboot_health.py",
    "datum_tls_cert_expiry_timestamp_seconds": "[server] tls: tests/agent/test_agent_tls.py",
}


def test_a_live_server_exposes_every_series_the_rules_read(tmp_path):
    families = _scraped(tmp_path)

    def value(name: str, **labels: str) -> float:
        (hit,) = [s.value for s in families[name] if all(s.labels.get(k) == v for k, v in labels.items())]
        return hit

    # every metric a rule's expression names is exposed (those only exposed with a setting: where they are tested)
    read = {m for r in rules() for m in read_series(r)}
    assert read - set(families) == set(WITH_A_SETTING), read - set(families)
    b = {"reconciler": "buckets"}
    # items by reason and direction, zero-valued series kept: every reason x direction
    assert len([s for s in families["datum_reconciler_items"] if s.labels["reconciler"] == "buckets"]) == 20 * 3
    assert value("datum_reconciler_items", **b, reason="circuit_breaker", direction="reap") == 3
    assert value("datum_reconciler_items", **b, reason="cooldown", direction="align") == 0
    assert value("datum_reconciler_breaker_tripped", **b, direction="reap") == 1
    assert value("datum_reconciler_breaker_tripped", **b, direction="restore") == 0
    assert value("datum_reconciler_breaker_threshold_items", **b, direction="reap") == 2
    assert value("datum_reconciler_items_at_backoff_cap", **b) == 0
    # the stranded status, by kind and status; the others read 0
    assert value("datum_reconciler_stranded_rows", **b, kind="bucket", status="delete_blocked") == 1
    assert value("datum_reconciler_stranded_rows", **b, kind="bucket", status="active") == 0
    assert value("datum_reconciler_stranded_coverage_rows", **b) == 1
    assert value("datum_reconciler_coverage_rows", **b, kind="bucket", status="delete_blocked",
                 selected="false", terminal="false") == 1
    assert value("datum_reconciler_coverage_oldest_age_seconds", **b, kind="bucket", status="delete_blocked") >= 0
    assert value("datum_reconciler_seconds_since_last_pass", **b) >= 0
    assert value("datum_reconciler_seconds_since_last_tick", **b) >= 0
    assert value("datum_reconciler_interval_seconds", **b) == 30
    assert value("datum_reconciler_health", **b, health="degraded") == 1
    # hosts: one state series per host, its age, its resources by state
    assert sorted((s.labels["host"], s.labels["state"]) for s in families["datum_host_state"]) == [
        ("db1", "awaiting-reboot"), ("db2", "awaiting-reboot"), ("db3", "awaiting-reboot"),
        ("web1", "failed"), ("web2", "converged"),
    ]
    assert 0 <= value("datum_host_seconds_since_last_report", host="web1") < 600
    assert value("datum_host_resources", host="web1", state="blocked") == 1
    assert value("datum_host_resources", host="web2", state="converged") == 1
    assert value("datum_hosts", state="failed") == 1 and value("datum_hosts", state="awaiting-reboot") == 3
    # the silent-host rule's parts: each agent's interval (none for a report without one), the server's multiple
    assert value("datum_host_interval_seconds", host="web2") == 600
    assert "web1" not in {s.labels["host"] for s in families["datum_host_interval_seconds"]}
    assert value("datum_fleet_stale_after") == 3
    # a reboot only a human will do: db1 alone (db2's was requested, db3 waits for its window)
    assert [(s.labels["host"], s.labels["policy"], s.value) for s in families["datum_host_awaiting_manual_reboot"]] == [
        ("db1", "manual", 1.0)
    ]
    # switched on, and off (pg_roles, off by default)
    assert value("datum_reconciler_enabled", **b) == 1
    assert value("datum_reconciler_enabled", reconciler="pg_roles") == 0
