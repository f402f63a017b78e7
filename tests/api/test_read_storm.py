"""A refresh storm of the page never starves the control loop: answered or shed with Retry-After, never left hanging.

Before the read gate (``datum.api.front.gate``), a few hundred concurrent ``/ui/overview`` on a small SQLite
server each held a pooled connection while waiting for a second one: the pool ran dry, every page
load waited the pool's 30 s and failed, ordinary reads timed out and the scheduler's own tick failed
with ``QueuePool limit ... reached``. Here a real ``datum serve`` takes the storm while its scheduler
ticks a reconciler every second and an agent reports a pass.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from datum.api.front import tokens
from datum.api.front.gate import ReadGate
from datum.api.server import serving_app
from datum.core.findings import Problem
from datum.plugins import load as _load_plugins
from datum.store import open_store
from datum.store.history import RECONCILER
from datum.store.schema import pass_history

from .story import config_file, pass_report, serving, settings_for

STORM = 200
REPORTS = 300  # agents reporting at once, each its own host, in the storm with the page loads


def small_server(tmp_path) -> tuple[Path, dict[str, str], dict[str, dict[str, str]]]:
    """A ``datum serve`` configuration ticking buckets every second with 4 read slots, and an operator's headers and
    each host's agent's (web0 ... web{REPORTS-1}, each token bound to its host)."""
    cfg = config_file(tmp_path, interval="1s")
    cfg.write_text(cfg.read_text() + 'read_slots = 4\nread_wait = "1s"\n')
    store = open_store(f"sqlite:///{tmp_path / 'datum.db'}")
    operator = {"Authorization": f"Bearer {tokens.create(store, 'operator')}"}
    agent = {f"web{i}": {"Authorization": f"Bearer {tokens.create(store, 'agent', f'web{i}')}"} for i in range(REPORTS)}
    store.dispose()
    return cfg, operator, agent


def test_the_gate_queues_in_order_and_sheds_what_waited_too_long():
    async def run() -> None:
        gate = ReadGate(slots=1, wait=0.05)
        await gate.acquire()
        with pytest.raises(Problem) as shed:
            await gate.acquire()
        finding = shed.value.findings[0]
        assert finding.code == "UNAVAILABLE" and finding.details == {"retryAfter": 1}
        assert "[server] read_slots" in finding.message
        waiting = asyncio.ensure_future(gate.acquire())
        await asyncio.sleep(0.01)
        gate.release()  # the one waiting gets it
        await waiting
        gate.release()

    asyncio.run(run())


def test_a_storm_of_page_loads_is_answered_or_shed_and_the_scheduler_and_intake_keep_going(tmp_path):
    cfg, operator, agent = small_server(tmp_path)
    with serving(cfg, tmp_path / "serve.log") as base:
        listed = f"{base}v1/observability/admin/reconcilers"

        def last_ran() -> str | None:
            rows = httpx.get(listed, headers=operator, timeout=30).json()
            return next(r for r in rows if r["name"] == "buckets")["lastRanAt"]

        deadline = time.monotonic() + 30
        while last_ran() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert last_ran() is not None

        async def storm() -> tuple[list[httpx.Response], httpx.Response]:
            limits = httpx.Limits(max_connections=STORM + 10)
            async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
                async def report() -> httpx.Response:
                    await asyncio.sleep(0.5)  # in the thick of it
                    return await client.post("v1/hosts/web1/passes", json=pass_report(), headers=agent["web1"])

                *pages, posted = await asyncio.gather(
                    *(client.get("ui/overview", headers=operator) for _ in range(STORM)), report()
                )
                return pages, posted

        started, since = time.monotonic(), datetime.now(UTC)
        pages, posted = asyncio.run(storm())
        took, until = time.monotonic() - started, datetime.now(UTC)
        statuses = Counter(r.status_code for r in pages)
        assert set(statuses) <= {200, 503}, statuses
        assert statuses[200] >= 4  # every slot served
        for shed in (r for r in pages if r.status_code == 503):
            assert shed.headers["Retry-After"] == "1"
            assert shed.json()["issues"][0]["code"] == "UNAVAILABLE"
        assert posted.status_code in (200, 201), posted.text
        assert took < 60
        store = open_store(f"sqlite:///{tmp_path / 'datum.db'}")
        with store.connect() as conn:  # the scheduler's passes, one a second, went on through the storm
            ticks = conn.execute(
                sa.select(sa.func.count()).where(
                    pass_history.c.subject == RECONCILER, pass_history.c.name == "buckets",
                    pass_history.c.at > since, pass_history.c.at < until,
                )
            ).scalar_one()
        store.dispose()
        assert ticks >= int(took) - 2, (ticks, took)
    log = (tmp_path / "serve.log").read_text()
    assert "QueuePool" not in log


def tick_times(db, since: datetime, until: datetime | None = None) -> list[datetime]:
    """When the buckets reconciler's passes were recorded after ``since`` (and before ``until``), in order."""
    store = open_store(f"sqlite:///{db}")
    try:
        with store.connect() as conn:
            query = sa.select(pass_history.c.at).where(
                pass_history.c.subject == RECONCILER, pass_history.c.name == "buckets", pass_history.c.at > since
            )
            if until is not None:
                query = query.where(pass_history.c.at < until)
            return list(conn.execute(query.order_by(pass_history.c.at)).scalars())
    finally:
        store.dispose()


