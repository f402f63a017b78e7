#!/usr/bin/env python3
"""Benchmark: the coverage histogram over 1,000,000 desired rows, on SQLite and on PostgreSQL.

Target (issue 14): under 200 ms on each. The rows are the ``buckets`` table's
(95% ``active``, the rest spread over the other statuses), the query is the
one every drift report runs (``datum.reconcile.coverage.measure``: count and
oldest ``updated_at`` per status). The figure is the median of ``--runs``
warm runs. ``--covering`` also times it with an index on (status,
updated_at), to show what such an index would give. PostgreSQL is
``$DATUM_BENCH_PG`` (an admin URL; a database is made and dropped), else
the local cluster the tests use. Run: ``./scripts/bench coverage``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import database, header, verdict  # noqa: E402

TARGET_MS = 200.0


def status_of(n: int) -> str:
    k = n % 100
    return ("creating", "deleting", "delete_blocked", "deleted", "deleted")[k] if k < 5 else "active"


def fill(store, rows: int) -> None:  # type: ignore[no-untyped-def]
    from datum.reconcilers import buckets as b

    store.require(b.BRANCH)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    chunk = 50_000
    for base in range(0, rows, chunk):
        batch = [
            {"name": f"bucket-{n:07d}", "status": status_of(n), "created_at": start,
             "updated_at": start + timedelta(seconds=n)}
            for n in range(base, min(rows, base + chunk))
        ]
        with store.begin() as conn:
            conn.execute(sa.insert(b.buckets), batch)
    with store.begin() as conn:
        conn.execute(sa.text("ANALYZE"))


def time_measure(store, runs: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    from datum.core.coverage import CoverageDecl
    from datum.reconcile.coverage import CoverageSpec, measure
    from datum.reconcilers import buckets as b

    decl = CoverageDecl(kind="bucket", selected=frozenset(b.WORK_QUERY), terminal=frozenset({b.DELETED}))
    spec = CoverageSpec(decl, b.buckets)
    now = datetime.now(UTC)
    rows = measure(store, [spec], now)  # warm: caches, pool
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        rows = measure(store, [spec], now)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), sum(r.count for r in rows)


def one(url: str, label: str, rows: int, runs: int, covering: bool) -> tuple[float, float | None]:
    from datum.store import open_store

    store = open_store(url)
    try:
        started = time.perf_counter()
        fill(store, rows)
        print(f"{label}: {rows} rows written in {time.perf_counter() - started:.1f} s", flush=True)
        ms, counted = time_measure(store, runs)
        assert counted == rows, (counted, rows)
        print(f"{label}: coverage histogram median {ms:.1f} ms over {runs} runs, load {os.getloadavg()[0]:.2f}")
        with_index = None
        if covering:
            with store.begin() as conn:
                conn.execute(sa.text("CREATE INDEX bench_status_updated ON buckets (status, updated_at)"))
                conn.execute(sa.text("ANALYZE"))
            if store.dialect == "postgresql":
                with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.execute(sa.text("VACUUM buckets"))
            with_index, _ = time_measure(store, runs)
            print(f"{label}: with an index on (status, updated_at): median {with_index:.1f} ms")
        return ms, with_index
    finally:
        store.dispose()


def main(rows: int = 1_000_000, runs: int = 7, backends: tuple[str, ...] = ("sqlite", "postgresql"),
         covering: bool = False) -> dict[str, tuple[float, float | None]]:
    out = {}
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory(prefix="datum-bench-coverage-") as tmp:
            out["sqlite"] = one(f"sqlite:///{tmp}/datum.db", "SQLite", rows, runs, covering)
    if "postgresql" in backends:
        with database("postgresql", Path()) as url:
            out["postgresql"] = one(url, "PostgreSQL", rows, runs, covering)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--covering", action="store_true", help="also time it with an index on (status, updated_at)")
    a = ap.parse_args()
    print(header(f"coverage histogram, {a.rows} rows"))
    res = main(a.rows, a.runs, tuple(a.backends.split(",")), a.covering)
    ok = all(ms < TARGET_MS for ms, _ in res.values())
    figures = ", ".join(f"{k} {ms:.0f} ms" for k, (ms, _) in res.items())
    print(f"coverage histogram over {a.rows} rows: {figures}, load {os.getloadavg()[0]:.2f}; "
          f"target under {TARGET_MS:.0f} ms on each: {verdict(ok)}")
