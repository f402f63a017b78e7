"""The agent around a pass: one pass per store, posting the report, exit codes and the state store."""

from __future__ import annotations

import json
import os
import sys
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from datum.host.report import PassReport
from datum.host.statefile import StateStore, state_path

MANIFEST = "resources:\n  - File[/etc/motd]:\n      content: 'hi\\n'\n"


def test_a_second_pass_waits_then_refuses_clearly(host):
    manifest = host.manifest(MANIFEST)
    assert host.apply(manifest).code == 2  # creates the store
    host.configure('[host]\nlock_wait = "500ms"\n')
    store = StateStore(state_path(str(host.state)))
    try:
        with store.lease(timedelta(seconds=1)) as holder:
            blocked = host.apply(manifest)
            assert blocked.code == 69, blocked.out + blocked.err
            assert "another pass is running" in blocked.err
            assert holder.split(":")[1] in blocked.err  # names the holder's pid
    finally:
        store.close()
    assert host.apply(manifest).code == 0  # released


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, dict]] = []

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers.get("Authorization", ""), json.loads(body)))
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector():
    _Collector.received = []
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Collector.received
    server.shutdown()


def test_report_to_posts_the_pass_report_with_a_bearer_token(host, collector):
    url, received = collector
    host.configure('[host]\nname = "web-1"\n')
    result = host.apply(host.manifest(MANIFEST), "--report-to", url, "--token", "s3cret", "--json")
    assert result.code == 2
    ((path, auth, body),) = received
    assert path == "/v1/hosts/web-1/passes"
    assert auth == "Bearer s3cret"
    assert body == result.json
    PassReport.model_validate(body)
    assert "s3cret" not in result.out + result.err


def test_the_configured_report_to_gets_every_apply_and_never_a_plan(host, collector):
    """``[host] report_to``: an apply's report is posted there, the idle pass's too (it runs the
    engine: a configuration that posts keeps no idle entry); a plan persists nothing and posts
    nothing, though it is given out by the same code (``datum.cli.passes.deliver``)."""
    url, received = collector
    host.configure(f'[host]\nname = "web-1"\nreport_to = "{url}"\n')
    manifest = host.manifest(MANIFEST)
    plan = host.datum("plan", str(manifest), "--root", str(host.root))
    assert plan.code == 8 and "drifted: would create" in plan.out and received == []
    assert [host.apply(manifest).code for _ in range(3)] == [2, 0, 0]
    assert [(path, body["exitCode"]) for path, _auth, body in received] == [("/v1/hosts/web-1/passes", 2)] + [
        ("/v1/hosts/web-1/passes", 0)
    ] * 2
    assert host.datum("plan", str(manifest), "--root", str(host.root)).code == 0 and len(received) == 3


def test_an_unreachable_server_is_a_warning_not_a_failed_pass(host):
    result = host.apply(host.manifest(MANIFEST), "--report-to", "http://127.0.0.1:9", "--token", "s3cret")
    assert result.code == 2
    assert "warning: the pass report was not delivered" in result.err
    assert "s3cret" not in result.err
    assert host.status("--json").json["state"] == "converged"


@pytest.mark.parametrize("url", ["postgresql://127.0.0.1/datum", "sqlite:////tmp/datum.db"])
def test_a_url_as_state_is_refused_before_anything_is_applied(host, url):
    """One writer per table: the host's state is its own file; the server's store is the server's."""
    manifest = host.manifest(MANIFEST)
    for command in (["apply", str(manifest), "--root", str(host.root)], ["status"], ["reboot"]):
        done = host.datum(*command, "--state", url)
        assert done.code == 64, (command, done.out, done.err)
        assert f"--state {url!r} is a URL" in done.err and "--report-to" in done.err
    assert not (host.root / "etc" / "motd").exists()  # nothing applied


def test_a_url_as_state_in_the_configuration_is_a_finding_at_its_field(host):
    host.configure('[host]\nstate = "postgresql://127.0.0.1/datum"\n')
    done = host.apply(host.manifest(MANIFEST), "--config", str(host.config))
    assert done.code == 64 or done.code == 65, done.out + done.err
    assert "host.state" in done.err and "is a URL" in done.err
    assert not (host.root / "etc" / "motd").exists()


def test_an_unreadable_report_reads_as_unknown(host):
    import sqlite3

    host.apply(host.manifest(MANIFEST))
    db = sqlite3.connect(host.state)
    db.execute("UPDATE agent_reports SET report = 'not json {'")
    db.commit()
    db.close()
    status = host.status("--json")
    assert status.code == 4  # unknown's bit
    assert status.json["state"] == "unknown"
    assert "cannot be read" in status.json["reason"]
    assert host.apply(host.manifest(MANIFEST)).code == 0  # a pass replaces it
    assert host.status("--json").json["state"] == "converged"


def test_a_long_pass_keeps_its_lock_to_the_end(host):
    """The lock never expires under a live pass (lock_ttl 1s is unused): a second pass near the end of a 4 s one is refused."""
    import subprocess
    import time

    host.configure('[host]\nlock_ttl = "1s"\nlock_wait = "100ms"\n')
    slow = host.manifest(
        "resources:\n"
        + "".join(f"  - Exec[step{i}]:\n      command: 'sleep 0.25'\n" for i in range(16))
    )
    host.apply(host.manifest(MANIFEST, "warm.yaml"))  # the store exists
    first = subprocess.Popen(
        [sys.executable, "-c", "from datum.cli.main import main; main()", "apply", str(slow),
         "--root", str(host.root), "--state", str(host.state), "--config", str(host.config)],
        env={**os.environ, "DATUM_HOME": str(host.base / "home"), "DATUM_BOOT_ID_FILE": str(host.boot_id)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    time.sleep(2.5)  # past lock_ttl: the flock holds all the same
    second = host.apply(host.manifest(MANIFEST, "warm.yaml"), "--config", str(host.config))
    assert first.wait(30) == 2, first.stderr.read()
    assert second.code == 69, second.out + second.err


def test_the_local_state_file_holds_no_table_of_the_servers_store(host):
    """One writer per table: the agent's file has its own tables only, made without SQLAlchemy."""
    import sqlite3

    host.apply(host.manifest(MANIFEST))
    db = sqlite3.connect(host.state)
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    assert "agent_reports" in names
    assert not names & {"hosts", "locks", "alembic_version", "tokens", "item_memory"}
    after = host.status()
    assert after.code == 0
    assert "host state: converged" in after.out
