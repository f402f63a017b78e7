"""Every fleet command through a real ``datum serve`` (``--server URL --token-file F``) prints what it prints
through the store: the same tables, the same JSON, the same errors and exit statuses.

The scene's store (tests/cli/scene.py: a reconciler with drift, hosts in every state) served by a real
``datum serve`` process on loopback; each command run in-process twice, once with ``--config`` (the store)
and once with ``--server`` (the API), and the two outputs compared whole.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from datum.store import open_store

from .scene import SILENT, C, Scene, report

DATUM = [sys.executable, "-c", "from datum.cli.main import main; main()"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """The scene's store behind a real ``datum serve``, and the operator's token in a file."""

    def __init__(self, scene: Scene, tmp: Path) -> None:
        self.scene = scene
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token_file = tmp / "operator.token"
        self.token_file.write_text(scene.operator + "\n")
        self.token_file.chmod(0o600)
        self.log = tmp / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [*DATUM, "serve", "--config", str(self.scene.config), "--port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(self.url + "/readyz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "datum serve did not become ready"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(15)

    @property
    def remote(self) -> tuple[str, ...]:
        return ("--server", self.url, "--token-file", str(self.token_file))

    @property
    def store(self) -> tuple[str, ...]:
        return ("--config", str(self.scene.config))


@pytest.fixture
def served(scene: Scene, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.delenv("DATUM_SERVER", raising=False)
    monkeypatch.delenv("DATUM_TOKEN_FILE", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    with scene.config.open("a") as f:  # a reboot lease that turns overdue at once: web5 halts its group
        f.write('[fleet]\nreboot_timeout = "1s"\n')
    from datum.api.front.tokens import create

    store = open_store(f"sqlite:///{scene.config.parent / 'datum.db'}")
    try:  # an agent's token is bound to its host
        agent = {host: create(store, "agent", host) for host in ("web2", "web5")}
    finally:
        store.dispose()
    s = Served(scene, tmp_path)
    s.start()
    try:
        answer = httpx.post(s.url + "/v1/hosts/web5/reboot-lease", json={"bootId": "b00t"},
                            headers={"Authorization": f"Bearer {agent['web5']}"}, timeout=30)
        assert answer.json()["granted"], answer.text
        earlier = report("web2", [(C, None)] * 2, finished=datetime.now(UTC) - timedelta(hours=1))
        answer = httpx.post(s.url + "/v1/hosts/web2/passes", json=earlier,  # a second kept pass of web2
                            headers={"Authorization": f"Bearer {agent['web2']}"}, timeout=30)
        assert answer.status_code in (200, 201), answer.text
        time.sleep(1.2)
        yield s
    finally:
        s.stop()


def both(datum_cli, served: Served, *args: str) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """``args`` through the store, then through the server: each (exit code, stdout, stderr)."""
    return datum_cli(*args, *served.store), datum_cli(*args, *served.remote)


# Each command, as an operator runs it (--wide: absolute times, so a second ticking between the two runs
# does not change a relative one).
COMMANDS = [
    ("hosts", "--wide"),
    ("hosts", "--state", "failed", "--wide"),
    ("hosts", "--by-name", "--limit", "3", "--wide"),
    ("events", "--wide"),
    ("events", "--host", "web1", "--state", "failed", "--since", "1d", "--wide"),
    ("history", "web1", "--wide"),
    ("history", SILENT, "--wide"),
    ("rollout", "status", "--wide"),
    ("reboots", "list"),
    ("drift", "buckets", "--wide"),
]


def steady(args: tuple[str, ...], out: str) -> str:
    """``out`` without what is measured at the moment of asking: the drift report's coverage ages (how old the
    oldest row of a status is, in seconds then, and ``18s`` in its table)."""
    if args[0] != "drift":
        return out
    if "--json" in args:
        doc = json.loads(out)
        for c in doc.get("coverage", []):
            c.pop("oldestAgeSeconds", None)
        return json.dumps(doc)
    return re.sub(r"\b\d+s\b", "Ns", out)


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_every_fleet_command_prints_the_same_through_the_server(datum_cli, served: Served, args: tuple[str, ...]):
    for shown in (args, (*args, "--json")):
        here, there = both(datum_cli, served, *shown)
        assert here[0] == there[0] == 0, (here, there)
        assert steady(shown, there[1]) == steady(shown, here[1]), f"{shown}:\n--- store\n{here[1]}\n--- server\n{there[1]}"
        assert there[1].strip(), shown  # something was printed: not two empty outputs alike


def test_the_tables_say_what_the_store_holds(datum_cli, served: Served):
    """What the comparison above compares is the real thing: hosts, the overdue lease, drift, history."""
    code, out, _ = datum_cli("hosts", *served.remote)
    assert code == 0 and "web1" in out and "host web5 has not come back from its reboot" in out, out
    code, out, _ = datum_cli("reboots", "list", *served.remote)
    assert "web5 since" in out and "overdue: its group is halted" in out, out
    code, out, _ = datum_cli("drift", "buckets", *served.remote)
    assert "held: breaker reap > 10" in out and "parked at the backoff cap" in out, out


def test_pages_follow_the_same_cursors(datum_cli, served: Served):
    """A paged listing: every page of events and of a host's passes, one row a page, the same through both,
    each page's cursor taken from the page before."""
    for listing in (("events",), ("history", "web2"), ("hosts", "--by-name")):
        pages, cursor = 0, None
        while True:
            extra = ("--cursor", cursor) if cursor else ()
            here, there = both(datum_cli, served, *listing, "--limit", "1", "--json", *extra)
            assert here == there, listing
            cursor = json.loads(here[1]).get("next")
            pages += 1
            if cursor is None or pages > 20:
                break
        assert pages >= 2, listing  # a real second page was followed
        with_text = both(datum_cli, served, *listing, "--limit", "1", "--wide")
        assert with_text[0] == with_text[1] and "next page: datum " in with_text[0][1]


