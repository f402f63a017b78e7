"""A server with something in every state a human may have to act on (shared by the attention tests).

Reconcilers: ``buckets`` degraded (a tripped reap breaker, ``bucket/delta`` parked at a backoff cap of 2
passes, a row stranded in ``archiving``, ``bucket/gamma`` waiting on its owner), ``steady`` ok, ``flaky``
failing, ``idle`` unknown (never ticked), ``pg_roles`` disabled (its default), and ``ghost``, a plugin that
did not load. Hosts: one in each host state, two awaiting a reboot (``manual``: a human's; ``maintenance``:
it waits), a silent one, and one whose reboot lease expired with no report from a new boot.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
import uvicorn

from api.story import Story, build_story, free_port, play
from datum.config import ReconcilerSettings
from datum.reconcile import SubstrateError
from datum.reconcile.runner import Runner
from datum.reconcilers import buckets as b
from datum.store.leases import take

CAP = {"backoff": {"base_passes": 1, "cap_passes": 2}}  # bucket/delta reaches the cap on its second failure


class Steady:
    """Nothing diverges: health ok."""

    name = "steady"
    items_reported = True
    coverage = None

    def __init__(self, settings: Any, store: Any) -> None:
        pass

    def run(self, ctx: Any) -> None:
        ctx.converge("thing", {}, {}, lambda *a: None)


class Flaky(Steady):
    """Its substrate cannot be read: health failing."""

    name = "flaky"

    def run(self, ctx: Any) -> None:
        raise SubstrateError("the substrate answered 500")


class Idle(Steady):
    """Enabled and never ticked: health unknown (before its first tick, it waits)."""

    name = "idle"


def resource(rid: str, state: str, **extra: Any) -> dict[str, Any]:
    kind, _, name = rid.partition("[")
    return {"id": rid, "type": kind, "name": name.rstrip("]"), "action": "none", "state": state, **extra}


def report(host: str, state: str, resources: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for r in resources:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    finished = datetime.now(UTC).replace(microsecond=0)
    return {
        "host": host, "mode": "enforce", "state": state, "startedAt": (finished - timedelta(seconds=2)).isoformat(),
        "finishedAt": finished.isoformat(), "durationSeconds": 2.0, "bootId": "boot-1", "exitCode": 0,
        "counts": counts, "resources": resources, **extra,
    }


def reboot(policy: str, action: str) -> dict[str, Any]:
    return {"required": True, "reason": "Package[linux-image-amd64] updated, running kernel differs",
            "policy": policy, "bootId": "boot-1", "action": action, "markers": {"/run/reboot-required": 1}}


SECRET = "password=hunter2"

HOSTS: list[dict[str, Any]] = [
    report("web-ok", "converged", [resource("Package[nginx]", "converged")]),
    report("web-failed", "failed", [
        resource("Package[nginx]", "converged"),
        resource("File[motd]", "failed", action="update", error="permission denied"),
    ], reason="File[motd] failed: permission denied", exitCode=4),
    report("web-drift", "drifted", [
        resource("File[/etc/motd]", "drifted", action="update", reason="content differs",
                 diff="--- /etc/motd\n+++ /etc/motd (manifest)\n-welcome\n+hello from datum\n"),
        resource("File[/etc/app.secret]", "drifted", action="update", reason="content differs", sensitive=True,
                 diff=f"-{SECRET}\n+password=changed\n"),
    ], mode="observe", reason="File[/etc/motd], File[/etc/app.secret] drifted", exitCode=8),
    report("web-skip", "degraded", [
        resource("Package[nginx]", "converged"), resource("Service[bluetooth]", "skipped", reason="not applicable"),
    ], reason="Service[bluetooth] skipped: not applicable", exitCode=32),
    report("web-manual", "awaiting-reboot", [resource("Package[linux-image-amd64]", "converged", action="update",
                                                      changed=True)],
           reason="Package[linux-image-amd64] updated, running kernel differs", exitCode=18,
           reboot=reboot("manual", "run 'datum reboot' to reboot (reboot_policy manual)")),
    report("web-maint", "awaiting-reboot", [resource("Package[linux-image-amd64]", "converged")],
           reason="Package[linux-image-amd64] updated, running kernel differs", exitCode=16,
           reboot=reboot("maintenance", "reboot in the next maintenance window Sun 02:00-04:00")),
    report("web-gone", "awaiting-reboot", [resource("Package[linux-image-amd64]", "converged")],
           reason="Package[linux-image-amd64] updated, running kernel differs", exitCode=16,
           reboot=reboot("automatic", "rebooting now (reboot_policy automatic)")),
]


def silent() -> dict[str, Any]:
    """An agent's report (it carries its interval) from weeks ago: the host reads unknown."""
    r = report("web-silent", "converged", [resource("Package[nginx]", "converged")], intervalSeconds=60)
    r["startedAt"], r["finishedAt"] = "2026-01-01T12:00:00+00:00", "2026-01-01T12:00:02+00:00"
    return r


def populate(tmp_path: Path, store: str | None = None) -> Story:
    """The story above, on ``store`` (SQLite in ``tmp_path`` when None)."""
    story = build_story(tmp_path, store, buckets=CAP)
    registry = story.registry
    for cls in (Steady, Flaky, Idle):
        registry.register(cls.name, cls, ReconcilerSettings)
    registry.broken.append(
        SimpleNamespace(name="ghost", target="ghost.plugin:Plugin", error="ModuleNotFoundError: No module named 'ghost'")
    )
    play(story)  # breaker, backoff, owner: three ticks of buckets
    with story.store.begin() as conn:  # a row in a status nobody selects, owns or finishes: stranded
        conn.execute(sa.update(b.buckets).where(b.buckets.c.name == "alpha").values(status="archiving"))
    story.tick()  # bucket/delta fails a second time: its window is at the cap
    runner = Runner(registry, story.settings, story.store, clock=story.clock)
    runner.tick("steady")
    runner.tick("flaky")
    for r in [*HOSTS, silent()]:
        answer = story.client.post(f"/v1/hosts/{r['host']}/passes", json=r, headers=story.agent(r["host"]))
        assert answer.status_code == 201, answer.text
    # web-gone took its reboot slot and never came back: the lease is past its timeout at once
    assert take(story.store, "web-gone", "default", "boot-1", 5, timedelta(0)).granted
    return story


def config_toml(tmp_path: Path, story: Story) -> Path:
    """A configuration file for the CLI over the story's store, with its buckets section."""
    cfg = tmp_path / "cli.toml"
    cfg.write_text(
        f'store = "{story.settings.store_url}"\n'
        "[reconcilers.buckets]\n"
        f'root = "{story.root}"\n'
        "confirmation_ticks = 2\n"
        "breaker = { restore = 100, reap = 2, align = 100 }\n"
        "backoff = { base_passes = 1, cap_passes = 2 }\n"
    )
    return cfg


def cli(*args: str) -> str:
    """``datum ARGS`` in a process of its own; its standard output."""
    done = subprocess.run(
        [sys.executable, "-c", "from datum.cli.main import main; main()", *args],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextmanager
def live(story: Story) -> Iterator[str]:
    """The story's own app (its extra reconcilers included) behind uvicorn on a loopback port; its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(story.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise AssertionError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(10)