def test_the_store_gives_the_control_loop_connections_of_its_own(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'datum.db'}")
    control = store.own_pool(2, 1)
    assert control.engine is not store.engine
    assert (control.engine.pool.size(), control.engine.pool._max_overflow) == (2, 1)
    held = [store.engine.connect() for _ in range(store.engine.pool.size() + store.engine.pool._max_overflow)]
    with control.begin() as conn:  # every request connection taken: the control loop's are there still
        conn.execute(sa.text("SELECT 1"))
    for conn in held:
        conn.close()
    control.dispose()
    store.dispose()
    memory = open_store("sqlite:///:memory:")
    assert memory.own_pool(2) is memory  # another engine would be another, empty, database
    memory.dispose()


@contextmanager
def unfrozen() -> Iterator[None]:
    """The serving app's start freezes the collector's view of the process (``gc.freeze``): undone after."""
    try:
        yield
    finally:
        gc.unfreeze()


def test_the_scheduler_ticks_while_requests_hold_every_connection_of_the_pool(tmp_path):
    """``datum serve``'s scheduler ticks on the control loop's own connections: with every one of the requests'
    pool taken (what a storm does), the reconciler's passes go on at their interval. On the requests' pool, the
    tick would wait the pool's 30 s and fail with ``QueuePool limit ... reached``."""
    settings = settings_for(tmp_path, buckets={"interval": "200ms"}, scheduler=True)
    store = open_store(settings.store_url)
    app = serving_app(settings, lambda: (_load_plugins().registry(), store))
    with TestClient(app), unfrozen():
        deadline = time.monotonic() + 10
        while not tick_times(tmp_path / "datum.db", datetime(2000, 1, 1, tzinfo=UTC)):
            assert time.monotonic() < deadline, "the scheduler never ticked"
            time.sleep(0.05)
        pool = store.engine.pool
        held = [store.engine.connect() for _ in range(pool.size() + pool._max_overflow)]
        try:
            since = datetime.now(UTC)
            time.sleep(2)
            assert len(tick_times(tmp_path / "datum.db", since)) >= 3
        finally:
            for conn in held:
                conn.close()


def test_a_storm_of_reports_and_page_loads_leaves_the_ticks_on_time(tmp_path):
    """A small SQLite ``datum serve`` (the default pool) takes ``REPORTS`` agents' reports and ``STORM`` page loads
    at once while its scheduler ticks a reconciler every second: every report is stored, every page load answered
    or shed, and no two ticks are further apart than a few intervals."""
    cfg, operator, agent = small_server(tmp_path)
    with serving(cfg, tmp_path / "serve.log") as base:
        deadline = time.monotonic() + 30
        while not tick_times(tmp_path / "datum.db", datetime(2000, 1, 1, tzinfo=UTC)):
            assert time.monotonic() < deadline, "the scheduler never ticked"
            time.sleep(0.2)

        async def storm() -> tuple[list[httpx.Response], list[httpx.Response]]:
            limits = httpx.Limits(max_connections=STORM + REPORTS + 10)
            async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
                pages = [client.get("ui/overview", headers=operator) for _ in range(STORM)]
                reports = [
                    client.post(f"v1/hosts/web{i}/passes", json=pass_report(f"web{i}"), headers=agent[f"web{i}"])
                    for i in range(REPORTS)
                ]
                answers = await asyncio.gather(*pages, *reports)
                return answers[:STORM], answers[STORM:]

        since = datetime.now(UTC)
        pages, posted = asyncio.run(storm())
        until = datetime.now(UTC)
        time.sleep(1.5)  # the tick after the storm
        ticks = [since, *tick_times(tmp_path / "datum.db", since), datetime.now(UTC)]
    refused = [r.text for r in posted if r.status_code not in (200, 201)]
    assert not refused, refused[:3]
    assert set(Counter(r.status_code for r in pages)) <= {200, 503}
    gaps = [(b - a).total_seconds() for a, b in zip(ticks, ticks[1:], strict=False)]
    # on time: a tick waiting for a pooled connection would wait the pool's 30 s (and fail); 8 s leaves room for
    # SQLite's one writer and a loaded machine
    assert max(gaps) < 8.0, (gaps, (until - since).total_seconds())
    log = (tmp_path / "serve.log").read_text()
    assert "QueuePool" not in log
