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


def alerts() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules():
    run = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in run.stdout


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
        "DatumReconcilerNotExecuting", "DatumHostFailed", "DatumHostSilent", "DatumHostAwaitingRebootTooLong",
    } <= names
    for a in alerts():
        assert a["annotations"]["summary"] and a["annotations"]["description"], a["alert"]
        assert ":" in a["annotations"]["summary"], f"{a['alert']}: the summary says what happened: then what to do"


def _scraped(tmp_path: Path) -> dict[str, list]:
    story = build_story(tmp_path)
    # leave delete_blocked out of the work query: gamma's row is stranded (the seed's failure)
    story.settings.reconcilers["buckets"]["work_query"] = ["creating", "active", "deleting"]
    play(story)
    story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.auth("agent"))
    story.client.post("/v1/hosts/web2/passes", json=pass_report("web2", "converged") | {
        "reason": None, "exitCode": 0, "counts": {"converged": 1},
        "resources": [{"id": "Package[nginx]", "type": "Package", "name": "nginx", "action": "none", "state": "converged"}],
    }, headers=story.auth("agent"))
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


def test_a_live_server_exposes_every_series_the_rules_read(tmp_path):
    families = _scraped(tmp_path)

    def value(name: str, **labels: str) -> float:
        (hit,) = [s.value for s in families[name] if all(s.labels.get(k) == v for k, v in labels.items())]
        return hit

    # every metric an alert expression names is exposed
    read = {m for a in alerts() for m in re.findall(r"\b(datum_[a-z_]+)", a["expr"])}
    assert read <= set(families), read - set(families)
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
    assert [(s.labels["host"], s.labels["state"]) for s in families["datum_host_state"]] == [
        ("web1", "failed"), ("web2", "converged")
    ]
    assert 0 <= value("datum_host_seconds_since_last_report", host="web1") < 600
    assert value("datum_host_resources", host="web1", state="blocked") == 1
    assert value("datum_host_resources", host="web2", state="converged") == 1
    assert value("datum_hosts", state="failed") == 1 and value("datum_hosts", state="awaiting-reboot") == 0
