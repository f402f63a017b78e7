"""Changes reach agents in seconds: real ``datum agent`` loops holding their long poll against a real ``datum serve``.

The interval is ten minutes in each test: a pass that follows an edit within seconds
was started by the wait. A server that does not hold waits (``Faulty``, which answers
at once) or drops them leaves the agent on its interval, never in a loop of requests.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from .conftest import DATUM, Agent, Fleet, _fleet
from .faulty import DIGEST, faulty
from .test_bad_answers import _agent_argv


def _report(agent: Agent) -> dict | None:
    if not agent.state.exists():
        return None
    db = sqlite3.connect(agent.state)
    try:
        row = db.execute("SELECT report FROM agent_reports").fetchone()
    except sqlite3.OperationalError:
        return None
    finally:
        db.close()
    return json.loads(row[0]) if row else None


def _until(check: Callable[[], object], seconds: float, what: str) -> object:
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"not within {seconds:g}s: {what}"
        time.sleep(0.1)


@contextmanager
def looping(agent: Agent, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """``datum agent`` (the loop) for this host, interval ten minutes; SIGTERM at the end, exit 0."""
    argv, env = agent._command(*extra)
    argv.remove("--once")
    proc = subprocess.Popen(
        [*DATUM, *argv, "--interval", "10m", "--splay", "2s"], stderr=subprocess.PIPE, text=True,
        env={**os.environ, **env},
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        _, log = proc.communicate(timeout=30)  # read while it stops: a full stderr pipe would hold its exit
        proc.stderr = io.StringIO(log)  # what it said, for the test to read after
        assert proc.returncode == 0, log


def _first_pass(agent: Agent, proc: subprocess.Popen[str]) -> dict:
    def first() -> dict | None:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        return _report(agent)

    return _until(first, 90, "the agent's first pass")  # type: ignore[return-value]


def _edit(fleet: Fleet, greeting: str) -> None:
    nodes = (fleet.manifests / "nodes.yaml").read_text()
    (fleet.manifests / "nodes.yaml").write_text(nodes.replace("greeting: hello", f"greeting: {greeting}"))


def test_a_change_on_disk_starts_a_pass_on_the_waiting_agent_within_seconds(sqlite_fleet: Fleet):
    fleet = sqlite_fleet  # SQLite alone: what it tests is not in the store's dialect
    agent = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    with looping(agent) as proc:
        first = _first_pass(agent, proc)
        assert (agent.root / "srv" / "index.html").read_text().startswith("hello from")
        time.sleep(1.5)  # the agent holds its wait now (an edit before it would be seen by the wait all the same)
        edited = time.monotonic()
        _edit(fleet, "bonjour")

        def applied() -> dict | None:
            report = _report(agent)
            return report if report and report["seq"] > first["seq"] else None

        second = _until(applied, 30, "a pass after the edit")
        took = time.monotonic() - edited
        assert isinstance(second, dict)
        assert second["seq"] == first["seq"] + 1  # one pass for one change
        assert second["manifestDigest"] != first["manifestDigest"] and second["manifestOrigin"] == "server"
        assert (agent.root / "srv" / "index.html").read_text().startswith("bonjour from")
        # 0.25 s to see the edit, up to 2 s of jitter (--splay 2s), the pass itself: seconds, not the 10 min interval
        assert took < 20, took
        served = fleet.get("/v1/hosts/web1", fleet.token("operator")).json()["report"]
        assert served["seq"] == second["seq"]
    lines = proc.stderr.read().splitlines() if proc.stderr else []
    assert [line for line in lines if line.startswith("datum agent: pass")][-1].count("(server)") == 1


def test_an_edit_that_leaves_the_hosts_manifest_as_it_was_wakes_no_pass(sqlite_fleet: Fleet):
    fleet = sqlite_fleet
    agent = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    with looping(agent) as proc:
        first = _first_pass(agent, proc)
        (fleet.manifests / "testos.yaml").write_text("resources:\n  - File[/etc/testos.conf]:\n      content: x\n")
        # a change web1's manifest does not include: its wait goes on; then one that does
        _edit(fleet, "hi")
        second = _until(lambda: (r := _report(agent)) and r["seq"] > first["seq"] and r, 30, "the pass")
        assert isinstance(second, dict) and second["seq"] == first["seq"] + 1


@pytest.mark.postgres
def test_replicas_on_one_postgresql_each_wake_their_own_agents(tmp_path: Path, pg_database: str):
    """Two ``datum serve`` on one database and one fleet directory, an agent waiting on each."""
    with _fleet(tmp_path, pg_database) as one:
        other = Fleet(tmp_path, pg_database)
        one.start()
        other.start()
        try:
            agents = [Agent(one, "web1", one.token("agent", "--host", "web1")),
                      Agent(other, "web2", one.token("agent", "--host", "web2"))]
            with looping(agents[0]) as p1, looping(agents[1]) as p2:
                firsts = [_first_pass(a, p) for a, p in zip(agents, (p1, p2), strict=True)]
                time.sleep(1.5)
                _edit(one, "hej")
                for agent, first in zip(agents, firsts, strict=True):
                    _until(lambda a=agent, f=first: (r := _report(a)) and r["seq"] > f["seq"], 30, agent.name)
                    assert (agent.root / "srv" / "index.html").read_text().startswith("hej from")
        finally:
            other.stop()


def test_a_server_that_does_not_hold_waits_leaves_the_agent_on_its_interval(tmp_path: Path):
    """``Faulty`` answers a wait at once, 304 without ``Datum-Wait``: one wait asked per pass, no more."""
    with faulty() as server:
        argv, env = _agent_argv(tmp_path, server.url, "--interval", "2s", "--splay", "0s")
        proc = subprocess.Popen(argv, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)
        try:
            db = tmp_path / "agent.db"

            def passes() -> int:
                try:
                    return int(sqlite3.connect(db).execute("SELECT value FROM agent_meta WHERE key='seq'").fetchone()[0])
                except (sqlite3.Error, TypeError):
                    return 0

            start = _until(passes, 60, "a first pass")
            _until(lambda: passes() >= int(start) + 3, 60, "three more passes on the interval")
        finally:
            proc.send_signal(signal.SIGTERM)
            _, log = proc.communicate(timeout=30)  # read while it stops: a full stderr pipe would hold its exit
            assert proc.returncode == 0, log
        cycles = log.count("datum agent: pass")
        assert "not waiting for changes: the server does not hold waits" in log, log
        assert server.fetches <= 2 * cycles + 2, (server.fetches, cycles)  # its fetch and one wait per pass
        assert DIGEST  # the manifest it keeps


def test_a_server_that_drops_the_wait_leaves_the_interval_and_the_wait_comes_back(sqlite_fleet: Fleet):
    """The server goes away while the agent waits (its waits answered at shutdown, then refused): the agent
    backs off, and once the server is back a change reaches it in seconds again."""
    fleet = sqlite_fleet
    agent = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    with looping(agent) as proc:
        first = _first_pass(agent, proc)
        time.sleep(1.5)
        began = time.monotonic()
        fleet.stop()  # the held wait answers at once (the server's shutdown), not after its 300 s
        assert time.monotonic() - began < 10
        time.sleep(2)  # refused meanwhile: backing off, never a loop of requests
        fleet.start()
        _edit(fleet, "again")
        second = _until(lambda: (r := _report(agent)) and r["seq"] > first["seq"] and r, 60, "the pass after")
        assert isinstance(second, dict) and (agent.root / "srv" / "index.html").read_text().startswith("again from")
        assert proc.poll() is None
    assert "the cycle failed" not in (proc.stderr.read() if proc.stderr else "")


def test_the_wait_is_a_query_parameter_of_the_manifest_route(sqlite_fleet: Fleet):
    """``wait`` is the manifest route's, under its authorization: an invalid one is 422, another host's 403,
    and without ``If-None-Match`` (or ``wait=0``) the answer is at once."""
    fleet = sqlite_fleet
    token = fleet.token("agent", "--host", "web1")
    first = fleet.get("/v1/hosts/web1/manifest?wait=0", token)
    assert first.status_code == 200 and first.headers["Datum-Wait"] == "0"
    etag = first.headers["ETag"]
    for bad in ("x", "-1", "601", "1.5"):
        answer = fleet.get(f"/v1/hosts/web1/manifest?wait={bad}", token, **{"If-None-Match": etag})
        assert answer.status_code == 422 and answer.json()["issues"][0]["fields"][0]["field"] == "wait", bad
    assert fleet.get("/v1/hosts/web2/manifest?wait=5", token, **{"If-None-Match": etag}).status_code == 403
    began = time.monotonic()
    held = fleet.get("/v1/hosts/web1/manifest?wait=1", token, **{"If-None-Match": etag})
    assert held.status_code == 304 and held.headers["Datum-Wait"] == "1" and time.monotonic() - began >= 0.9
    # a host no rule matches: the route's 404 at once, whatever the wait
    lonely = fleet.token("agent", "--host", "lonely")
    began = time.monotonic()
    assert fleet.get("/v1/hosts/lonely/manifest?wait=30", lonely, **{"If-None-Match": etag}).status_code == 404
    assert time.monotonic() - began < 5
    assert httpx.get(fleet.url + "/openapi.json").json()["paths"]["/v1/hosts/{host}/manifest"]["get"]["parameters"]
