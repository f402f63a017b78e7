"""Every rollout transition answers the held long polls it concerns within a second (issue 36, "Done when"),
against a real ``datum serve`` process on loopback: a wave released at the end of its soak reaches its held
hosts within 1 s of the soak's end (the check runs when the soak ends, not up to a period later); an abort
through the API, and one through the store (``datum rollout abort --config``, another process), answer the
canary's held poll with the previous revision within 1 s; a resume through the store wakes the server's check
(the released wave then within 1 s of its soak's end). Pause changes what no host is served: no poll to answer.

The polls are plain HTTP/1.1 long polls as ``datum agent`` holds them (``?wait=`` with ``If-None-Match``), each
host with a token bound to it, so the time each is answered is measured here, not read from a log.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from datum.api.front.tokens import create
from datum.store import open_store

from .story import serving

HOSTS = ["h0", "h1", "h2"]
LATE = 1.0  # the most seconds a transition may take to answer the polls it concerns


def motd(fleet: Path, content: str) -> None:
    (fleet / "web.yaml").write_text(f"resources:\n  - File[/etc/motd]:\n      content: {content}\n")


class Fleet:
    def __init__(self, tmp_path: Path) -> None:
        self.fleet = tmp_path / "fleet"
        self.fleet.mkdir()
        (self.fleet / "nodes.yaml").write_text("nodes:\n  - match: {name: 'h*'}\n    manifests: [web.yaml]\n    group: web\n")
        motd(self.fleet, "v1")
        self.cfg = tmp_path / "datum.toml"
        self.cfg.write_text(
            f'store = "sqlite:///{tmp_path / "datum.db"}"\n[server]\nscheduler = false\n'
            f'[fleet]\nmanifests = "{self.fleet}"\n'
            '[fleet.rollout]\ncanary = ["h0"]\nwaves = ["100%"]\nsoak = "1s"\n'
        )
        store = open_store(f"sqlite:///{tmp_path / 'datum.db'}")
        self.tokens = {h: create(store, "agent", host=h) for h in HOSTS}
        self.operator = create(store, "operator")
        store.dispose()
        self.base = ""
        self.etags: dict[str, str] = {}

    def manifest(self, host: str, wait: int | None = None, timeout: float = 10) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[host]}"}
        if wait is not None:
            headers["If-None-Match"] = self.etags[host]
        return httpx.get(f"{self.base}v1/hosts/{host}/manifest", params={"wait": wait} if wait else None,
                         headers=headers, timeout=timeout)

    def fetch(self, host: str) -> str:
        answer = self.manifest(host)
        assert answer.status_code == 200, answer.text
        self.etags[host] = answer.headers["ETag"]
        return answer.headers["Datum-Revision"]

    def report(self, host: str, revision: str) -> None:
        now = datetime.now().astimezone().isoformat()
        body = {"host": host, "mode": "enforce", "state": "converged", "startedAt": now, "finishedAt": now,
                "durationSeconds": 0.1, "exitCode": 0, "counts": {"converged": 1}, "resources": [],
                "revision": revision, "intervalSeconds": 1800}
        answer = httpx.post(f"{self.base}v1/hosts/{host}/passes", json=body, timeout=10,
                            headers={"Authorization": f"Bearer {self.tokens[host]}"})
        assert answer.status_code == 201, answer.text

    def hold(self, host: str) -> dict[str, object]:
        """Hold ``host``'s long poll on a thread of its own: the dict gets the answer's time and revision."""
        got: dict[str, object] = {}

        def run() -> None:
            answer = self.manifest(host, wait=60, timeout=90)
            got.update(at=time.time(), status=answer.status_code, revision=answer.headers.get("Datum-Revision"))

        got["thread"] = thread = threading.Thread(target=run, daemon=True)
        thread.start()
        time.sleep(0.5)  # held by now
        assert "at" not in got, got
        return got

    def rollout(self) -> dict:  # type: ignore[type-arg]
        answer = httpx.get(f"{self.base}v1/rollouts", headers={"Authorization": f"Bearer {self.operator}"}, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()["rollouts"][0]  # type: ignore[no-any-return]

    def until(self, check, seconds: float = 30) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + seconds
        while not check():
            assert time.monotonic() < deadline, self.rollout()
            time.sleep(0.05)


def answered(got: dict[str, object], seconds: float = 30) -> dict[str, object]:
    got["thread"].join(seconds)  # type: ignore[attr-defined]
    assert "at" in got, "the held poll was not answered"
    return got


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def fleet(tmp_path: Path):  # type: ignore[no-untyped-def]
    f = Fleet(tmp_path)
    with serving(f.cfg, tmp_path / "serve.log") as base:
        f.base = base
        first = {h: f.fetch(h) for h in HOSTS}
        for host, revision in first.items():
            f.report(host, revision)
        yield f


def start_rollout(f: Fleet, content: str) -> tuple[str, str]:
    """The manifests changed: (the revision rolling out, the previous), the canary served the new one."""
    before = f.rollout()["id"]
    motd(f.fleet, content)
    f.until(lambda: f.rollout()["id"] > before)
    ro = f.rollout()
    assert ro["state"] == "rolling", ro
    assert f.fetch("h0") == ro["revision"]
    return ro["revision"], ro["previous"]


def test_a_wave_released_at_the_end_of_its_soak_reaches_its_held_hosts_within_a_second(fleet: Fleet):
    new, old = start_rollout(fleet, "v2")
    held = [fleet.hold(h) for h in ("h1", "h2")]
    fleet.report("h0", new)
    fleet.until(lambda: fleet.rollout().get("soakEndsAt") is not None or fleet.rollout()["wave"] == 1)
    ends = fleet.rollout().get("soakEndsAt")
    assert ends is not None, "the soak was not seen"
    for got in held:
        answered(got)
        assert got["revision"] == new and got["status"] == 200
        assert -0.1 < float(got["at"]) - stamp(ends) < LATE, (got["at"], ends)  # type: ignore[arg-type]


@pytest.mark.parametrize("through", ["api", "store"])
def test_an_abort_answers_the_canary_s_held_poll_within_a_second(fleet: Fleet, through: str):
    new, old = start_rollout(fleet, "v2")
    got = fleet.hold("h0")
    began = time.time()
    if through == "api":
        answer = httpx.post(f"{fleet.base}v1/rollouts/current/abort", timeout=10,
                            headers={"Authorization": f"Bearer {fleet.operator}"})
        assert answer.status_code == 200, answer.text
    else:  # another process, on the store alone: the server learns it from the store
        done = subprocess.run([sys.executable, "-c", "from datum.cli.main import main; main()", "rollout", "abort", "--config", str(fleet.cfg)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    aborted = next(t for t in fleet.rollout()["transitions"] if t["action"] == "aborted")
    answered(got)
    assert got["revision"] == old and got["status"] == 200
    assert float(got["at"]) - max(stamp(aborted["at"]), began if through == "api" else 0) < LATE, (got, aborted)  # type: ignore[arg-type]


def test_a_resume_through_the_store_wakes_the_server_s_check(fleet: Fleet):
    new, old = start_rollout(fleet, "v2")
    paused = httpx.post(f"{fleet.base}v1/rollouts/current/pause", timeout=10,
                        headers={"Authorization": f"Bearer {fleet.operator}"})
    assert paused.status_code == 200, paused.text
    held = fleet.hold("h1")
    fleet.report("h0", new)
    time.sleep(2.5)  # past a soak and a check period: paused, nothing is released
    assert fleet.rollout()["wave"] == 0 and "at" not in held
    done = subprocess.run([sys.executable, "-c", "from datum.cli.main import main; main()", "rollout", "resume", "--config", str(fleet.cfg)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    resumed = stamp(next(t for t in fleet.rollout()["transitions"] if t["action"] == "resumed")["at"])
    answered(held)
    assert held["revision"] == new
    # the check woken at once: the soak restarted by the resume (1 s) ends, and the wave reaches h1 within LATE
    assert float(held["at"]) - resumed < 1.0 + LATE, (held["at"], resumed)  # type: ignore[arg-type]


def test_rollouts_off_and_on_and_a_restart_never_take_a_host_back(tmp_path: Path):
    """Issue 36, item 1, with real processes: rollouts switched off, a fix served to everyone, switched on
    again with the server restarted, and the next revision's rollout (from the last ``done``, before the fix):
    every held-back host is served the fix it runs (or told to keep it, 503), never the revision before it;
    so again after a restart in the middle of the rollout."""
    f = Fleet(tmp_path)
    with_rollout = f.cfg.read_text()
    without = with_rollout.split("[fleet.rollout]")[0]

    def serve():  # type: ignore[no-untyped-def]
        return serving(f.cfg, tmp_path / f"serve-{time.monotonic_ns()}.log")

    with serve() as f.base:
        first = {h: f.fetch(h) for h in HOSTS}
        for host, revision in first.items():
            f.report(host, revision)
        old = first["h1"]
    f.cfg.write_text(without)  # off; the fix to everyone at once
    motd(f.fleet, "fix")
    with serve() as f.base:
        fix = {h: f.fetch(h) for h in HOSTS}
        assert set(fix.values()) != {old} and len(set(fix.values())) == 1
        for host, revision in fix.items():
            f.report(host, revision)
    f.cfg.write_text(with_rollout)  # on again, then the next edit
    motd(f.fleet, "next")
    for restart in range(2):
        with serve() as f.base:
            f.until(lambda: f.rollout()["revision"] != old and f.rollout()["state"] == "rolling")
            ro = f.rollout()
            assert ro["previous"] == old, ro  # the last done: before the fix
            for host in ("h1", "h2"):
                answer = f.manifest(host)
                if answer.status_code == 200:  # its own last revision, never the rollout's previous
                    assert answer.headers["Datum-Revision"] in (fix[host], ro["revision"]), (restart, host, ro)
                else:  # the fix was never kept (rollouts were off): it keeps what it runs
                    assert answer.status_code == 503 and "keeps the manifest it has" in answer.text, answer.text
