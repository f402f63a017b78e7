"""Real ``datum serve`` replicas for tests/replicas: start, signal, ask for the drift report, and
read what the ``slow`` reconciler left in its folder."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import sqlalchemy as sa

SLOW = Path(__file__).resolve().parents[1] / "reconcile" / "slow_reconciler.py"
sys.path.insert(0, str(SLOW.parent))

from slow_reconciler import NAME  # noqa: E402

TOKEN = "datum_replicas_test_operator_token"
DRIFT = f"/v1/observability/admin/reconcilers/{NAME}/drift"


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