@pytest.mark.parametrize("args", [
    ("history", "no-such-host"),
    ("drift", "no-such-reconciler"),
    ("reboots", "clear", "web2"),
    ("events", "--cursor", "not-a-cursor"),
    ("hosts", "--cursor", "zz"),
])
def test_an_error_is_the_same_message_and_exit_status(datum_cli, served: Served, args: tuple[str, ...]):
    for shown in (args, (*args, "--json")):
        here, there = both(datum_cli, served, *shown)
        assert here[0] == there[0] != 0, (here, there)
        assert (there[1], there[2]) == (here[1], here[2]), (here, there)


def test_the_status_of_a_host_as_the_server_holds_it(datum_cli, served: Served):
    """``datum status --host web1 --server``: what the state file holding web1's report prints."""
    local = ("status", "--host", "web1", "--state", str(served.scene.state_file))
    here = datum_cli(*local, "--wide")
    there = datum_cli("status", "--host", "web1", "--wide", *served.remote)
    assert there == here and here[0] == 4, (here, there)  # failed: bit 4
    code, out, _ = datum_cli("status", "--host", "web1", "--json", *served.remote)
    shown = json.loads(out)
    assert code == 4 and shown["host"] == "web1" and shown["state"] == "failed"
    assert shown["resources"] == json.loads(datum_cli(*local, "--json")[1])["resources"]
    code, out, err = datum_cli("status", "--host", "nowhere", *served.remote)
    assert code == 64 and "no host named 'nowhere' has reported a pass" in err


def test_clearing_a_reboot_lease_through_the_server(datum_cli, served: Served):
    code, out, err = datum_cli("reboots", "clear", "web5", "--json", *served.remote)
    assert code == 0, err
    assert json.loads(out)["host"] == "web5"
    store = open_store(f"sqlite:///{served.scene.config.parent / 'datum.db'}")
    try:
        from datum.store.leases import read

        assert read(store).all == ()
    finally:
        store.dispose()
    assert both(datum_cli, served, "reboots", "clear", "web5")[0][0] == 64  # none left, either way


def test_refusals_and_bad_answers_are_clear(datum_cli, served: Served, tmp_path: Path):
    viewer = tmp_path / "viewer.token"
    store = open_store(f"sqlite:///{served.scene.config.parent / 'datum.db'}")
    try:
        from datum.api.front.tokens import create

        viewer.write_text(create(store, "viewer") + "\n")
    finally:
        store.dispose()
    viewer.chmod(0o600)
    code, out, err = datum_cli("reboots", "clear", "web5", "--server", served.url, "--token-file", str(viewer))
    assert code == 77 and "fleet:ClearRebootLease" in err, err  # Cedar: operator only
    wrong = tmp_path / "wrong.token"
    wrong.write_text("datum_t_" + "0" * 40 + "\n")
    wrong.chmod(0o600)
    code, out, err = datum_cli("hosts", "--server", served.url, "--token-file", str(wrong))
    assert code == 77 and "not known to this server" in err, err
    assert "0" * 40 not in out + err  # the token is never printed
    code, out, err = datum_cli("hosts", "--server", served.url)
    assert code == 64 and "--server and --token-file go together" in err
    code, out, err = datum_cli("hosts", "--server", f"http://127.0.0.1:{_free_port()}", "--token-file",
                               str(served.token_file))
    assert code == 69 and "cannot reach" in err, err


