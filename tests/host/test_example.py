"""The shipped example and the demo script: valid, converging twice, degraded where systemd is absent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_example_manifest_needs_only_its_package_built(host, tmp_path):
    result = host.datum("validate", str(REPO / "examples/webhost/manifest.yaml"), "--json")
    assert result.code == 65  # the .deb is built by the demo, not shipped
    (issue,) = result.json["issues"]
    assert [f["field"] for f in issue["fields"]] == ["resources[0].Package[datum-demo-web].source"]


def test_demo_host_converges_twice(tmp_path):
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin:/usr/sbin:/sbin", "DATUM_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [str(REPO / "scripts/demo-host"), str(tmp_path / "sandbox")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.split("== second pass")
    assert "Package[datum-demo-web]   created" in first
    assert "Directory[/srv/www]       updated" in first  # the stale page was purged
    assert "(exit code 34)" in first
    assert "(exit code 32)" in second
    assert "host state: degraded" in second
    assert "reason: Service[datum-demo-web] skipped: systemd is not PID 1" in second
    root = tmp_path / "sandbox" / "root"
    assert sorted(p.name for p in (root / "srv/www").iterdir()) == ["index.html"]
    assert "PORT=8081" in (root / "etc/datum-demo-web/web.conf").read_text()


def test_bench_smoke(tmp_path):
    """The benchmark runs and reports; its target is judged in the benchmark suite, not here."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench/bench_host.py"), "--files", "50", "--runs", "1"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "idle pass, 50 File:" in done.stdout and "first pass:" in done.stdout  # bench_host.py's report (bfae249)
