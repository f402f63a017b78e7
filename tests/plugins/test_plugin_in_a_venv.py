"""A third-party plugin installed with pip into a venv of its own, end to end.

The venv sees this checkout's Datum (a ``.pth`` line adding the project's site
directory, so nothing is downloaded or rebuilt) and gets the plugin with
``pip install --no-deps --no-index`` of its wheel: seconds, not minutes. Then, in
that venv: ``datum reconcilers`` lists it and names the broken one, its
reconciler ticks under ``datum serve``, its drift is read over real HTTP on
loopback with its own reason, its reason is in ``/metrics``, its route answers
under its prefix, and the shipped reconcilers keep working beside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import site
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from . import tiny


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

TOKEN = "datum_plugin_test_token_0123456789abcdef"


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv with the tiny plugin installed by pip; Datum comes from this checkout."""
    root = tmp_path_factory.mktemp("plugin")
    built = tiny.wheel(root / "dist")
    env = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    (purelib,) = [p for p in Path(env / "lib").glob("python*/site-packages")]
    (purelib / "datum-host.pth").write_text(f"import site; site.addsitedir({site.getsitepackages()[0]!r})\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "-q",
         "--no-deps", "--no-index", "--disable-pip-version-check", str(built)],
        check=True, capture_output=True, text=True,
    )
    return env


def config(tmp_path: Path, **tiny_section: str) -> Path:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    cfg = tmp_path / "datum.toml"
    section = "\n".join(f"{k} = {v}" for k, v in tiny_section.items())
    cfg.write_text(
        f'store = "sqlite:///{tmp_path / "datum.db"}"\n'
        f'[server]\ntokens = {{ operator = ["sha256:{digest}"] }}\n'
        f'[reconcilers.buckets]\nroot = "{tmp_path / "buckets"}"\ninterval = "200ms"\n'
        f'[reconcilers.tiny]\nroot = "{tmp_path / "notes"}"\nconfirmation_ticks = 1\n'
        'want = ["a", "b"]\njammed = ["b"]\ninterval = "200ms"\n' + section + "\n"
        # The broken plugin is configured too: its section must not stop the others.
        "[reconcilers.broken]\nanything = 1\n"
    )
    return cfg


def datum(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["DATUM_HOME"] = str(venv.parent / "home")  # the validated-manifest cache of this venv's passes
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", "from datum.cli.main import main; main()", *args],
        capture_output=True, text=True, env=env, timeout=60,
    )


def test_listed_beside_the_shipped_ones_and_the_broken_one_is_named_with_why(venv, tmp_path):
    cfg = str(config(tmp_path))
    done = datum(venv, "reconcilers", "--json", "--config", cfg)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["name"] for r in rows] == ["buckets", "hosts", "pg_roles", "tiny", "broken"]
    # Installed and not loaded: listed as unknown with why, not left out (which reads as not installed).
    assert rows[-1] == {
        "name": "broken", "health": "unknown", "drift": 0, "blocked": 0, "asOf": None, "lastRanAt": None,
        "itemsReported": False, "coverageReported": False, "stranded": 0,
        "error": "the plugin did not load: RuntimeError: this plugin is broken on purpose", "enabled": True,
    }
    assert "plugin broken (broken_plugin:plugin) not loaded: RuntimeError: this plugin is broken on purpose" in done.stderr
    text = datum(venv, "reconcilers", "--config", cfg)
    assert "tiny" in text.stdout and "broken" in text.stderr


def test_it_ticks_serves_its_drift_reason_metrics_and_route_over_http(venv, tmp_path):
    cfg = config(tmp_path)
    port = free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [str(venv / "bin" / "python"), "-c", "from datum.cli.main import main; main()",
             "serve", "--config", str(cfg), "--port", str(port)],
            stdout=sink, stderr=subprocess.STDOUT, env={**env, "PYTHONUNBUFFERED": "1"},
        )
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        deadline = time.monotonic() + 30
        drift: dict = {}
        while time.monotonic() < deadline:  # ticked by the scheduler, nobody asked
            assert proc.poll() is None, log.read_text()
            try:
                drift = httpx.get(f"{base}/v1/observability/admin/reconcilers/tiny/drift", headers=auth).json()
            except httpx.TransportError:
                drift = {}
            if [i["id"] for i in drift.get("items", [])] == ["b"]:  # "a" made, "b" jammed
                break
            time.sleep(0.2)
        assert drift["health"] == "ok", drift
        assert [(i["id"], i["reason"], i["lastErr"]) for i in drift["items"]] == [("b", "tiny.jammed", "b is jammed")]
        assert (tmp_path / "notes" / "a").exists()
        listed = httpx.get(f"{base}/v1/observability/admin/reconcilers", headers=auth).json()
        health = {r["name"]: r["health"] for r in listed}
        assert set(health) == {"buckets", "hosts", "pg_roles", "tiny", "broken"}
        assert health["tiny"] == "ok" and health["broken"] == "unknown"
        assert listed[-1]["error"] == "the plugin did not load: RuntimeError: this plugin is broken on purpose"
        metrics = httpx.get(f"{base}/metrics", headers=auth).text
        assert 'datum_reconciler_items{direction="restore",reason="tiny.jammed",reconciler="tiny"} 1.0' in metrics
        assert 'reason="tiny.jammed",reconciler="buckets"' not in metrics  # its reasons are its own
        assert 'datum_plugin_broken{plugin="broken"} 1.0' in metrics
        assert httpx.get(f"{base}/v1/tiny", headers=auth).json() == {"plugin": "tiny"}
        assert httpx.get(f"{base}/v1/tiny").status_code == 401
        page = httpx.get(f"{base}/ui/overview", headers=auth)
        assert page.status_code == 200 and "tiny" in page.text
        assert "reconciler plugin broken did not load" in page.text  # under "Needs a human"
        assert "this plugin is broken on purpose" in page.text
        # The shipped reconciler beside it keeps working.
        buckets = httpx.get(f"{base}/v1/observability/admin/reconcilers/buckets/drift", headers=auth).json()
        assert buckets["health"] in ("ok", "unknown") and httpx.get(f"{base}/v1/buckets", headers=auth).status_code == 200
        openapi = httpx.get(f"{base}/openapi.json").json()
        assert "/v1/tiny" in openapi["paths"] and "/v1/buckets" in openapi["paths"]
    finally:
        proc.terminate()
        proc.wait(10)


def test_its_resource_type_is_applied_by_datum_apply(venv, tmp_path):
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text("resources:\n  - TinyNote[/hello.txt]:\n      text: hi\n")
    root = tmp_path / "root"
    root.mkdir()
    done = datum(venv, "validate", str(manifest))
    assert done.returncode == 0, done.stdout + done.stderr
    schema = json.loads(datum(venv, "schema").stdout)
    assert "TinyNote" in schema["$defs"]
    apply = ("apply", str(manifest), "--root", str(root), "--state", str(tmp_path / "state.db"))
    done = datum(venv, *apply)
    assert done.returncode == 2, done.stdout + done.stderr  # changed
    assert (root / "hello.txt").read_text() == "hi"
    again = datum(venv, *apply)
    assert again.returncode == 0 and "TinyNote[/hello.txt]" in again.stdout, again.stdout + again.stderr