def test_the_environment_names_the_server(datum_cli, served: Served, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DATUM_SERVER", served.url)
    monkeypatch.setenv("DATUM_TOKEN_FILE", str(served.token_file))
    through_env = datum_cli("hosts", "--wide", "--json")
    monkeypatch.delenv("DATUM_SERVER")
    monkeypatch.delenv("DATUM_TOKEN_FILE")
    assert through_env == datum_cli("hosts", "--wide", "--json", *served.store)
    assert through_env[0] == 0 and json.loads(through_env[1])["total"] == 7


def test_an_answer_past_the_size_bound_is_refused_whole(datum_cli, served: Served, monkeypatch: pytest.MonkeyPatch):
    import datum.cli.remote as remote

    monkeypatch.setattr(remote, "ANSWER_LIMIT", 200)  # the real server's listing is larger than this
    code, out, err = datum_cli("hosts", *served.remote)
    assert code == 69 and "more than the 200 bytes an answer may be" in err, err
    assert out == ""  # nothing half-read is printed
    code, out, err = datum_cli("hosts", "--json", *served.remote)  # the error in the contract's shape
    assert code == 69 and json.loads(out)["issues"][0]["code"] == "UNAVAILABLE"


def test_a_redirect_is_not_followed(datum_cli, served: Served, tmp_path: Path):
    """A fake server (one that redirects: ``datum serve`` never does) answering 307 to the real one: the token
    is not sent on, the command says where it was sent and exits 64."""
    import http.server
    import threading

    asked: list[str | None] = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append(self.headers.get("Authorization"))
            self.send_response(307)
            self.send_header("Location", served.url + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    fake = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    try:
        code, out, err = datum_cli("events", "--server", f"http://127.0.0.1:{fake.server_port}", "--token-file",
                                   str(served.token_file))
    finally:
        fake.shutdown()
    assert code == 64 and "answered 307" in err and f"a redirect to {served.url}/v1/events" in err, err
    assert "not followed" in err and served.scene.operator not in out + err
    assert len(asked) == 1  # asked once, not again at the place it pointed to


def test_hosts_says_what_needs_a_human_of_the_fleet_directory_and_the_canary_through_both(
    datum_cli, scene: Scene, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    """``datum hosts --server`` printed no line for a fleet directory the server cannot serve from, and did not
    say which host is a rollout's canary: no route answered those inputs, which the store path reads itself.
    It now prints the server's lines (``GET /v1/attention``): the same output both ways."""
    import shutil

    monkeypatch.delenv("DATUM_SERVER", raising=False)
    monkeypatch.delenv("DATUM_TOKEN_FILE", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "nodes.yaml").write_text("nodes:\n  - match: {name: 'web*'}\n    manifests: [web.yaml]\n")
    (fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: one\n")
    with scene.config.open("a") as f:
        f.write(f'[fleet]\nmanifests = "{fleet}"\n[fleet.rollout]\ncanary = ["web1"]\nwaves = ["100%"]\n')
    s = Served(scene, tmp_path)
    s.start()
    try:
        def in_force() -> dict:  # type: ignore[type-arg]
            answer = httpx.get(s.url + "/v1/rollouts", headers={"Authorization": f"Bearer {scene.operator}"}, timeout=30)
            return answer.json()["rollouts"][0] if answer.json()["rollouts"] else {}  # type: ignore[no-any-return]

        deadline = time.monotonic() + 30
        while in_force().get("state") != "done":  # the first revision: stable at once
            assert time.monotonic() < deadline, in_force()
            time.sleep(0.1)
        (fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: two\n")
        while in_force().get("id") != 2:  # its rollout: web1 (failed) its canary
            assert time.monotonic() < deadline, in_force()
            time.sleep(0.1)
        shutil.rmtree(fleet)
        time.sleep(1.5)  # the server sees it gone within a second
        here, there = both(datum_cli, s, "hosts", "--wide")
        assert here[0] == there[0] == 0, (here, there)
        shown = " ".join(there[1].split())
        assert "(the canary of rollout 2)" in shown and str(fleet) in shown and "Put the directory back" in shown, shown
        assert there[1] == here[1], f"--- store\n{here[1]}\n--- server\n{there[1]}"
    finally:
        s.stop()
