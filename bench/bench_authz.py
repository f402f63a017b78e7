#!/usr/bin/env python3
"""Benchmark: the authorization cost of one request, with 1,000 hosts in 20 groups.

Target (issue 37): under 0.5 ms at p99 per request. What a request pays is what the request guard
does before its route (``datum.api.front.guard``): the bearer token resolved to its principal
(``security.principal``), the host's recorded group read when the decision needs it (``security.told``:
from memory, else the store off the event loop) and Cedar's decision (``security.decide``, memoised). It is
timed in-process on the server's own objects (``create_app`` on a store holding the hosts), one request after
another on one event loop, for ``--seconds`` per case, with the server's thread that reads the remembered
hosts' groups again every ``hostgroups.FRESH`` seconds running meanwhile. Each case first asks about every
host once (a host's first sight reads its group from the store: printed apart, ``first sight``):

- ``scoped``: a ``viewer`` token scoped to 2 of the 20 groups asking ``fleet:ReadHost`` on a host drawn at
  random (allowed on a tenth of them, refused with 403 on the rest);
- ``unscoped``: a ``viewer`` token on the same hosts (no group read);
- ``agent``: an agent token bound to one host reporting its passes (``fleet:ReportPass``), the hot path.

Run as ``./scripts/bench authz [--hosts N] [--groups N] [--seconds S] [--store sqlite|postgresql]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import database, header, verdict  # noqa: E402

TARGET_P99_MS = 0.5


def fill(store, hosts: int, groups: int) -> list[str]:  # type: ignore[no-untyped-def]
    """``hosts`` hosts in ``groups`` groups (``g00`` ...), as the intake records them; their names."""
    import sqlalchemy as sa

    from datum.store.schema import hosts as table

    now = datetime.now(UTC)
    names = [f"h{n:05d}" for n in range(hosts)]
    rows = [{"host": h, "state": "converged", "updated_at": now, "report": {}, "group_name": f"g{n % groups:02d}"}
            for n, h in enumerate(names)]
    with store.begin() as conn:
        conn.execute(sa.insert(table), rows)
    return names


async def timed(
    state, token: str, action: str, resources: list[tuple[str, str]], seconds: float  # type: ignore[no-untyped-def]
) -> tuple[list[float], list[float]]:
    """Each request's authorization, in ms: every resource once (first sight), then at random for ``seconds``:
    principal, the host's group, Cedar's decision."""
    from datum.api.front.security import decide, principal, told
    from datum.core.findings import Problem

    scope = {"type": "http", "headers": [(b"authorization", f"Bearer {token}".encode())]}
    first: list[float] = []
    took: list[float] = []
    draw = random.Random(7)
    order = list(resources)
    end = None
    while end is None or time.monotonic() < end:
        if order:
            resource = order.pop()
        else:
            end = end or time.monotonic() + seconds
            resource = resources[draw.randrange(len(resources))]
        started = time.perf_counter()
        who = await principal(state, scope)
        await told(state, who, resource)
        try:
            decide(state, who, action, resource)
        except Problem:
            pass
        (first if end is None else took).append((time.perf_counter() - started) * 1000)
    return first, took


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    args = parser.parse_args()
    from datum.api.app import create_app
    from datum.api.front import tokens
    from datum.api.front.hostgroups import FRESH
    from datum.api.watch import Every
    from datum.config import Settings
    from datum.plugins import load
    from datum.store import open_store

    print(header(f"authz: {args.hosts} hosts in {args.groups} groups, {args.store}"))
    with tempfile.TemporaryDirectory() as home, database(args.store, Path(home)) as url:
        settings = Settings.model_validate({"home": home, "store": url, "server": {"scheduler": False}})
        store = open_store(url)
        try:
            names = fill(store, args.hosts, args.groups)
            state = create_app(settings, load().registry(), store).state.datum
            scoped = tokens.create(store, "viewer", groups=["g00", "g01"])
            viewer = tokens.create(store, "viewer")
            agent = tokens.create(store, "agent", names[0])
            hosts = [("Host", h) for h in names]
            cases = {
                "scoped": (scoped, "fleet:ReadHost", hosts),
                "unscoped": (viewer, "fleet:ReadHost", hosts),
                "agent": (agent, "fleet:ReportPass", hosts[:1]),
            }
            worst = 0.0
            regroup = Every(state.host_groups.revalidate, FRESH, "host-groups")  # as datum serve runs it
            regroup.start()
            try:
                for name, (token, action, resources) in cases.items():
                    first, took = asyncio.run(timed(state, token, action, resources, args.seconds))
                    print(f"{name:9} {len(took):7d} requests: p50 {p(took, 0.5):.4f} ms, p99 {p(took, 0.99):.4f} ms, "
                          f"max {max(took):.3f} ms; first sight of {len(first)} resources: median "
                          f"{statistics.median(first):.4f} ms, max {max(first):.3f} ms")
                    worst = max(worst, p(took, 0.99))
            finally:
                regroup.stop()
        finally:
            store.dispose()
    ok = worst < TARGET_P99_MS
    print(f"authorization per request, worst case's p99 {worst:.4f} ms (target < {TARGET_P99_MS} ms): {verdict(ok)}")


if __name__ == "__main__":
    main()
