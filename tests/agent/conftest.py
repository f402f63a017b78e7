"""A real ``datum serve`` on loopback with a fleet directory, and real ``datum agent --once`` processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    """A fleet directory and ``replicas`` ``datum serve`` processes on one store: the same server.toml, each its
    own port, log (``serve.log``, then ``serve-1.log``...) and home (replica 0 the test's ``DATUM_HOME``, the
    others ``home-N``: a snapshot one materialized is not another's). ``url``, ``port`` and ``get`` are
    replica 0's unless told."""

    base: Path
    store_url: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    replicas: int = 1
    ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes] | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ports = [self.port] + [free_port() for _ in range(self.replicas - 1)]
        self.procs = [None] * self.replicas

    @property
    def url(self) -> str:
        return self.url_of(0)

    def url_of(self, replica: int) -> str:
        return f"http://127.0.0.1:{self.ports[replica]}"

    @property
    def verify(self) -> Any:
        """What httpx trusts of the server's certificate (``tests/agent/test_agent_tls.py``'s fleet: its CA)."""
        return True

    def log_of(self, replica: int) -> Path:
        return self.base / ("serve.log" if replica == 0 else f"serve-{replica}.log")

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
        """A token for ``principal`` (``"--host", NAME`` binds it to a host, as ``datum token create`` takes it),
        minted in this process: the command itself is tested in tests/cli and tests/api/test_serve.py, and a
        process start each (about 1.5 s, some fifty times here) is what these tests would wait for."""
        if extra:
            flag, host = extra
            assert flag == "--host", extra
            return self.minted(principal, host)[0]
        return self.minted(principal)[0]

    def minted(self, principal: str, *hosts: str) -> list[str]:
        """Tokens for ``principal``, one bound to each of ``hosts`` (one unbound without), minted in this process
        by what ``datum token create`` calls (``token`` runs the command: a process start, about 1.5 s, each)."""
        from datum.api.front.tokens import create
        from datum.store import open_store

        store = open_store(self.store_url)
        try:
            return [create(store, principal, host) for host in hosts or (None,)]
        finally:
            store.dispose()

    def start(self) -> None:
        """Every replica started at once, then each waited for until ready."""
        for i in range(self.replicas):
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            if i:
                env["DATUM_HOME"] = str(self.base / f"home-{i}")
            with self.log_of(i).open("a") as log:  # the child keeps its own descriptor
                self.procs[i] = subprocess.Popen(
                    [*DATUM, "serve", "--config", str(self.server_config), "--port", str(self.ports[i])],
                    stdout=log, stderr=subprocess.STDOUT, env=env,
                )
        self.proc = self.procs[0]
        deadline = time.monotonic() + 90
        for i, proc in enumerate(self.procs):
            assert proc is not None
            while True:
                assert proc.poll() is None, self.log_of(i).read_text()
                try:
                    if httpx.get(self.url_of(i) + "/readyz", timeout=5, verify=self.verify).status_code == 200:
                        break
                except (httpx.TransportError, OSError):  # OSError: a CA file the server has not made yet
                    pass
                assert time.monotonic() < deadline, f"datum serve (replica {i}) did not become ready"
                time.sleep(0.1)

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None:
                proc.terminate()
        for proc in self.procs:
            if proc is not None:
                proc.wait(15)
        self.procs = [None] * self.replicas
        self.proc = None

    @contextmanager
    def paused(self, *replicas: int) -> Iterator[None]:
        """``replicas`` stopped (SIGSTOP) for the block, then let go on (SIGCONT): they answer nothing and decide
        nothing meanwhile, their connections to the store left as they were."""
        procs = [self.procs[r] for r in replicas]
        for proc in procs:
            assert proc is not None and proc.poll() is None
            proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            for proc in procs:
                assert proc is not None
                proc.send_signal(signal.SIGCONT)

    def get(self, path: str, token: str, replica: int = 0, **headers: str) -> httpx.Response:
        return httpx.get(
            self.url_of(replica) + path, headers={"Authorization": f"Bearer {token}", **headers}, timeout=10,
            verify=self.verify,
        )


@dataclass
class Agent:
    """One host: its root, its local state file, its configuration (its name), its token, the replica it
    reports to (``once`` and ``start`` take another for one run)."""

    fleet: Fleet
    name: str
    token: str
    settings: str = ""  # more lines of its [host] section (lock_wait = "1s")
    replica: int = 0

    @property
    def base(self) -> Path:
        return self.fleet.base / "hosts" / self.name

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "agent.db"

    def _command(self, *extra: str, replica: int | None = None) -> tuple[list[str], dict[str, str]]:
        """``datum agent --once`` for this host (its files written first), against ``replica`` (else its own),
        and its environment."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(exist_ok=True)
        (self.base / "boot_id").write_text("boot-1\n")
        (self.base / "agent.toml").write_text(f'[host]\nname = "{self.name}"\n{self.settings}\n')
        (self.base / "token").write_text(self.token + "\n")
        (self.base / "token").chmod(0o600)
        server = self.fleet.url_of(self.replica if replica is None else replica)
        argv = [
            "agent", "--server", server, "--token-file", str(self.base / "token"),
            "--root", str(self.root), "--state", str(self.state), "--once",
            "--config", str(self.base / "agent.toml"), *extra,
        ]
        return argv, {"DATUM_HOME": str(self.base / "home"), "DATUM_BOOT_ID_FILE": str(self.base / "boot_id")}

    def once(self, *extra: str, replica: int | None = None) -> Run:
        argv, env = self._command(*extra, replica=replica)
        return self.fleet.datum(*argv, env=env)

    def start(self, *extra: str, replica: int | None = None) -> subprocess.Popen[str]:
        """``once`` in the background: the running process, its stderr a pipe."""
        argv, env = self._command(*extra, replica=replica)
        return subprocess.Popen([*DATUM, *argv], stderr=subprocess.PIPE, text=True, env={**os.environ, **env})


@contextmanager
def _fleet(base: Path, store_url: str, replicas: int = 1, kind: type[Fleet] = Fleet, server: str = "") -> Iterator[Fleet]:
    """A fleet of ``kind`` with the test manifests; ``server``: more lines of its ``[server]`` section."""
    fleet = kind(base, store_url, replicas=replicas)
    m = fleet.manifests
    m.mkdir()
    (m / "nodes.yaml").write_text(NODES)
    (m / "web.yaml").write_text(WEB)
    (m / "common.yaml").write_text(COMMON)
    (m / "testos.yaml").write_text(TESTOS)
    (m / "index.j2").write_text("{{ greeting }} from {{ hostname }}\n")
    fleet.server_config.write_text(
        f'store = "{store_url}"\n[server]\nscheduler = false\n{server}\n[fleet]\nmanifests = "{m}"\n'
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
