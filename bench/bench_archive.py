#!/usr/bin/env python3
"""Benchmark: the pass archive at fleet scale on PostgreSQL (issue 23 item 4, second half).

Targets: with 10,000 hosts x 14 days of passes (one pass every 30 min, 1% of passes changing something,
50 resources per report) the store stays under 5 GiB, a host's history page (``GET /v1/hosts/{host}/passes``,
its first page of 100) answers in under 50 ms and an hour of fleet events (``GET /v1/events?since=``) in
under 200 ms; and the time retention takes to drop a day is reported.

The archive is filled in SQL (``generate_series``, one ``INSERT ... SELECT`` per day and table), not
through the intake, so the fill runs in minutes: rows as ``datum.store.history``/``datum.store.passes``
write them (a ``pass_history`` host row per pass naming its report's digest; ``pass_reports`` one report
per host plus one per changing pass, each of ``--resources`` resources, built from a real report's JSON;
``pass_events`` one row per changing pass, its one changed resource), received on the day partitions of
the last ``--days`` days (``datum.store.partitions``). Which pass changes is a hash of host and pass:
exactly 1 in 100. Then one real pass per measured host goes through ``POST /v1/hosts/{host}/passes`` to a
real ``datum serve`` (the intake's one statement on the full tables), the two reads are timed through
HTTP (``--runs`` times each, median and worst, whole body read), and retention drops a whole day (the
second oldest, after the partial oldest: ``datum.store.passes.prune_passes``, its day partitions, then
the reports no remaining pass names).
``--hosts``/``--days`` run a fraction; the size is then also extrapolated linearly to 10,000 x 14
(every table grows with passes), and says so.
Run as ``.venv/bin/python bench/bench_archive.py [--hosts N] [--days N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import database, header, load, verdict  # noqa: E402
from bench_api import free_port, wait_ready  # noqa: E402
from bench_intake import prepare, report  # noqa: E402

TARGET_GIB = 5.0
TARGET_PAGE_MS = 50.0
TARGET_EVENTS_MS = 200.0
FULL_PASSES = 10_000 * 14 * 48
PER_DAY = 48  # one pass every 30 minutes


def _reports(resources: int) -> tuple[str, str]:
    """A converged report's JSON and a changing one's (its first resource updated), host name ``HOSTNAME``."""
    base = report("HOSTNAME", resources)
    changed = json.loads(json.dumps(base))
    changed["resources"][0] |= {"action": "update", "changed": True}
    return json.dumps(base), json.dumps(changed)


# One day's passes of every host: host h's pass s of the day runs at s*30 min + h seconds (spread over the
# half hour); it changes something when the hash says so (1 in 100).
_PASSES = """
INSERT INTO pass_history (subject, name, at, outcome, completed, drift, blocked, counts, items, pass_id,
                          started_at, finished_at, duration_seconds, seq, reason, digest, older)
SELECT 'host', p.name, p.t + interval '1 second', 'converged', true, 0, 0, CAST(:counts AS json), NULL,
       p.name || '-' || p.seq, p.t - interval '1 second', p.t, 1.0, p.seq, NULL,
       CASE WHEN p.changes THEN md5('c' || p.name || p.seq) || md5(p.name || p.seq || 'c')
            ELSE md5('b' || p.name) || md5(p.name || 'b') END,
       false
FROM (SELECT 'host-' || lpad(h::text, 5, '0') AS name, :day_no * 48 + s + 1 AS seq,
             CAST(:day AS timestamptz) + s * interval '30 minutes' + (h % 1790) * interval '1 second' AS t,
             ((h * 7919 + (:day_no * 48 + s) * 104729) % 100) = 0 AS changes
      FROM generate_series(0, :hosts - 1) h, generate_series(0, 47) s) p
WHERE p.t > CAST(:lo AS timestamptz) AND p.t <= CAST(:now AS timestamptz)
"""
_CHANGED_REPORTS = """
INSERT INTO pass_reports (digest, host, report, last_seen)
SELECT digest, name, CAST(replace(:changed, 'HOSTNAME', name) AS json), at
FROM pass_history WHERE subject = 'host' AND at >= CAST(:day AS timestamptz)
  AND at < CAST(:day AS timestamptz) + interval '1 day' AND digest LIKE md5('c' || name || seq) || '%'
