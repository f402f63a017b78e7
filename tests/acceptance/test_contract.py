"""Black-box acceptance tests, written from the contract alone (../shared/spec/contract.md).

They drive only the public surface: the installed ``datum`` command in
subprocesses and ``datum serve`` over HTTP on loopback, the way an external
acceptance suite would. The rest of the suite tests the parts from inside.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

DATUM = str(Path(sys.executable).with_name("datum"))
PAST = {"created", "updated", "deleted", "restarted"}
STATES = {"pending", "applying", "converged", "drifted", "failed", "blocked", "skipped"}
HOST_STATES = {"converged", "drifted", "failed", "degraded", "awaiting-reboot", "unknown"}
TIMING = {"asOf", "lastRanAt", "oldestAgeSeconds", "retryAfter"}


def run(home, *args, input=None, timeout=60):
    env = {k: v for k, v in os.environ.items() if k not in ("DATUM_CONFIG", "DATUM_TOKEN")}
    env["DATUM_HOME"] = str(home)
    return subprocess.run([DATUM, *map(str, args)], env=env, capture_output=True, text=True,
                          input=input, timeout=timeout)


def pass_lines(out):
    lines = {}
    for line in out.splitlines():
        m = re.match(r"^(\w+\[[^\]]+\])\s+(.*)$", line)
        if m:
            lines[m.group(1)] = m.group(2).strip()
    return lines


def host_state(out):
    m = re.search(r"^host state:\s*(\S+)", out, re.M)
    return m and m.group(1)


def reason_line(out):
    m = re.search(r"^reason:\s*(.*)$", out, re.M)
    return m and m.group(1)


def assert_error_shape(doc):
    assert isinstance(doc, dict) and isinstance(doc.get("issues"), list) and doc["issues"], doc
    for i in doc["issues"]:
        assert isinstance(i.get("code"), str) and isinstance(i.get("message"), str), i
        for f in i.get("fields", []):
            assert set(f) >= {"field", "message"}, f


@pytest.fixture
def env(tmp_path):
    home = tmp_path / "home"
    root = tmp_path / "root"
    home.mkdir()
    root.mkdir()
    return home, root, tmp_path


def manifest(tmp_path, text, name="m.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def build_deb(where: Path, name: str, version: str) -> Path:
    d = where / f"build-{name}-{version}"
    (d / "DEBIAN").mkdir(parents=True)
    (d / "usr/share" / name).mkdir(parents=True)
    (d / "usr/share" / name / "README").write_text("x\n")
    (d / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: t <t@example.com>\nDescription: t\n")
    out = where / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--build", str(d), str(out)], check=True, capture_output=True)
    return out


def dpkg_root(root: Path):
    db = root / "var/lib/dpkg"
    for sub in ("info", "updates", "triggers"):
        (db / sub).mkdir(parents=True, exist_ok=True)
    (db / "status").touch()
    (db / "available").touch()


# ---------------------------------------------------------------------- host agent

SIMPLE = """\
resources:
  - Directory[etc-app]:
      path: /etc/app
  - File[app.conf]:
      path: /etc/app/app.conf
      content: "hello\\n"
      mode: "0640"
      requires: [Directory[etc-app]]
"""


def test_apply_first_changes_exit2_then_converged_exit0(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    r = run(home, "apply", m, "--root", root)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = pass_lines(r.stdout)
    assert lines["Directory[etc-app]"] == "created"
    assert lines["File[app.conf]"] == "created"
    assert host_state(r.stdout) == "converged"
    assert reason_line(r.stdout) is None
    f = root / "etc/app/app.conf"
    assert f.read_text() == "hello\n"
    assert (f.stat().st_mode & 0o7777) == 0o640
    r2 = run(home, "apply", m, "--root", root)
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert pass_lines(r2.stdout) == {"Directory[etc-app]": "converged", "File[app.conf]": "converged"}
    assert host_state(r2.stdout) == "converged"


def test_update_reported_past_tense(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    run(home, "apply", m, "--root", root)
    (root / "etc/app/app.conf").write_text("tampered\n")
    r = run(home, "apply", m, "--root", root)
    assert r.returncode == 2, r.stdout
    assert pass_lines(r.stdout)["File[app.conf]"] == "updated"
    assert (root / "etc/app/app.conf").read_text() == "hello\n"


def test_mode_only_change_is_updated(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    run(home, "apply", m, "--root", root)
    os.chmod(root / "etc/app/app.conf", 0o777)
    r = run(home, "apply", m, "--root", root)
    assert r.returncode == 2
    assert pass_lines(r.stdout)["File[app.conf]"] == "updated"
    assert ((root / "etc/app/app.conf").stat().st_mode & 0o7777) == 0o640


CONTRACT_STYLE = """\
resources:
  - Package[hello-datum]:
      ensure: installed
      source: hello-datum_1.0_all.deb
  - File[nginx.conf]:
      path: /etc/nginx/nginx.conf
      content: "worker_processes 1;\\n"
      mode: "0644"
      requires: [Package[hello-datum]]
  - Service[nginx]:
      ensure: running
      enable: true
      subscribes: [File[nginx.conf]]
