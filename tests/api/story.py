"""The buckets story behind a live app: a real SQLite store, real directories, an injected clock."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient

from datum.api.app import create_app
from datum.api.front import tokens
from datum.api.front.authz import BOUND, bound
from datum.config import Settings
from datum.plugins import load as _load_plugins
from datum.reconcile.registry import Registry
from datum.reconcile.runner import Runner
from datum.reconcilers import buckets as b
from datum.store import Store, open_store

INTERVAL = timedelta(seconds=30)


class Clock:
    """A clock the test moves by hand, starting at the real time (rows carry real timestamps)."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now


def settings_for(
    tmp_path: Path, store: str | None = None, buckets: dict[str, object] | None = None, **server: object
) -> Settings:
    """The story's settings; ``buckets`` overrides keys of its reconciler's section."""
    return Settings.model_validate(
        {
            "home": str(tmp_path / "home"),
            "store": store or f"sqlite:///{tmp_path / 'datum.db'}",
            "reconcilers": {
                "buckets": {
                    "root": str(tmp_path / "buckets"),
                    "interval": "30s",
                    "confirmation_ticks": 2,
                    "drift_cap": 500,
                    "breaker": {"restore": 100, "reap": 2, "align": 100},
                    "backoff": {"base_passes": 1, "cap_passes": 64},
                    **(buckets or {}),
                }
            },
            "server": {"scheduler": False, **server},
        }
    )


@dataclass
class Story:
    settings: Settings
    registry: Registry
    store: Store
    clock: Clock
    root: Path
    app: FastAPI
    client: TestClient
    tokens: dict[str, str] = field(default_factory=dict)

    def tick(self, passes: int = 1) -> None:
        """``passes`` executed ticks, one interval apart."""
        runner = Runner(self.registry, self.settings, self.store, clock=self.clock)
        for _ in range(passes):
            self.clock.now += INTERVAL
            runner.tick(b.NAME)

    def auth(self, principal: str = "operator") -> dict[str, str]:
        """The header of the story's token for ``principal``: ``operator``, ``viewer``, ``admin``, ``stranger``, or
        ``agent@host:NAME`` (an agent token bound to host NAME, minted at its first use)."""
        if principal not in self.tokens and BOUND in principal:
            name, _, host = principal.partition(BOUND)
            self.tokens[principal] = tokens.create(self.store, name, host)
        return {"Authorization": f"Bearer {self.tokens[principal]}"}

    def agent(self, host: str) -> dict[str, str]:
        """The header of an agent token bound to ``host`` (the only agent token that speaks for a host)."""
        return self.auth(bound("agent", host))

    def get(self, path: str, principal: str = "operator"):  # type: ignore[no-untyped-def]
        return self.client.get(path, headers=self.auth(principal))


def build_story(
    tmp_path: Path, store: str | None = None, buckets: dict[str, object] | None = None, **server: object
) -> Story:
    settings = settings_for(tmp_path, store, buckets, **server)
    store = open_store(settings.store_url)
    registry = _load_plugins().registry()
    clock = Clock()
    app = create_app(settings, registry, store, clock=clock)
    app.state.datum.reports.ttl = 0  # every request sees the latest tick
    client = TestClient(app, raise_server_exceptions=False)
    story = Story(settings, registry, store, clock, tmp_path / "buckets", app, client)
    for principal in ("operator", "viewer", "admin", "stranger"):
        story.tokens[principal] = tokens.create(store, principal)
    return story


def serve_fleet(story: Story, directory: Path, rule: str = "web*", manifest: str = "web.yaml") -> Path:
    """``directory`` made a fleet directory (hosts matching ``rule`` get one File), and the story's app serving it."""
    directory.mkdir()
    (directory / "nodes.yaml").write_text(f"nodes:\n  - match: {{name: '{rule}'}}\n    manifests: [{manifest}]\n")
    (directory / manifest).write_text("resources:\n  - File[/etc/motd]:\n      content: hello\n")
    state = story.app.state.datum
    state.settings = state.settings.model_copy(
        update={"fleet": state.settings.fleet.model_copy(update={"manifests": directory})}
    )
    return directory


def play(story: Story) -> None:
    """The buckets story, three ticks in.

    alpha, beta: created; gamma: asked to be deleted while it holds an object
    (blocked_on_owner); delta: a file squats its name (apply_failed, then
    backoff); x1..x3: stray directories, one more than the reap breaker allows.
    """
    root = story.root
    root.mkdir(parents=True, exist_ok=True)
    for name in ("alpha", "beta", "gamma", "delta"):
        b.create(story.store, name)
    (root / "gamma").mkdir()
    (root / "gamma" / "q3.csv").write_text("tenant data")
    b.delete(story.store, "gamma")
    (root / "delta").write_text("squatter")
    for stray in ("x1", "x2", "x3"):
        (root / stray).mkdir()
    story.tick(3)


def pass_report(host: str = "web1", state: str = "failed") -> dict[str, object]:
    """A pass report as ``datum apply --json`` prints it: one converged, one failed, one blocked resource."""
    return {
        "host": host,
        "mode": "enforce",
        "state": state,
        "reason": "File[motd] failed: permission denied",
        "startedAt": "2026-11-01T12:00:00Z",
        "finishedAt": "2026-11-01T12:00:02Z",
        "durationSeconds": 2.0,
        "bootId": "b00t",
        "exitCode": 4,
        "counts": {"converged": 1, "failed": 1, "blocked": 1},
        "resources": [
            {"id": "Package[nginx]", "type": "Package", "name": "nginx", "action": "none", "state": "converged"},
            {
                "id": "File[motd]", "type": "File", "name": "motd", "action": "update", "state": "failed",
                "error": "permission denied",
            },
            {
                "id": "Service[nginx]", "type": "Service", "name": "nginx", "action": "restart", "state": "blocked",
                "reason": "blocked by File[motd]", "blockedBy": ["File[motd]"],
            },
        ],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(cfg: Path, log: Path, *extra: str) -> Iterator[str]:
    """``datum serve --config cfg [extra...]`` in its own process on a free loopback port; yields its base URL."""
    port = free_port()
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from datum.cli.main import main; main()",
             "serve", "--config", str(cfg), "--port", str(port), *extra],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"datum serve exited with {proc.returncode}: {log.read_text()}")
            try:
                if httpx.get(base + "readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("datum serve did not become ready")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def config_file(tmp_path: Path, interval: str = "30s", scheduler: bool = True) -> Path:
    """A configuration file for ``datum serve`` with the same store and root as ``build_story``."""
    cfg = tmp_path / "datum.toml"
    cfg.write_text(
        f'store = "sqlite:///{tmp_path / "datum.db"}"\n'
        "[reconcilers.buckets]\n"
        f'root = "{tmp_path / "buckets"}"\n'
        f'interval = "{interval}"\n'
        "confirmation_ticks = 2\n"
        'breaker = { restore = 100, reap = 2, align = 100 }\n'
        "[server]\n"
        f"scheduler = {'true' if scheduler else 'false'}\n"
        'refresh = "1s"\n'
    )
    return cfg


def git(where: Path, *args: str) -> str:
    """git in ``where`` as a test's author, no system or user configuration: its output, stripped."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1",
           "HOME": str(where)}
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()
