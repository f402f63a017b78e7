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
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from replica_harness import SLOW, TOKEN, Fleet, Replica, free_port, wait_for
from slow_reconciler import setup


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("DATUM_REPLICAS"):
        return
    skip = pytest.mark.skip(reason="several datum serve processes: run by ./scripts/test-replicas")
    for item in items:
        if item.get_closest_marker("replicas") is not None:
            item.add_marker(skip)


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
            with log.open("w") as out:  # the child keeps its own descriptor
                proc = subprocess.Popen(
                    [sys.executable, str(SLOW), "serve", "--config", str(config), "--host", "127.0.0.1",
                     "--port", str(port)],
                    stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
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