"""


def test_contract_example_manifest_package_file_service(env):
    home, root, tmp = env
    build_deb(tmp, "hello-datum", "1.0")
    dpkg_root(root)
    m = manifest(tmp, CONTRACT_STYLE)
    r = run(home, "apply", m, "--root", root)
    lines = pass_lines(r.stdout)
    assert lines["Package[hello-datum]"] in PAST, r.stdout
    assert lines["File[nginx.conf]"] == "created"
    assert lines["Service[nginx]"].startswith("skipped:"), r.stdout  # systemd is not PID 1 here
    assert host_state(r.stdout) == "degraded"
    assert "Service[nginx]" in (reason_line(r.stdout) or "")
    assert r.returncode == 2 | 32, r.stdout
    r2 = run(home, "apply", m, "--root", root)
    assert r2.returncode == 32, r2.stdout
    assert pass_lines(r2.stdout)["Package[hello-datum]"] == "converged"
    assert (root / "usr/share/hello-datum/README").exists()


def test_service_skipped_degraded_exit32(env):
    home, root, tmp = env
    m = manifest(tmp, "resources:\n  - Service[nginx]:\n      ensure: running\n      enable: true\n")
    r = run(home, "apply", m, "--root", root)
    assert r.returncode == 32, r.stdout + r.stderr
    assert pass_lines(r.stdout)["Service[nginx]"].startswith("skipped: ")
    assert host_state(r.stdout) == "degraded"
    assert reason_line(r.stdout)


def test_observe_mode_reports_drift_exit8_changes_nothing(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    assert run(home, "apply", m, "--root", root).returncode == 2
    (root / "etc/app/app.conf").write_text("tampered\n")
    r = run(home, "apply", m, "--root", root, "--mode", "observe")
    assert r.returncode == 8, r.stdout + r.stderr
    assert pass_lines(r.stdout)["File[app.conf]"] == "drifted"
    assert pass_lines(r.stdout)["Directory[etc-app]"] == "converged"
    assert host_state(r.stdout) == "drifted"
    assert "File[app.conf]" in (reason_line(r.stdout) or "")
    assert (root / "etc/app/app.conf").read_text() == "tampered\n"


def test_observe_on_empty_root_creates_nothing(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    r = run(home, "apply", m, "--root", root, "--mode", "observe")
    assert r.returncode == 8, r.stdout
    assert not (root / "etc").exists()


FAILING = """\
resources:
  - File[blocker]:
      path: /etc/notadir
      content: "i am a file\\n"
  - File[child]:
      path: /etc/notadir/child.conf
      content: "x\\n"
      requires: [File[blocker]]
  - File[grandchild]:
      path: /etc/other.conf
      content: "y\\n"
      requires: [File[child]]
"""


def test_failed_and_blocked_exit4(env):
    home, root, tmp = env
    m = manifest(tmp, FAILING)
    r = run(home, "apply", m, "--root", root)
    lines = pass_lines(r.stdout)
    assert lines["File[blocker]"] == "created"
    assert lines["File[child]"].startswith("failed: "), r.stdout
    assert lines["File[grandchild]"].startswith("blocked: "), r.stdout
    assert "File[child]" in lines["File[grandchild]"]
    assert host_state(r.stdout) == "failed"
    assert "File[child]" in (reason_line(r.stdout) or "")
    assert r.returncode == 2 | 4, r.stdout
    assert not (root / "etc/other.conf").exists()


def test_failure_state_persisted_and_cleared(env):
    home, root, tmp = env
    m = manifest(tmp, FAILING)
    run(home, "apply", m, "--root", root)
    s = run(home, "status", "--json")
    assert json.loads(s.stdout)["state"] == "failed"
    (root / "etc/notadir").unlink()
    m2 = manifest(tmp, FAILING.replace("/etc/notadir\n", "/etc/isfile\n"), "m2.yaml")
    r = run(home, "apply", m2, "--root", root)
    assert r.returncode == 2, r.stdout
    assert json.loads(run(home, "status", "--json").stdout)["state"] == "converged"


def test_apply_json_report(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    r = run(home, "apply", m, "--root", root, "--json")
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert doc["state"] == "converged"
    states = {x["id"]: x for x in doc["resources"]}
    assert states["File[app.conf]"]["state"] == "converged"
    assert states["File[app.conf]"]["action"] == "create"
    for x in doc["resources"]:
        assert x["state"] in STATES


INVALID = """\
resources:
  - File[a]:
      path: /etc/a
      content: "a"
      bogus_field: 1
  - File[b]:
      path: /etc/b
      content: "b"
      requires: [File[missing]]
  - File[x]:
      path: /etc/x
      content: "x"
      mode: "rwxrwxrwx"
