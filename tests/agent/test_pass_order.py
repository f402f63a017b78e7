"""Every pass reaches the server, in order; and the smaller items of issue 21 on the agent's side:
a damaged local report reads ``unknown``, a host named like a token is refused, the configuration and
the token file are re-read on change and on SIGHUP."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import httpx

from datum.store import open_store
from datum.store.history import HOST, recent

from .conftest import DATUM, Agent, Fleet
from .faulty import faulty


def _argv(tmp_path: Path, url: str, *extra: str) -> tuple[list[str], dict[str, str]]:
    (tmp_path / "root").mkdir(exist_ok=True)
    (tmp_path / "boot_id").write_text("boot-1\n")
    (tmp_path / "agent.toml").write_text(f'[host]\nname = "h1"\nboot_id_file = "{tmp_path / "boot_id"}"\n')
    if not (tmp_path / "token").exists():
        (tmp_path / "token").write_text("first-token\n")
        (tmp_path / "token").chmod(0o600)
    argv = [*DATUM, "agent", "--server", url, "--token-file", str(tmp_path / "token"), "--root", str(tmp_path / "root"),
            "--state", str(tmp_path / "agent.db"), "--config", str(tmp_path / "agent.toml"), *extra]
    return argv, {**os.environ, "DATUM_HOME": str(tmp_path / "home")}


def _wait(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_two_agents_on_one_state_file_number_their_passes_in_the_order_they_run(tmp_path: Path):
    """The first agent's fetch is slow; the second runs and delivers meanwhile. Before: the first had taken
    its sequence number before its fetch, so its pass arrived with the lower one, after the higher."""
    with faulty() as server:
        argv, env = _argv(tmp_path, server.url, "--once")
        assert subprocess.run(argv, env=env, capture_output=True, timeout=120).returncode == 2
        server.delay = 6.0
        slow = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
        _wait(lambda: server.fetches == 2)  # the slow one is in its fetch
        fast = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert fast.returncode == 0, fast.stderr
        assert slow.wait(120) == 0, slow.stderr.read() if slow.stderr else ""
    assert len(server.received) == 3
    assert server.received == sorted(server.received)  # each pass numbered when it ran, delivered in order


def test_a_pass_older_than_the_hosts_latest_is_kept_in_its_history_once(fleet: Fleet):
    operator = fleet.token("operator")
    agent = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    assert agent.once().code == 2
    first = fleet.get("/v1/hosts/web1", operator).json()["report"]
    assert agent.once().code == 0
    latest = fleet.get("/v1/hosts/web1", operator).json()["report"]
    auth = {"Authorization": f"Bearer {agent.token}"}
    older = {**first, "passId": "11111111-1111-1111-1111-111111111111", "seq": first["seq"] - 1,
             "state": "unknown", "incomplete": True, "reason": "stopped by SIGTERM"}
    for _ in range(2):  # sent again after a lost answer: kept once
        answer = httpx.post(fleet.url + "/v1/hosts/web1/passes", json=older, headers=auth, timeout=30)
        assert answer.status_code == 200 and answer.headers["Datum-Pass"] == "older"
    row = fleet.get("/v1/hosts/web1", operator).json()
    assert row["report"]["seq"] == latest["seq"] and row["state"] == "converged"  # not the host's state
    store = open_store(fleet.store_url)
    try:
        with store.connect() as conn:
            strip = recent(conn, HOST, "web1")
    finally:
        store.dispose()
    assert len(strip) == 3  # not lost: in the history, where it arrived
    assert [(r.outcome, r.completed) for r in strip] == [("converged", True), ("converged", True), ("unknown", False)]


def test_status_reads_a_damaged_report_as_unknown_saying_why(tmp_path: Path):
    """Before: exit 70, ``unexpected KeyError: 'mode'`` or a ``TypeError``."""
    with faulty() as server:
        argv, env = _argv(tmp_path, server.url, "--once")
        assert subprocess.run(argv, env=env, capture_output=True, timeout=120).returncode == 2
    damaged = [
        {"state": "converged"},
        {"state": "converged", "mode": "enforce", "finishedAt": "x", "exitCode": "a", "durationSeconds": "z"},
        {"state": "converged", "mode": "enforce", "resources": [{"state": 3}]},
    ]
    status = [*DATUM, "status", "--state", str(tmp_path / "agent.db"), "--config", str(tmp_path / "agent.toml")]
    for report in damaged:
        db = sqlite3.connect(tmp_path / "agent.db")
        db.execute("UPDATE agent_reports SET report = ?", (json.dumps(report),))
        db.commit()
        db.close()
        for extra in ([], ["--json"]):
            done = subprocess.run([*status, *extra], env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 4, done.stderr  # unknown: the contract's bit 4
            assert "unknown" in done.stdout and "cannot be read: not a pass report" in done.stdout, done.stdout


def test_a_host_named_like_a_token_is_refused(sqlite_fleet: Fleet):
    fleet = sqlite_fleet  # SQLite alone: what it tests is not in the store's dialect
    admin = fleet.token("admin")  # no agent token can be bound to such a host: datum token create refuses it
    other = fleet.token("agent", "--host", "web1")
    report = {"host": other, "mode": "enforce", "state": "converged", "startedAt": "2026-11-30T00:00:00+00:00",
              "finishedAt": "2026-11-30T00:00:01+00:00", "durationSeconds": 1, "exitCode": 0}
    posted = httpx.post(f"{fleet.url}/v1/hosts/{other}/passes", json=report,
                        headers={"Authorization": f"Bearer {admin}"}, timeout=30)
    assert posted.status_code == 422, posted.text
    assert posted.json()["issues"][0]["fields"][0]["field"] == "host"
    assert other not in posted.text
    listed = fleet.get("/v1/hosts", fleet.token("operator")).json()["hosts"]
    assert listed == []


def test_the_agent_re_reads_its_token_and_configuration_on_change_and_on_sighup(tmp_path: Path):
    with faulty() as server:
        argv, env = _argv(tmp_path, server.url, "--interval", "1s", "--splay", "0s")
        logged = (tmp_path / "agent.log").open("w")  # a file, not a pipe: a loop's lines never fill it and stop it
        proc = subprocess.Popen(argv, env=env, stderr=logged, text=True)
        try:
            _wait(lambda: len(server.received) >= 1)
            (tmp_path / "token").write_text("rotated-token\n")  # rotated: used from the next cycle on
            _wait(lambda: "rotated-token" in server.tokens)
            (tmp_path / "agent.toml").write_text("[host]\nmode = ")  # a bad edit: the last good one is kept
            seen = len(server.received)
            _wait(lambda: len(server.received) >= seen + 2)
            proc.send_signal(signal.SIGHUP)
            time.sleep(1)
            assert proc.poll() is None
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
            logged.close()
        log = (tmp_path / "agent.log").read_text()
    assert code == 0, log
    assert "configuration re-read (token changed)" in log
    assert "the configuration was not re-read, the last good one is kept" in log
    assert "rotated-token" not in log and "first-token" not in log
    after = server.tokens[server.tokens.index("rotated-token"):]
    assert set(after) == {"rotated-token"}
