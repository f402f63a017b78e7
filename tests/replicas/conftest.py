"""Several real ``datum serve`` processes on one store, on loopback.

Each replica is ``tests/reconcile/slow_reconciler.py serve``: the ``datum``
command with the ``slow`` test reconciler registered (its passes and applies
leave a trace in its folder: ``passes``, ``progress``, ``overlaps``). Tests
marked ``replicas`` are long and run by ``./scripts/test-replicas``
(``DATUM_REPLICAS=1``); ``./scripts/test`` skips them and runs the smoke test.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

SLOW = Path(__file__).resolve().parents[1] / "reconcile" / "slow_reconciler.py"
sys.path.insert(0, str(SLOW.parent))

from slow_reconciler import NAME, setup  # noqa: E402

TOKEN = "datum_replicas_test_operator_token"
DRIFT = f"/v1/observability/admin/reconcilers/{NAME}/drift"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("DATUM_REPLICAS"):
        return
    skip = pytest.mark.skip(reason="several datum serve processes: run by ./scripts/test-replicas")
    for item in items:
        if item.get_closest_marker("replicas") is not None:
            item.add_marker(skip)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], object], timeout: float = 60.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@dataclass
class Replica:
    """One ``datum serve`` process."""

    config: Path
    log: Path
    port: int
    proc: subprocess.Popen[bytes]
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ready(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def drift(self) -> dict:
        r = self.client.get(DRIFT)
        assert r.status_code == 200, r.text
        return r.json()

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@dataclass
class Fleet:
    """Replicas of one configuration on one store, and what the slow reconciler left in ``root``."""

    root: Path
    engine: sa.Engine
    replicas: list[Replica]

    def passes(self) -> list[tuple[str, int]]:
        """Each executed pass: its tick time (the store's clock) and the pid that ran it."""
        try:
            lines = (self.root / "passes").read_text().splitlines()
        except FileNotFoundError:
            return []
        return [(at, int(pid)) for at, pid in (line.split() for line in lines)]

    def overlaps(self) -> str:
        path = self.root / "overlaps"
        return path.read_text() if path.exists() else ""

    def run_row(self) -> dict | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.text("SELECT * FROM reconciler_runs WHERE reconciler = :n"), {"n": NAME}
            ).mappings().first()
        return dict(row) if row else None

    def replica(self, pid: int) -> Replica:
        return next(r for r in self.replicas if r.pid == pid)


@pytest.fixture
def fleet(tmp_path: Path, store_url: str) -> Iterator[Callable[..., Fleet]]:
    """``fleet(count, items, **[reconcilers.slow] keys)``: that many replicas, started at once, ready."""
    started: list[Replica] = []
    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))

    def start(count: int, items: list[str], report_ttl: str = "60s", **section: object) -> Fleet:
        root = tmp_path / "slow"
        config = setup(root, store_url, items, **section)
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        with config.open("a") as f:
            f.write(
                "\n[reconcilers.buckets]\nenabled = false\n"
                f'\n[server]\nreport_ttl = "{report_ttl}"\naccess_log = false\n'
                f'\n[server.tokens]\noperator = ["sha256:{digest}"]\n'
            )
        replicas = []
        for i in range(count):
            log = tmp_path / f"serve-{i}.log"
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, str(SLOW), "serve", "--config", str(config), "--host", "127.0.0.1",
                 "--port", str(port)],
                stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            replicas.append(Replica(config, log, port, proc))
        started.extend(replicas)
        for r in replicas:  # all of them opened (and migrated) the new store at once
            wait_for(r.ready, 120, f"replica {r.pid} to be ready")
        return Fleet(root, engine, replicas)

    yield start
    for r in started:
        r.stop()
    engine.dispose()