"""


def test_invalid_manifest_lists_every_finding_exit65_nothing_applied(env):
    home, root, tmp = env
    m = manifest(tmp, INVALID)
    r = run(home, "apply", m, "--root", root, "--json")
    assert r.returncode == 65, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert_error_shape(doc)
    fields = [f["field"] for i in doc["issues"] for f in i.get("fields", [])]
    assert "resources[2].File[x].mode" in fields, fields
    assert any(f.startswith("resources[0].File[a]") for f in fields), fields
    assert any(f.startswith("resources[1].File[b]") for f in fields), fields
    assert list(root.iterdir()) == []
    assert "Traceback" not in r.stdout + r.stderr


def test_validate_text_and_json(env):
    home, root, tmp = env
    m = manifest(tmp, INVALID)
    r = run(home, "validate", m)
    assert r.returncode == 65
    assert "resources[2].File[x].mode" in r.stdout + r.stderr
    rj = run(home, "validate", m, "--json")
    assert rj.returncode == 65
    doc = json.loads(rj.stdout)
    assert_error_shape(doc)
    assert any(i["code"] == "INVALID_INPUT" for i in doc["issues"])
    good = manifest(tmp, SIMPLE, "good.yaml")
    assert run(home, "validate", good).returncode == 0
    assert list(root.iterdir()) == []


def test_requires_cycle_named(env):
    home, root, tmp = env
    m = manifest(tmp, """\
resources:
  - File[a]:
      path: /a
      content: a
      requires: [File[c]]
  - File[b]:
      path: /b
      content: b
      requires: [File[a]]
  - File[c]:
      path: /c
      content: c
      requires: [File[b]]
""")
    r = run(home, "validate", m, "--json")
    assert r.returncode == 65
    doc = json.loads(r.stdout)
    assert_error_shape(doc)
    text = json.dumps(doc)
    assert "cycle" in text.lower()
    for n in ("File[a]", "File[b]", "File[c]"):
        assert n in text
    ra = run(home, "apply", m, "--root", root)
    assert ra.returncode == 65
    assert list(root.iterdir()) == []


def test_duplicate_identity_rejected(env):
    home, root, tmp = env
    m = manifest(tmp, "resources:\n  - File[a]:\n      path: /a\n      content: a\n  - File[a]:\n      path: /b\n      content: b\n")
    r = run(home, "apply", m, "--root", root, "--json")
    assert r.returncode == 65
    assert_error_shape(json.loads(r.stdout))
    assert list(root.iterdir()) == []


def test_yaml_syntax_error_exit65(env):
    home, root, tmp = env
    m = manifest(tmp, "resources:\n  - File[a]: [\n")
    r = run(home, "apply", m, "--root", root, "--json")
    assert r.returncode == 65
    assert_error_shape(json.loads(r.stdout))


def test_dotdot_path_escape_refused(env):
    home, root, tmp = env
    m = manifest(tmp, "resources:\n  - File[esc]:\n      path: /../escaped.txt\n      content: x\n")
    r = run(home, "apply", m, "--root", root)
    assert r.returncode in (65,) or (r.returncode & 4), r.stdout + r.stderr
    assert not (tmp / "escaped.txt").exists()
    assert not (root.parent / "escaped.txt").exists()


def test_symlink_escape_refused_never_followed(env):
    home, root, tmp = env
    outside = tmp / "outside"
    outside.mkdir()
    (root / "etc").symlink_to(outside)
    m = manifest(tmp, "resources:\n  - File[esc]:\n      path: /etc/x.conf\n      content: x\n")
    r = run(home, "apply", m, "--root", root)
    assert r.returncode & 4 or r.returncode == 65, r.stdout + r.stderr
    assert not (outside / "x.conf").exists()
    if r.returncode != 65:
        assert pass_lines(r.stdout)["File[esc]"].startswith("failed:")


def test_usage_errors_exit64(env):
    home, root, tmp = env
    assert run(home, "apply").returncode == 64
    m = manifest(tmp, SIMPLE)
    assert run(home, "apply", m, "--mode", "bogus").returncode == 64
    assert run(home, "apply", m, "--no-such-flag").returncode == 64
    assert run(home, "plan").returncode == 64


def test_reboot_marker_awaiting_reboot_exit16(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    assert run(home, "apply", m, "--root", root).returncode == 2
    (root / "var/run").mkdir(parents=True)
    (root / "var/run/reboot-required").write_text("*** System restart required ***\n")
    r = run(home, "apply", m, "--root", root)
    assert r.returncode == 16, r.stdout + r.stderr
    assert host_state(r.stdout) == "awaiting-reboot"
    assert reason_line(r.stdout)
    assert json.loads(run(home, "status", "--json").stdout)["state"] == "awaiting-reboot"


def test_kernel_package_update_awaiting_reboot(env):
    home, root, tmp = env
    dpkg_root(root)
    build_deb(tmp, "linux-image-datum", "1.0")
    build_deb(tmp, "linux-image-datum", "2.0")
    m1 = manifest(tmp, "resources:\n  - Package[linux-image-datum]:\n      ensure: installed\n      source: linux-image-datum_1.0_all.deb\n      reboot: false\n", "k1.yaml")
    assert run(home, "apply", m1, "--root", root).returncode == 2
    m2 = manifest(tmp, "resources:\n  - Package[linux-image-datum]:\n      ensure: \"2.0\"\n      source: linux-image-datum_2.0_all.deb\n", "k2.yaml")
    r = run(home, "apply", m2, "--root", root)
    assert r.returncode == 2 | 16, r.stdout + r.stderr
    assert pass_lines(r.stdout)["Package[linux-image-datum]"] == "updated"
    assert host_state(r.stdout) == "awaiting-reboot"
    assert reason_line(r.stdout) == "Package[linux-image-datum] updated, running kernel differs"
    # still awaiting on the next pass: the boot id has not changed
    r2 = run(home, "apply", m2, "--root", root)
    assert r2.returncode == 16, r2.stdout
    assert host_state(r2.stdout) == "awaiting-reboot"


def test_status_unknown_before_any_pass(env):
    home, root, tmp = env
    r = run(home, "status", "--json")
    doc = json.loads(r.stdout)
    assert doc.get("state") == "unknown", doc


def test_status_reads_persisted_without_running_pass(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    run(home, "apply", m, "--root", root)
    (root / "etc/app/app.conf").write_text("tampered\n")
    r = run(home, "status", "--json")
    doc = json.loads(r.stdout)
    assert doc["state"] == "converged"
    assert (root / "etc/app/app.conf").read_text() == "tampered\n"
    txt = run(home, "status")
    assert "converged" in txt.stdout


def test_status_state_path(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    st = tmp / "state.db"
    run(home, "apply", m, "--root", root, "--state", st)
    assert st.exists()
    assert json.loads(run(home, "status", "--state", st, "--json").stdout)["state"] == "converged"


def test_plan_unified_diff_changes_nothing(env):
    home, root, tmp = env
    # A world-readable file: the content diff of any other is redacted (contract section 8).
    m = manifest(tmp, SIMPLE.replace('mode: "0640"', 'mode: "0644"'))
    run(home, "apply", m, "--root", root)
    (root / "etc/app/app.conf").write_text("tampered\n")
    r = run(home, "plan", m, "--root", root)
    assert r.returncode == 8, r.stdout + r.stderr
    assert re.search(r"^\s*--- ", r.stdout, re.M) and re.search(r"^\s*\+\+\+ ", r.stdout, re.M), r.stdout
    assert re.search(r"^\s*@@ ", r.stdout, re.M)
    assert re.search(r"^\s*-tampered$", r.stdout, re.M)
    assert re.search(r"^\s*\+hello$", r.stdout, re.M)
    assert (root / "etc/app/app.conf").read_text() == "tampered\n"


def test_plan_redacts_the_diff_of_a_file_that_is_not_world_readable(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)  # mode 0640
    run(home, "apply", m, "--root", root)
    (root / "etc/app/app.conf").write_text("secret-tampered\n")
    r = run(home, "plan", m, "--root", root)
    assert r.returncode == 8, r.stdout + r.stderr
    assert "secret-tampered" not in r.stdout and "hello" not in r.stdout
    assert "redacted" in r.stdout


def test_plan_on_converged_exit0(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    run(home, "apply", m, "--root", root)
    assert run(home, "plan", m, "--root", root).returncode == 0


def test_plan_invalid_exit65(env):
    home, root, tmp = env
    assert run(home, "plan", manifest(tmp, INVALID), "--root", root).returncode == 65


# ---------------------------------------------------------------------- reconciler

def bucket_cfg(tmp, **over):
    broot = tmp / "buckets"
    broot.mkdir(exist_ok=True)
    vals = dict(confirmation_ticks=2, drift_cap=500, restore=100, reap=10, align=100, extra="")
    vals.update(over)
    cfg = tmp / "datum.toml"
    cfg.write_text(f"""\
