#!/usr/bin/env python3
"""Benchmark: the coverage histogram over 1,000,000 desired rows, on SQLite and on PostgreSQL.

Target (issue 14): under 200 ms on each. The rows are the ``buckets`` table's
(95% ``active``, the rest spread over the other statuses), the query is the
one every drift report runs (``datum.reconcile.coverage.measure`` with the
``buckets`` reconciler's own spec: the per-status counts the database keeps,
migration ``buckets_0002``, and the oldest ``updated_at`` per status from the
(status, updated_at) index). The figure is the median of ``--runs`` warm
runs; the first read after the fill is printed too (on PostgreSQL it folds
the fill's delta log). ``--scan`` also times the query that counts every row
(``GROUP BY status``, now over the covering index), for comparison;
``--writes N`` what keeping the counts costs a status write (N writes with
the triggers, then N after dropping them, in the same run).
PostgreSQL is ``$DATUM_BENCH_PG`` (an admin URL; a database is made and
dropped), else the local cluster the tests use. Run: ``./scripts/bench coverage``.
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
    if store.dialect == "postgresql":  # now, not by autovacuum in the middle of the timed writes
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM buckets"))


def time_measure(store, runs: int, counted: bool = True) -> tuple[float, float, int]:  # type: ignore[no-untyped-def]
    """(first read ms, median of ``runs`` warm reads ms, rows counted)."""
    import dataclasses

    from datum.reconcile.coverage import measure
    from datum.reconcilers import buckets as b

    if hasattr(b, "coverage_spec"):
        spec = dataclasses.replace(b.coverage_spec(), counted=counted)
    else:  # a commit from before buckets_0002 (DATUM_BENCH_TREE=<commit>): the query then was the GROUP BY
        from datum.core.coverage import CoverageDecl
        from datum.reconcile.coverage import CoverageSpec

        decl = CoverageDecl(kind="bucket", selected=frozenset(b.WORK_QUERY), terminal=frozenset({b.DELETED}))
        spec = CoverageSpec(decl, b.buckets)
    now = datetime.now(UTC)
    started = time.perf_counter()
    rows = measure(store, [spec], now)  # first: caches, pool, and on PostgreSQL the fold of the fill's deltas
    first = (time.perf_counter() - started) * 1000
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        rows = measure(store, [spec], now)
        samples.append((time.perf_counter() - started) * 1000)
    return first, statistics.median(samples), sum(r.count for r in rows)


def time_writes(store, writes: int) -> float:  # type: ignore[no-untyped-def]
    """Median ms of one status write in its own transaction (``set_status``, as ``datum bucket delete`` does)."""
    from datum.reconcile.desired import set_status
    from datum.reconcilers import buckets as b

    samples = []
    for n in range(writes):
        # row 100k + 7 is ``active``: moved to ``deleting``, then back on the next write
        old, new = ("active", "deleting") if n % 2 == 0 else ("deleting", "active")
        started = time.perf_counter()
        with store.begin() as conn:
            set_status(conn, b.buckets, f"bucket-{(n // 2) * 100 + 7:07d}", new, {old})
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _write_cost(store, label: str, writes: int) -> None:  # type: ignore[no-untyped-def]
    """What keeping the counts costs a write: A/B/A in one run (with the triggers, without, with again)."""
    from datum.store.status_counts import count_statuses, drop_status_counts

    first = time_writes(store, writes)
    with store.begin() as conn:
        drop_status_counts("buckets", bind=conn)
        conn.execute(sa.text("CREATE INDEX ix_buckets_status ON buckets (status)"))  # as before buckets_0002
    without = time_writes(store, writes)
    with store.begin() as conn:
        conn.execute(sa.text("DROP INDEX ix_buckets_status"))
        count_statuses("buckets", bind=conn)
    again = time_writes(store, writes)
    print(f"{label}: one status write (its own transaction), median of {writes}: {first:.3f} and {again:.3f} ms "
          f"with the counts kept, {without:.3f} ms without (triggers and (status, updated_at) index dropped)")


def one(url: str, label: str, rows: int, runs: int, scan: bool, writes: int = 0) -> tuple[float, float | None]:
    from datum.store import open_store

    store = open_store(url)
    try:
        started = time.perf_counter()
        fill(store, rows)
        print(f"{label}: {rows} rows written in {time.perf_counter() - started:.1f} s", flush=True)
        first, ms, counted = time_measure(store, runs)
        assert counted == rows, (counted, rows)
        print(f"{label}: coverage histogram median {ms:.2f} ms over {runs} runs (first read {first:.1f} ms), "
              f"load {os.getloadavg()[0]:.2f}")
        scanned = None
        if scan:
            _, scanned, by_scan = time_measure(store, runs, counted=False)
            assert by_scan == rows, (by_scan, rows)
            print(f"{label}: counting every row (GROUP BY over the (status, updated_at) index): "
                  f"median {scanned:.1f} ms")
        if writes:
            _write_cost(store, label, writes)
        return ms, scanned
    finally:
        store.dispose()


def main(rows: int = 1_000_000, runs: int = 7, backends: tuple[str, ...] = ("sqlite", "postgresql"),
         scan: bool = False, writes: int = 0) -> dict[str, tuple[float, float | None]]:
    out = {}
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory(prefix="datum-bench-coverage-") as tmp:
            out["sqlite"] = one(f"sqlite:///{tmp}/datum.db", "SQLite", rows, runs, scan, writes)
    if "postgresql" in backends:
        with database("postgresql", Path()) as url:
            out["postgresql"] = one(url, "PostgreSQL", rows, runs, scan, writes)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--scan", action="store_true", help="also time the query that counts every row")
    ap.add_argument("--writes", type=int, default=0,
                    help="also time N status writes with the counts kept and without (drops the triggers after)")
    a = ap.parse_args()
    print(header(f"coverage histogram, {a.rows} rows"))
    res = main(a.rows, a.runs, tuple(a.backends.split(",")), a.scan, a.writes)
    ok = all(ms < TARGET_MS for ms, _ in res.values())
    figures = ", ".join(f"{k} {ms:.1f} ms" for k, (ms, _) in res.items())
    print(f"coverage histogram over {a.rows} rows: {figures}, load {os.getloadavg()[0]:.2f}; "
          f"target under {TARGET_MS:.0f} ms on each: {verdict(ok)}")
