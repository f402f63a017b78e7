"""A real ``datum serve`` on loopback with a fleet directory, and real ``datum agent --once`` processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

DATUM = [sys.executable, "-c", "from datum.cli.main import main; main()"]

NODES = """\
nodes:
  - match: {name: "web*"}
    manifests: [web.yaml]
    vars: {greeting: hello}
  - match: {facts: {os_release.ID: testos}}
    manifests: [testos.yaml]
"""

WEB = """\
include: [common.yaml]
resources:
  - File[/srv/index.html]:
      template: index.j2
"""

COMMON = """\
resources:
  - Directory[/srv]: {}
"""

TESTOS = """\
resources:
  - File[/etc/testos.conf]:
      content: "testos\\n"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Run:
    code: int
    out: str
    err: str


@dataclass
class Fleet:
    base: Path
    store_url: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def manifests(self) -> Path:
        return self.base / "fleet"

    @property
    def server_config(self) -> Path:
        return self.base / "server.toml"

    def datum(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Run:
        done = subprocess.run(
            [*DATUM, *args], capture_output=True, text=True, timeout=timeout, check=False,
            env={**os.environ, **(env or {})},
        )
        return Run(done.returncode, done.stdout, done.stderr)

    def token(self, principal: str, *extra: str) -> str:
        done = self.datum("token", "create", "--principal", principal, *extra, "--config", str(self.server_config))
        assert done.code == 0, done.err
        return done.out.strip().splitlines()[-1]

    def start(self) -> None:
        log = (self.base / "serve.log").open("a")
        self.proc = subprocess.Popen(
            [*DATUM, "serve", "--config", str(self.server_config), "--port", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, (self.base / "serve.log").read_text()
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
            self.proc = None

    def get(self, path: str, token: str, **headers: str) -> httpx.Response:
        return httpx.get(self.url + path, headers={"Authorization": f"Bearer {token}", **headers}, timeout=10)


@dataclass
class Agent:
    """One host: its root, its local state file, its configuration (its name), its token."""

    fleet: Fleet
    name: str
    token: str
    settings: str = ""  # more lines of its [host] section (lock_wait = "1s")

    @property
    def base(self) -> Path:
        return self.fleet.base / "hosts" / self.name

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "agent.db"

    def _command(self, *extra: str) -> tuple[list[str], dict[str, str]]:
        """``datum agent --once`` for this host (its files written first), and its environment."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(exist_ok=True)
        (self.base / "boot_id").write_text("boot-1\n")
        (self.base / "agent.toml").write_text(f'[host]\nname = "{self.name}"\n{self.settings}\n')
        (self.base / "token").write_text(self.token + "\n")
        (self.base / "token").chmod(0o600)
        argv = [
            "agent", "--server", self.fleet.url, "--token-file", str(self.base / "token"),
            "--root", str(self.root), "--state", str(self.state), "--once",
            "--config", str(self.base / "agent.toml"), *extra,
        ]
        return argv, {"DATUM_HOME": str(self.base / "home"), "DATUM_BOOT_ID_FILE": str(self.base / "boot_id")}

    def once(self, *extra: str) -> Run:
        argv, env = self._command(*extra)
        return self.fleet.datum(*argv, env=env)

    def start(self, *extra: str) -> subprocess.Popen[str]:
        """``once`` in the background: the running process, its stderr a pipe."""
        argv, env = self._command(*extra)
        return subprocess.Popen([*DATUM, *argv], stderr=subprocess.PIPE, text=True, env={**os.environ, **env})


@contextmanager
def _fleet(base: Path, store_url: str) -> Iterator[Fleet]:
    fleet = Fleet(base, store_url)
    m = fleet.manifests
    m.mkdir()
    (m / "nodes.yaml").write_text(NODES)
    (m / "web.yaml").write_text(WEB)
    (m / "common.yaml").write_text(COMMON)
    (m / "testos.yaml").write_text(TESTOS)
    (m / "index.j2").write_text("{{ greeting }} from {{ hostname }}\n")
    fleet.server_config.write_text(
        f'store = "{store_url}"\n[server]\nscheduler = false\n[fleet]\nmanifests = "{m}"\n'
    )
    try:
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture
def fleet(tmp_path: Path, store_url: str) -> Iterator[Fleet]:
    """A fleet directory and a running server, once on SQLite and once on PostgreSQL."""
    with _fleet(tmp_path, store_url) as f:
        f.start()
        yield f


@pytest.fixture
def sqlite_fleet(tmp_path: Path) -> Iterator[Fleet]:
    with _fleet(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}") as f:
        f.start()
        yield f