"""
_EVENTS = """
INSERT INTO pass_events (pass_row, host, pass_id, finished_at, received_at, resource, type, action, state,
                         changed, reason)
SELECT id, name, pass_id, finished_at, at, 'File[/etc/app/0.conf]', 'File', 'update', 'converged', true, NULL
FROM pass_history WHERE subject = 'host' AND at >= CAST(:day AS timestamptz)
  AND at < CAST(:day AS timestamptz) + interval '1 day' AND digest LIKE md5('c' || name || seq) || '%'
"""
_BASE_REPORTS = """
INSERT INTO pass_reports (digest, host, report, last_seen)
SELECT md5('b' || name) || md5(name || 'b'), name, CAST(replace(:base, 'HOSTNAME', name) AS json), :now
FROM (SELECT 'host-' || lpad(h::text, 5, '0') AS name FROM generate_series(0, :hosts - 1) h) n
"""


def fill(store_url: str, hosts: int, days: int, resources: int) -> dict[str, float]:
    """The archive of ``hosts`` x ``days`` days (the last ``days`` days, today's up to now): seconds taken."""
    import sqlalchemy as sa

    from datum.store import open_store
    from datum.store.partitions import make_days

    base, changed = _reports(resources)
    counts = json.dumps({"converged": resources})
    store = open_store(store_url)
    started = time.perf_counter()
    try:
        with store.connect() as conn:
            now = conn.execute(sa.text("SELECT now()")).scalar()
        lo = now - timedelta(days=days)  # the passes of the last ``days`` days up to now: days + 1 partitions
        wanted = [lo.date() + timedelta(days=i) for i in range(days + 1)]
        with store.begin() as conn:
            make_days(conn, wanted)
        for day_no, d in enumerate(wanted):
            day = datetime(d.year, d.month, d.day, tzinfo=UTC)
            with store.begin() as conn:
                conn.execute(sa.text(_PASSES), {"hosts": hosts, "day": day, "day_no": day_no, "counts": counts,
                                                "lo": lo, "now": now})
                conn.execute(sa.text(_CHANGED_REPORTS), {"day": day, "changed": changed})
                conn.execute(sa.text(_EVENTS), {"day": day})
            print(f"  filled {d} ({time.perf_counter() - started:.0f} s)", flush=True)
        with store.begin() as conn:
            conn.execute(sa.text(_BASE_REPORTS), {"hosts": hosts, "base": base, "now": now})
        with store.engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
            conn.execute(sa.text("VACUUM ANALYZE"))
    finally:
        store.dispose()
    return {"fill_seconds": time.perf_counter() - started, "first_day": wanted[0].isoformat()}  # type: ignore[dict-item]


def sizes(store_url: str) -> dict[str, int]:
    """Bytes of the database, and of each archive table with all its partitions, indexes and TOAST."""
    import sqlalchemy as sa

    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            out = {"database": int(conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one())}
            for table in ("pass_history", "pass_events", "pass_reports"):
                out[table] = int(conn.execute(sa.text(  # a table not partitioned (pass_reports) has no tree
                    "SELECT COALESCE((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(CAST(:t AS "
                    "regclass)) WHERE level > 0), pg_total_relation_size(CAST(:t AS regclass)))"
                ), {"t": table}).scalar_one() or 0)
            out["passes"] = int(conn.execute(sa.text("SELECT count(*) FROM pass_history WHERE subject = 'host'")).scalar_one())
            out["events"] = int(conn.execute(sa.text("SELECT count(*) FROM pass_events")).scalar_one())
            out["reports"] = int(conn.execute(sa.text("SELECT count(*) FROM pass_reports")).scalar_one())
    finally:
        engine.dispose()
    return out


def timed(client: httpx.Client, url: str, runs: int) -> tuple[list[float], dict]:
    times, doc = [], {}
    for _ in range(runs):
        started = time.perf_counter()
        r = client.get(url)
        body = r.read()
        times.append((time.perf_counter() - started) * 1000)
        assert r.status_code == 200, r.text
        doc = json.loads(body)
    return times, doc


def main(hosts: int = 10_000, days: int = 14, resources: int = 50, runs: int = 20) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="datum-bench-archive-") as tmp, database("postgresql", Path(tmp)) as store_url:
        home = Path(tmp)
        cfg, operator, agent = prepare(home, store_url)
        filled = fill(store_url, hosts, days, resources)
        size = sizes(store_url)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = (home / "serve.log").open("w")
        server = subprocess.Popen(
            [sys.executable, "-c", "from datum.cli.main import main; main()", "serve", "--config", str(cfg),
             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            wait_ready(f"{base}/v1/hosts", operator, server)
            measured = [f"host-{h:05d}" for h in range(0, hosts, max(1, hosts // 5))]
            intake = []
            for name in measured:  # the real intake's one statement on the full tables
                started = time.perf_counter()
                r = httpx.post(f"{base}/v1/hosts/{name}/passes", json=report(name, resources, seq=days * PER_DAY + 1),
                               headers={"Authorization": f"Bearer {agent}"}, timeout=30)
                intake.append((time.perf_counter() - started) * 1000)
                assert r.status_code == 201, r.text
            with httpx.Client(headers={"Authorization": f"Bearer {operator}"}, timeout=60) as client:
                page: list[float] = []
                rows = 0
                for name in measured:
                    t, doc = timed(client, f"{base}/v1/hosts/{name}/passes", max(1, runs // len(measured)))
                    page += t
                    rows = len(doc["passes"])
                since = (datetime.now(UTC) - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
                events_ms, doc = timed(client, f"{base}/v1/events?since={since}&limit=1000", runs)
                events = len(doc["events"])
        finally:
            server.terminate()
            server.wait(10)
            log.close()
        from datum.store import open_store
        from datum.store.passes import prune_passes

        store = open_store(store_url)
        try:
            oldest = datetime.fromisoformat(filled["first_day"]).replace(tzinfo=UTC)  # type: ignore[arg-type]
            prune_passes(store, oldest + timedelta(days=1))  # the partial oldest day, not timed
            started = time.perf_counter()
            dropped = prune_passes(store, oldest + timedelta(days=2))  # the next one, a whole day
            drop_s = time.perf_counter() - started
        finally:
            store.dispose()
    scale = FULL_PASSES / max(1, size["passes"])
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "hosts": hosts,
        "days": days,
        "resources": resources,
        "passes": size["passes"],
        "events": size["events"],
        "reports": size["reports"],
        "fill_s": round(float(filled["fill_seconds"]), 1),
        "db_gib": round(size["database"] / 2**30, 3),
        "pass_history_mib": round(size["pass_history"] / 2**20, 1),
        "pass_events_mib": round(size["pass_events"] / 2**20, 1),
        "pass_reports_mib": round(size["pass_reports"] / 2**20, 1),
        "db_gib_at_full_scale": round(size["database"] * scale / 2**30, 2),
        "extrapolated": scale > 1.01,
        "intake_ms_median": round(statistics.median(intake), 1),
        "page_rows": rows,
        "page_ms_median": round(statistics.median(page), 1),
        "page_ms_worst": round(max(page), 1),
        "hour_events": events,
        "events_ms_median": round(statistics.median(events_ms), 1),
        "events_ms_worst": round(max(events_ms), 1),
        "drop_day_passes": dropped,
        "drop_day_s": round(drop_s, 2),
        "load_average": load(),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=14)
    ap.add_argument("--resources", type=int, default=50)
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    print(header(f"pass archive, {a.hosts} hosts x {a.days} days on postgresql"))
    r = main(a.hosts, a.days, a.resources, a.runs)
    for key, value in r.items():
        print(f"{key:>22}: {value}")
    ok_size = float(r["db_gib_at_full_scale"]) < TARGET_GIB  # type: ignore[arg-type]
    ok_page = float(r["page_ms_median"]) < TARGET_PAGE_MS  # type: ignore[arg-type]
    ok_events = float(r["events_ms_median"]) < TARGET_EVENTS_MS  # type: ignore[arg-type]
    size = f"{r['db_gib']} GiB" + (f" ({r['db_gib_at_full_scale']} GiB extrapolated to 10,000 x 14)" if r["extrapolated"] else "")
    print(f"archive {a.hosts} hosts x {a.days} days: {size} (target 5: {verdict(ok_size)}), history page "
          f"{r['page_ms_median']} ms (target 50: {verdict(ok_page)}), an hour of events {r['events_ms_median']} ms "
          f"(target 200: {verdict(ok_events)}), a day dropped in {r['drop_day_s']} s, load {load()}: "
          f"{verdict(ok_size and ok_page and ok_events)}")
