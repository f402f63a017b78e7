"""A refresh storm of the page never starves the control loop: answered or shed with Retry-After, never left hanging.

Before the read gate (``datum.api.gate``), a few hundred concurrent ``/ui/overview`` on a small SQLite
server each held a pooled connection while waiting for a second one: the pool ran dry, every page
load waited the pool's 30 s and failed, ordinary reads timed out and the scheduler's own tick failed
with ``QueuePool limit ... reached``. Here a real ``datum serve`` takes the storm while its scheduler
ticks a reconciler every second and an agent reports a pass.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime

import httpx
import pytest
import sqlalchemy as sa

from datum.api import tokens
from datum.api.gate import ReadGate
from datum.core.findings import Problem
from datum.store import open_store
from datum.store.history import RECONCILER
from datum.store.schema import pass_history

from .story import config_file, pass_report, serving

STORM = 200


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
    cfg = config_file(tmp_path, interval="1s")
    cfg.write_text(cfg.read_text() + 'read_slots = 4\nread_wait = "1s"\n')
    store = open_store(f"sqlite:///{tmp_path / 'datum.db'}")
    operator = {"Authorization": f"Bearer {tokens.create(store, 'operator')}"}
    agent = {"Authorization": f"Bearer {tokens.create(store, 'agent')}"}
    store.dispose()
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
                    return await client.post("v1/hosts/web1/passes", json=pass_report(), headers=agent)

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