store = "sqlite:///{tmp}/home/datum.db"

[reconcilers.buckets]
root = "{broot}"
interval = "30s"
confirmation_ticks = {vals['confirmation_ticks']}
drift_cap = {vals['drift_cap']}
breaker = {{ restore = {vals['restore']}, reap = {vals['reap']}, align = {vals['align']} }}
backoff = {{ base_passes = 1, cap_passes = 64 }}
{vals['extra']}
""")
    return cfg, broot


def drift(home, cfg):
    r = run(home, "drift", "buckets", "--config", cfg, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def reconcile(home, cfg, n):
    r = run(home, "reconcile", "buckets", "--passes", n, "--config", cfg)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


TOP = {"reconciler", "asOf", "lastRanAt", "health", "drift", "blocked", "itemsReported", "items",
       "dropped", "driftCap", "coverageReported", "coverage"}
ITEM_REQ = {"kind", "direction", "id", "streak", "confirmationsNeeded", "reason"}
ITEM_OPT = {"lastErr", "desired", "actual", "failures", "retryAfterPasses", "retryAfter"}
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def check_report(doc):
    assert TOP <= set(doc), set(doc) ^ TOP
    assert doc["reconciler"] == "buckets"
    assert doc["health"] in {"ok", "degraded", "failing", "unknown"}
    for k in ("asOf", "lastRanAt"):
        if doc[k] is not None:
            assert RFC3339.match(doc[k]), doc[k]
    for it in doc["items"]:
        assert ITEM_REQ <= set(it), it
        assert set(it) <= ITEM_REQ | ITEM_OPT, it
        for k in ITEM_OPT:
            if k in it:
                assert it[k] is not None, (k, it)
        assert it["direction"] in {"restore", "reap", "align"}
        if it["direction"] != "align":
            assert "actual" not in it, it
        if it["reason"] in ("backoff", "apply_failed"):
            assert {"failures", "lastErr", "retryAfterPasses"} <= set(it), it
        else:
            assert "failures" not in it and "retryAfterPasses" not in it, it
    if "coverageError" in doc:
        assert doc["coverageError"] is not None
    for row in doc["coverage"]:
        assert {"kind", "status", "count", "selected", "terminal", "oldestAgeSeconds", "stranded"} <= set(row), row
        if "ownedBy" in row:
            assert row["ownedBy"] is not None
        want = row["count"] > 0 and not row["selected"] and not row["terminal"] and "ownedBy" not in row
        assert row["stranded"] == want, row
    blocked_items = sum(1 for it in doc["items"] if it["reason"] == "blocked_on_owner")
    assert doc["drift"] + doc["blocked"] == len(doc["items"]) + doc["dropped"]
    assert doc["blocked"] >= blocked_items


def test_bucket_create_list_delete(env):
    home, root, tmp = env
    cfg, broot = bucket_cfg(tmp)
    assert run(home, "bucket", "create", "alpha", "--config", cfg).returncode == 0
    r = run(home, "bucket", "list", "--config", cfg, "--json")
    assert r.returncode == 0
    rows = json.loads(r.stdout)
    rows = rows if isinstance(rows, list) else rows.get("buckets", rows)
    assert any(b["name"] == "alpha" and b["status"] == "creating" for b in rows), rows
    assert run(home, "bucket", "delete", "alpha", "--config", cfg).returncode == 0
    r = run(home, "bucket", "list", "--config", cfg)
    assert "alpha" in r.stdout and "deleting" in r.stdout


def test_bucket_invalid_name_error_shape(env):
    home, root, tmp = env
    cfg, _ = bucket_cfg(tmp)
    r = run(home, "bucket", "create", "../evil", "--config", cfg, "--json")
    assert r.returncode == 65, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert_error_shape(doc)
    assert doc["issues"][0]["code"] == "INVALID_INPUT"


def test_drift_before_first_pass_health_unknown(env):
    home, root, tmp = env
    cfg, _ = bucket_cfg(tmp)
    doc = drift(home, cfg)
    check_report(doc)
    assert doc["health"] == "unknown"
    assert doc["itemsReported"] is True and doc["coverageReported"] is True
    assert doc["driftCap"] == 500


def test_restore_waits_for_confirmation_then_acts(env):
    home, root, tmp = env
    cfg, broot = bucket_cfg(tmp)
    run(home, "bucket", "create", "alpha", "--config", cfg)
    reconcile(home, cfg, 1)
    doc = drift(home, cfg)
    check_report(doc)
    assert doc["health"] == "ok" and doc["drift"] == 1
    (it,) = doc["items"]
    assert it["kind"] == "bucket" and it["direction"] == "restore" and it["id"] == "alpha"
    assert it["streak"] == 1 and it["confirmationsNeeded"] == 2
    assert it["reason"] == "awaiting_confirmation"
    assert not (broot / "alpha").exists()
    reconcile(home, cfg, 1)  # a new process: streak memory lives in the store
    assert (broot / "alpha").is_dir()
    doc = drift(home, cfg)
    check_report(doc)
    reasons = [i["reason"] for i in doc["items"]]
    assert reasons in ([], ["acting"]), doc["items"]
    reconcile(home, cfg, 1)
    doc = drift(home, cfg)
    assert doc["items"] == [] and doc["drift"] == 0 and doc["health"] == "ok"
    assert "active" in run(home, "bucket", "list", "--config", cfg).stdout


def test_streak_memory_survives_process_restart(env):
    home, root, tmp = env
    cfg, broot = bucket_cfg(tmp, confirmation_ticks=4)
    run(home, "bucket", "create", "alpha", "--config", cfg)
    for n in (1, 2, 3):
        reconcile(home, cfg, 1)
        (it,) = drift(home, cfg)["items"]
        assert it["streak"] == n and it["confirmationsNeeded"] == 4
    assert not (broot / "alpha").exists()


def test_reap_stray_directory(env):
    home, root, tmp = env
    # Section 8: a reap respects the fraction of what exists, and an empty desired
    # set trips the breaker unless allow_empty; this world allows both.
    cfg, broot = bucket_cfg(tmp, reap="{ count = 10, fraction = 1.0 }", extra="allow_empty = true")
    (broot / "stray").mkdir()
    reconcile(home, cfg, 1)
    doc = drift(home, cfg)
    check_report(doc)
    (it,) = doc["items"]
    assert it["direction"] == "reap" and it["id"] == "stray" and it["reason"] == "awaiting_confirmation"
    reconcile(home, cfg, 2)
    assert not (broot / "stray").exists()


def test_empty_desired_set_never_reaps_by_default(env):
    home, root, tmp = env
    cfg, broot = bucket_cfg(tmp)
    (broot / "stray").mkdir()
    reconcile(home, cfg, 3)
    doc = drift(home, cfg)
    check_report(doc)
    (it,) = doc["items"]
    assert it["direction"] == "reap" and it["reason"] == "circuit_breaker"
    assert (broot / "stray").is_dir()


def test_align_apply_failed_then_backoff(env):
    home, root, tmp = env
    cfg, broot = bucket_cfg(tmp)
    run(home, "bucket", "create", "gamma", "--config", cfg)
    (broot / "gamma").write_text("not a dir")
    reconcile(home, cfg, 2)
    doc = drift(home, cfg)
    check_report(doc)
    (it,) = doc["items"]
    assert it["direction"] == "align", it
    assert it["reason"] == "apply_failed", it
    assert it["failures"] == 1 and isinstance(it["lastErr"], str) and it["lastErr"]
    assert "retryAfterPasses" in it and "actual" in it and "desired" in it
    assert doc["health"] == "degraded"
    reconcile(home, cfg, 1)
    doc = drift(home, cfg)
    check_report(doc)
    (it,) = doc["items"]
    assert it["reason"] in ("backoff", "apply_failed"), it
    assert doc["health"] == "degraded"
    reconcile(home, cfg, 6)
    (it,) = drift(home, cfg)["items"]
    assert it["failures"] >= 2, it
    if "retryAfter" in it:
        assert RFC3339.match(it["retryAfter"])


def test_blocked_on_owner_counts_in_blocked_not_drift(env):
    home, root, tmp = env
    cfg, broot = bucket_cfg(tmp)
    run(home, "bucket", "create", "delta", "--config", cfg)
    reconcile(home, cfg, 2)
    assert (broot / "delta").is_dir()
    (broot / "delta" / "obj1").write_text("data")
    assert run(home, "bucket", "delete", "delta", "--config", cfg).returncode == 0
    reconcile(home, cfg, 3)
    doc = drift(home, cfg)
    check_report(doc)
    (it,) = doc["items"]
    assert it["reason"] == "blocked_on_owner", it
    assert doc["blocked"] == 1 and doc["drift"] == 0
    assert doc["health"] == "ok"
    assert "delete_blocked" in run(home, "bucket", "list", "--config", cfg).stdout
    cov = {r["status"]: r for r in doc["coverage"]}
    assert cov["delete_blocked"]["count"] == 1 and cov["delete_blocked"]["selected"] is True
    assert cov["delete_blocked"]["stranded"] is False
    (broot / "delta" / "obj1").unlink()
    reconcile(home, cfg, 3)
    assert not (broot / "delta").exists()
    assert "deleted" in run(home, "bucket", "list", "--config", cfg).stdout
    doc = drift(home, cfg)
    assert doc["blocked"] == 0 and doc["items"] == []


def test_circuit_breaker_refuses_mass_reap(env):
    home, root, tmp = env
    cfg, broot = bucket_cfg(tmp, reap=2)
    for n in ("s1", "s2", "s3"):
        (broot / n).mkdir()
    reconcile(home, cfg, 3)
    doc = drift(home, cfg)
    check_report(doc)
    assert len(doc["items"]) == 3
    assert {i["reason"] for i in doc["items"]} == {"circuit_breaker"}
    assert all((broot / n).is_dir() for n in ("s1", "s2", "s3"))
    assert doc["health"] == "degraded"


def test_drift_cap_and_dropped(env):
    home, root, tmp = env
    cfg, broot = bucket_cfg(tmp, drift_cap=2, reap=100, confirmation_ticks=5)
    for i in range(5):
        (broot / f"stray{i}").mkdir()
    reconcile(home, cfg, 1)
    doc = drift(home, cfg)
    check_report(doc)
    assert doc["driftCap"] == 2
    assert len(doc["items"]) == 2
    assert doc["dropped"] == 3
    assert doc["drift"] == 5


def test_coverage_stranded_when_status_unselected(env):
    home, root, tmp = env
    # `work_query` is not a contract key; it is how this build reproduces the stranded rows.
    cfg, broot = bucket_cfg(tmp, extra='work_query = ["creating", "active", "deleting"]')
    run(home, "bucket", "create", "delta", "--config", cfg)
    reconcile(home, cfg, 2)
    (broot / "delta" / "obj").write_text("x")
    run(home, "bucket", "delete", "delta", "--config", cfg)
    reconcile(home, cfg, 3)
    doc = drift(home, cfg)
    check_report(doc)
    cov = {r["status"]: r for r in doc["coverage"]}
    assert cov["delete_blocked"]["stranded"] is True, cov
    assert cov["deleted"]["stranded"] is False


def test_drift_unknown_reconciler(env):
    home, root, tmp = env
    cfg, _ = bucket_cfg(tmp)
    r = run(home, "drift", "nope", "--config", cfg, "--json")
    assert r.returncode != 0
    doc = json.loads(r.stdout)
    assert_error_shape(doc)
    assert doc["issues"][0]["code"] == "NOT_FOUND"


def test_config_breaker_table_form(env):
    home, root, tmp = env
    cfg, broot = bucket_cfg(tmp)
    assert run(home, "reconcile", "buckets", "--passes", 1, "--config", cfg).returncode == 0
    bad = tmp / "bad.toml"
    bad.write_text(cfg.read_text().replace("drift_cap = 500", "drift_cap = -1"))
    r = run(home, "drift", "buckets", "--config", bad, "--json")
    assert r.returncode != 0
    assert "Traceback" not in r.stdout + r.stderr


# ---------------------------------------------------------------------- server

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, base, home, cfg, broot, op, agent, proc, log):
        self.base, self.home, self.cfg, self.broot = base, home, cfg, broot
        self.op, self.agent, self.proc, self.log = op, agent, proc, log

    def req(self, method, path, token=None, body=None):
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        rq = urllib.request.Request(self.base + path, data=data, method=method)
        if token:
            rq.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            rq.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(rq, timeout=30) as resp:
                return resp.status, resp.read().decode(), resp.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), e.headers


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("srv")
    home = tmp / "home"
    home.mkdir()
    broot = tmp / "buckets"
    broot.mkdir()
    cfg = tmp / "datum.toml"
    cfg.write_text(f"""\
