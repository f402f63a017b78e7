"""The buckets story end to end through the ``datum`` CLI, on a temporary directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def env(tmp_path, store_url):
    root = tmp_path / "buckets"
    cfg = tmp_path / "datum.toml"
    cfg.write_text(
        f'store = "{store_url}"\n'
        "[reconcilers.buckets]\n"
        f'root = "{root}"\n'
        'interval = "30s"\n'
        "confirmation_ticks = 2\n"
        "drift_cap = 500\n"
        "breaker = { restore = 100, reap = 2, align = 100 }\n"
        "backoff = { base_passes = 1, cap_passes = 64 }\n"
    )
    return root, str(cfg)


def drift(datum_cli, cfg):
    code, out, _ = datum_cli("drift", "buckets", "--config", cfg, "--json")
    assert code == 0
    return json.loads(out)


def items(report):
    return {i["id"]: i for i in report["items"]}


def test_the_buckets_story(datum_cli, env):
    root, cfg = env
    for name in ("alpha", "beta", "gamma"):
        assert datum_cli("bucket", "create", name, "--config", cfg)[0] == 0
    assert datum_cli("reconcile", "buckets", "--passes", "2", "--config", cfg)[0] == 0
    assert sorted(p.name for p in root.iterdir()) == ["alpha", "beta", "gamma"]
    _, out, _ = datum_cli("bucket", "list", "--config", cfg, "--json")
    assert {b["name"]: b["status"] for b in json.loads(out)} == dict.fromkeys(
        ["alpha", "beta", "gamma"], "active"
    )

    # beta still holds an object when its tenant asks to delete it; gamma is empty
    (root / "beta" / "report.csv").write_text("q3")
    datum_cli("bucket", "delete", "beta", "--config", cfg)
    datum_cli("bucket", "delete", "gamma", "--config", cfg)
    datum_cli("reconcile", "buckets", "--passes", "2", "--config", cfg)
    r = drift(datum_cli, cfg)
    beta = items(r)["beta"]
    assert (beta["direction"], beta["reason"]) == ("align", "blocked_on_owner")
    assert "1 object" in beta["lastErr"]
    assert (r["blocked"], r["health"]) == (1, "ok")
    assert not (root / "gamma").exists()
    _, out, _ = datum_cli("bucket", "list", "--config", cfg, "--json")
    statuses = {b["name"]: b["status"] for b in json.loads(out)}
    assert statuses == {"alpha": "active", "beta": "delete_blocked", "gamma": "deleted"}

    # three stray directories trip the reap breaker (threshold 2): nothing is reaped
    for stray in ("tmp-1", "tmp-2", "tmp-3"):
        (root / stray).mkdir()
    # a stray file squats on the name of a bucket being created
    (root / "delta").write_text("squatter")
    datum_cli("bucket", "create", "delta", "--config", cfg)
    datum_cli("reconcile", "buckets", "--passes", "2", "--config", cfg)
    r = drift(datum_cli, cfg)
    found = items(r)
    assert {found[s]["reason"] for s in ("tmp-1", "tmp-2", "tmp-3")} == {"circuit_breaker"}
    assert all((root / s).is_dir() for s in ("tmp-1", "tmp-2", "tmp-3"))
    delta = found["delta"]
    assert (delta["direction"], delta["reason"], delta["failures"]) == ("align", "apply_failed", 1)
    assert "not a directory" in delta["lastErr"] and delta["retryAfterPasses"] == 1
    assert delta["actual"].startswith("not a directory")
    assert r["health"] == "degraded"
    assert (r["drift"], r["blocked"]) == (4, 1)
    datum_cli("reconcile", "buckets", "--config", cfg)
    delta = items(drift(datum_cli, cfg))["delta"]
    assert (delta["reason"], delta["failures"], delta["retryAfterPasses"]) == ("backoff", 1, 0)
    assert "retryAfter" in delta

    # coverage: every status, none stranded, deleted is terminal
    coverage = {c["status"]: c for c in r["coverage"]}
    assert r["coverageReported"] is True
    assert coverage["delete_blocked"]["selected"] and not coverage["delete_blocked"]["stranded"]
    assert coverage["deleted"]["terminal"] and coverage["deleted"]["count"] == 1

    # the tenant empties beta and the operator clears the squatter: everything converges
    (root / "beta" / "report.csv").unlink()
    (root / "delta").unlink()
    for stray in ("tmp-1", "tmp-2", "tmp-3"):
        (root / stray).rmdir()
    datum_cli("reconcile", "buckets", "--passes", "3", "--config", cfg)
    _, out, _ = datum_cli("bucket", "list", "--config", cfg, "--json")
    statuses = {b["name"]: b["status"] for b in json.loads(out)}
    assert statuses == {"alpha": "active", "beta": "deleted", "gamma": "deleted", "delta": "active"}
    datum_cli("reconcile", "buckets", "--config", cfg)
    r = drift(datum_cli, cfg)
    assert (r["health"], r["drift"], r["blocked"], r["items"]) == ("ok", 0, 0, [])


def test_a_file_under_the_root_is_reported_not_deleted(datum_cli, env):
    root, cfg = env
    datum_cli("reconcile", "buckets", "--config", cfg)
    (root / "notes.txt").write_text("keep me")
    datum_cli("reconcile", "buckets", "--passes", "2", "--config", cfg)
    item = items(drift(datum_cli, cfg))["notes.txt"]
    # no bucket is desired at all: the breaker holds the reap back before it is tried
    assert (item["direction"], item["reason"]) == ("reap", "circuit_breaker")
    assert "allow_empty" in item["lastErr"]
    # allowed to reap into an empty desired set, the reap itself refuses a file
    Path(cfg).write_text(
        Path(cfg).read_text().replace("reap = 2", "reap = { count = 2, fraction = 1 }")
        + "allow_empty = true\n"
    )
    datum_cli("reconcile", "buckets", "--config", cfg)
    item = items(drift(datum_cli, cfg))["notes.txt"]
    assert (item["direction"], item["reason"]) == ("reap", "unexpected_kind")
    assert (root / "notes.txt").read_text() == "keep me"


def test_a_vanished_root_fails_the_pass_instead_of_restoring_everything(datum_cli, env):
    root, cfg = env
    datum_cli("bucket", "create", "alpha", "--config", cfg)
    datum_cli("reconcile", "buckets", "--passes", "2", "--config", cfg)
    (root / "alpha").rmdir()
    root.rmdir()
    code, out, _ = datum_cli("reconcile", "buckets", "--passes", "2", "--config", cfg)
    assert code == 4 and "failing" in out
    r = drift(datum_cli, cfg)
    assert r["health"] == "failing" and "cannot read bucket root" in r["error"]
    assert not root.exists()


@pytest.mark.parametrize(
    "args,code,finding",
    [
        (("drift", "nosuch", "--json"), 64, "NOT_FOUND"),
        (("reconcile", "nosuch", "--json"), 64, "NOT_FOUND"),
        (("bucket", "create", "../etc", "--json"), 65, "INVALID_INPUT"),
        (("bucket", "create", "A", "--json"), 65, "INVALID_INPUT"),
        (("bucket", "delete", "nosuch", "--json"), 64, "NOT_FOUND"),
        (("reconcile", "buckets", "--passes", "0", "--json"), 64, "USAGE"),
    ],
)
def test_bad_input_gets_one_clear_answer(datum_cli, env, args, code, finding):
    _, cfg = env
    got, out, _ = datum_cli(*args, "--config", cfg)
    assert got == code
    body = json.loads(out)
    assert body["issues"][0]["code"] == finding and body["issues"][0]["message"]
    _, out, _ = datum_cli("bucket", "list", "--config", cfg, "--json")
    assert json.loads(out) == []


def test_a_malformed_configuration_lists_every_finding(datum_cli, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(
        "[reconcilers.buckets]\n"
        'interval = "soon"\n'
        "confirmation_ticks = 0\n"
        "colour = 'blue'\n"
        "[reconcilers.nosuch]\n"
    )
    code, out, _ = datum_cli("drift", "buckets", "--config", str(cfg), "--json")
    assert code == 65
    fields = {f["field"] for i in json.loads(out)["issues"] for f in i.get("fields", [])}
    assert fields == {
        "reconcilers.buckets.interval",
        "reconcilers.buckets.confirmation_ticks",
        "reconcilers.buckets.colour",
        "reconcilers.nosuch",
    }
    assert not (tmp_path / "home").exists()


def test_not_toml_at_all(datum_cli, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("this is = = not toml")
    code, out, err = datum_cli("drift", "buckets", "--config", str(cfg))
    assert code == 65 and "not valid TOML" in err


def test_the_installed_command_runs(tmp_path):
    """One real process: the console script, its exit code and its JSON."""
    exe = Path(sys.executable).with_name("datum")
    env = {**os.environ, "DATUM_HOME": str(tmp_path)}
    done = subprocess.run(
        [str(exe), "drift", "buckets", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["reconciler"] == "buckets" and body["health"] == "unknown"
    assert body["itemsReported"] is True and body["coverageReported"] is True
    bad = subprocess.run([str(exe), "frobnicate"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 64 and "frobnicate" in bad.stderr


def test_a_work_query_that_forgets_a_status_strands_rows_and_coverage_says_so(datum_cli, env, tmp_path):
    """The seed's failure: delete_blocked missing from the work query. Drift stays 0; coverage sees it."""
    root, cfg = env
    datum_cli("bucket", "create", "logs", "--config", cfg)
    datum_cli("reconcile", "buckets", "--passes", "2", "--config", cfg)
    (root / "logs" / "a.log").write_text("x")
    datum_cli("bucket", "delete", "logs", "--config", cfg)
    datum_cli("reconcile", "buckets", "--passes", "2", "--config", cfg)
    forgetful = tmp_path / "forgetful.toml"
    forgetful.write_text(
        Path(cfg).read_text() + 'work_query = ["creating", "active", "deleting"]\n'
    )
    datum_cli("reconcile", "buckets", "--passes", "3", "--config", str(forgetful))
    r = drift(datum_cli, str(forgetful))
    assert (r["drift"], r["blocked"], r["items"]) == (0, 0, [])
    stranded = [c for c in r["coverage"] if c["stranded"]]
    assert [(c["status"], c["count"]) for c in stranded] == [("delete_blocked", 1)]
    assert (root / "logs" / "a.log").exists()  # a known bucket is never reaped as a stray


def test_an_unexpected_error_is_a_finding_not_a_traceback(datum_cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('store = "sqlite:////proc/nope/x.db"\n')
    code, out, err = datum_cli("drift", "buckets", "--config", str(cfg), "--json")
    assert code == 69
    assert json.loads(out)["issues"][0]["code"] == "UNAVAILABLE"
    assert "Traceback" not in out + err


def test_an_unparsable_store_url_is_not_echoed(datum_cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('store = "postgresql://admin:hunter2@[::1"\n')
    code, out, err = datum_cli("drift", "buckets", "--config", str(cfg), "--json")
    assert code == 65 and "hunter2" not in out + err