store = "sqlite:///{home}/datum.db"

[reconcilers.buckets]
root = "{broot}"
interval = "30s"
confirmation_ticks = 2
drift_cap = 500
breaker = {{ restore = 100, reap = 10, align = 100 }}
backoff = {{ base_passes = 1, cap_passes = 64 }}

[server]
scheduler = false
""")
    op = run(home, "token", "create", "--principal", "operator", "--config", cfg)
    # an agent token speaks for its own host: this machine's, the host `datum apply` reports as
    ag = run(home, "token", "create", "--principal", "agent", "--host", os.uname().nodename, "--config", cfg)
    assert op.returncode == 0 and ag.returncode == 0, op.stderr + ag.stderr
    op_tok = op.stdout.strip().splitlines()[-1].strip()
    ag_tok = ag.stdout.strip().splitlines()[-1].strip()
    # give the reconciler some state before serving
    run(home, "bucket", "create", "alpha", "--config", cfg)
    run(home, "bucket", "create", "gamma", "--config", cfg)
    (broot / "gamma").write_text("file")
    (broot / "stray").mkdir()
    run(home, "reconcile", "buckets", "--passes", "2", "--config", cfg)
    port = free_port()
    log = open(tmp / "server.log", "w")
    env = {k: v for k, v in os.environ.items() if k not in ("DATUM_CONFIG",)}
    env["DATUM_HOME"] = str(home)
    proc = subprocess.Popen([DATUM, "serve", "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    s = Server(base, home, cfg, broot, op_tok, ag_tok, proc, tmp / "server.log")
    for _ in range(100):
        try:
            code, _, _ = s.req("GET", "/v1/observability/admin/reconcilers")
            if code in (401, 200):
                break
        except Exception:
            time.sleep(0.2)
    else:
        proc.kill()
        raise RuntimeError(open(tmp / "server.log").read())
    yield s
    proc.terminate()
    proc.wait(10)
    log.close()


def strip_timing(o):
    if isinstance(o, dict):
        return {k: strip_timing(v) for k, v in o.items() if k not in TIMING}
    if isinstance(o, list):
        return [strip_timing(v) for v in o]
    return o


def err(body, code):
    doc = json.loads(body)
    assert_error_shape(doc)
    assert doc["issues"][0]["code"] == code, doc
    assert "Traceback" not in body
    return doc


def test_http_401_without_or_bad_token(server):
    for path in ("/v1/observability/admin/reconcilers", "/v1/observability/admin/reconcilers/buckets/drift",
                 "/v1/hosts/anything", "/metrics"):
        code, body, _ = server.req("GET", path)
        assert code == 401, (path, code, body)
        err(body, "UNAUTHENTICATED")
    code, body, _ = server.req("GET", "/v1/observability/admin/reconcilers", token="not-a-token")
    assert code == 401
    err(body, "UNAUTHENTICATED")
    assert "not-a-token" not in body


def test_http_403_agent_reads_names_action(server):
    code, body, _ = server.req("GET", "/v1/observability/admin/reconcilers/buckets/drift", token=server.agent)
    assert code == 403, body
    doc = err(body, "FORBIDDEN")
    assert doc["issues"][0].get("action") == "observability:ReadSubstrate", doc
    code, body, _ = server.req("GET", "/v1/observability/admin/reconcilers", token=server.agent)
    assert code == 403
    assert err(body, "FORBIDDEN")["issues"][0].get("action") == "observability:ReadSubstrate"
    code, body, _ = server.req("GET", "/v1/hosts/somehost", token=server.agent)
    assert code == 403
    assert err(body, "FORBIDDEN")["issues"][0].get("action") == "fleet:ReadHost"
    assert server.agent not in body


def test_http_404_unknown_reconciler_and_host(server):
    code, body, _ = server.req("GET", "/v1/observability/admin/reconcilers/nope/drift", token=server.op)
    assert code == 404
    err(body, "NOT_FOUND")
    code, body, _ = server.req("GET", "/v1/hosts/never-reported", token=server.op)
    assert code == 404
    err(body, "NOT_FOUND")


def test_http_drift_equals_cli(server):
    code, body, _ = server.req("GET", "/v1/observability/admin/reconcilers/buckets/drift", token=server.op)
    assert code == 200, body
    http = json.loads(body)
    check_report(http)
    cli = json.loads(run(server.home, "drift", "buckets", "--config", server.cfg, "--json").stdout)
    assert strip_timing(http) == strip_timing(cli)
    assert http["asOf"] == cli["asOf"] and http["lastRanAt"] == cli["lastRanAt"]
    assert {i["reason"] for i in http["items"]} >= {"apply_failed"}


def test_http_list_surface(server):
    code, body, _ = server.req("GET", "/v1/observability/admin/reconcilers", token=server.op)
    assert code == 200, body
    doc = json.loads(body)
    rows = doc if isinstance(doc, list) else doc.get("reconcilers", doc.get("items"))
    (b,) = [r for r in rows if r["name"] == "buckets"]
    for k in ("name", "health", "drift", "blocked", "asOf", "lastRanAt", "itemsReported", "coverageReported", "stranded"):
        assert k in b, (k, b)
    d = json.loads(run(server.home, "drift", "buckets", "--config", server.cfg, "--json").stdout)
    assert b["health"] == d["health"] and b["drift"] == d["drift"] and b["blocked"] == d["blocked"]
    assert b["stranded"] == sum(1 for r in d["coverage"] if r["stranded"])


def test_http_report_pass_then_read_host(server, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    m = manifest(tmp_path, SIMPLE)
    home = tmp_path / "agenthome"
    home.mkdir()
    r = run(home, "apply", m, "--root", root, "--json")
    assert r.returncode == 2
    report = json.loads(r.stdout)
    host = report["host"]
    code, body, _ = server.req("POST", f"/v1/hosts/{host}/passes", token=server.agent, body=r.stdout.encode())
    assert code in (200, 201), body
    code, body, _ = server.req("GET", f"/v1/hosts/{host}", token=server.op)
    assert code == 200, body
    doc = json.loads(body)
    assert doc.get("state") == "converged", doc
    assert server.agent not in body and server.op not in body


def test_http_report_pass_forbidden_for_operator(server, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    home = tmp_path / "h"
    home.mkdir()
    r = run(home, "apply", manifest(tmp_path, SIMPLE), "--root", root, "--json")
    host = json.loads(r.stdout)["host"]
    code, body, _ = server.req("POST", f"/v1/hosts/{host}/passes", token=server.op, body=r.stdout.encode())
    assert code == 403, body
    assert err(body, "FORBIDDEN")["issues"][0].get("action") == "fleet:ReportPass"


def test_http_report_pass_invalid_body_422(server):
    own = f"/v1/hosts/{os.uname().nodename}/passes"
    code, body, _ = server.req("POST", own, token=server.agent, body={"nonsense": True})
    assert code == 422, body
    err(body, "INVALID_INPUT")
    code, body, _ = server.req("POST", own, token=server.agent, body=b"{not json")
    assert code == 422, body
    err(body, "INVALID_INPUT")


def test_http_metrics(server):
    code, body, headers = server.req("GET", "/metrics", token=server.op)
    assert code == 200
    assert "# HELP" in body or "# TYPE" in body


def test_http_web_page(server):
    code, body, headers = server.req("GET", "/", token=None)
    assert code in (200, 401)
    if code == 200:
        assert "<html" in body.lower()


def test_tokens_stored_hashed_not_logged(server):
    db = server.home / "datum.db"
    raw = db.read_bytes()
    assert server.op.encode() not in raw and server.agent.encode() not in raw
    log = server.log.read_text()
    assert server.op not in log and server.agent not in log
    assert "Traceback" not in log


# ---------------------------------------------------------------------- extra probes

def test_observe_drift_plus_skipped_exit40_state_drifted_persisted(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE + "  - Service[app]:\n      ensure: running\n      subscribes: [File[app.conf]]\n")
    run(home, "apply", m, "--root", root)
    (root / "etc/app/app.conf").write_text("tampered\n")
    r = run(home, "apply", m, "--root", root, "--mode", "observe")
    assert r.returncode == 8 | 32, r.stdout
    assert host_state(r.stdout) == "drifted"
    assert json.loads(run(home, "status", "--json").stdout)["state"] == "drifted"


def test_plan_persists_nothing(env):
    home, root, tmp = env
    m = manifest(tmp, SIMPLE)
    run(home, "apply", m, "--root", root)
    (root / "etc/app/app.conf").write_text("tampered\n")
    assert run(home, "plan", m, "--root", root).returncode == 8
    assert json.loads(run(home, "status", "--json").stdout)["state"] == "converged"


def test_reconciler_failing_when_substrate_unreadable(env):
    home, root, tmp = env
    cfg, broot = bucket_cfg(tmp)
    shutil.rmtree(broot)
    broot.write_text("not a dir")
    r = run(home, "reconcile", "buckets", "--passes", 1, "--config", cfg)
    assert r.returncode != 0
    doc = drift(home, cfg)
    check_report(doc)
    assert doc["health"] == "failing"


def test_reconcile_usage_errors(env):
    home, root, tmp = env
    cfg, _ = bucket_cfg(tmp)
    assert run(home, "reconcile", "buckets", "--passes", 0, "--config", cfg).returncode == 64
    assert run(home, "drift").returncode == 64
    assert run(home, "bucket", "create").returncode == 64


def test_http_bucket_write_denied_by_default_policy(server):
    for tok in (server.op, server.agent):
        code, body, _ = server.req("PUT", "/v1/buckets/newbucket", token=tok)
        assert code == 403, body
        assert err(body, "FORBIDDEN")["issues"][0].get("action") == "buckets:Write"
