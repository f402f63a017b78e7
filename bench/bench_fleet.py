#!/usr/bin/env python3
"""Benchmark: a fleet of N hosts on PostgreSQL against real ``datum serve`` processes (issue 26).

It fills N hosts with pass reports of 50 resources (a spread of states: 3% failed, the rest converged),
then measures, for that N:

- sustained intake: a second cycle of every host's report (1% of them changing a resource) as fast as
  ``--concurrency`` keep-alive connections post it, spread over the replicas: reports/s, p50, p99;
- a fleet restart burst: every host's report again at the rate that fits N into ``--burst-seconds``
  (default 300: a fleet restarting within 5 minutes), paced: the p99 and whether it kept up;
- reads a person makes, each ``--read-runs`` times on the first server: the hosts listing's first page
  (with the fleet's counts), a deep page by cursor (the middle of the fleet), one state's page
  (``failed``), the page's overview (``/ui/overview``), a ``/metrics`` scrape (time, bytes, series);
- each server's RSS and the database's size.

It prints one JSON line for the run and a verdict against issue 26's own targets where a single N can
be judged (a restart burst absorbed with p99 under 1 s); the comparisons across N (intake within 1.5x,
pages within 2x from 10,000 to 100,000) are made by reading the lines of two runs
(``docs/performance.md``). Run as ``./scripts/bench fleet --hosts N [--replicas R]``: one JSON line of
figures, then the verdict; the smoke run in the suite, through the same script,
uses ``--hosts 40 --replicas 2 --burst-seconds 1 --read-runs 1``. With ``--tls`` the servers speak HTTPS
(``[server] tls = "auto"``, one CA shared by the replicas, made in the run's directory) and every
connection, the posters' and the reads', is TLS trusting it (issue 38).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import database, load, median  # noqa: E402
from bench_api import free_port, wait_ready  # noqa: E402
from bench_intake import prepare  # noqa: E402

TARGET_BURST_P99_MS = 1000.0
FAILED_EVERY = 33  # about 3% of the fleet reads failed
CHANGED_EVERY = 100  # 1% of a cycle's reports change a resource

_POSTER = """
import asyncio, json, re, ssl, sys, time
CAFILE = {cafile!r}
SSL = ssl.create_default_context(cafile=CAFILE) if CAFILE else None  # --tls: the servers' own CA

def report(i, seq, resources):
    name = f"host-{{i:06d}}"
    failed = i % {failed_every} == 0
    changed = seq > 1 and (i + seq) % {changed_every} == 0
    rs = [{{"id": f"File[/etc/app/{{n}}.conf]", "type": "File", "name": f"/etc/app/{{n}}.conf", "action": "none",
            "state": "converged", "durationSeconds": 0.001}} for n in range(resources)]
    if changed:
        rs[1] |= {{"action": "update", "changed": True, "diff": "--- a\\n+++ b\\n+v" + str(seq) + "\\n"}}
    body = {{"host": name, "mode": "enforce", "state": "converged", "startedAt": "2026-11-30T08:00:00Z",
             "finishedAt": "2026-11-30T08:00:01Z", "durationSeconds": 1.0, "bootId": "b00t", "exitCode": 0,
             "passId": f"{{name}}-{{seq}}", "seq": seq, "counts": {{"converged": resources}}, "resources": rs}}
    if failed:
        rs[0] |= {{"state": "failed", "action": "update", "error": "permission denied"}}
        body |= {{"state": "failed", "exitCode": 4, "counts": {{"converged": resources - 1, "failed": 1}},
                  "reason": "File[/etc/app/0.conf] failed"}}
    return name, json.dumps(body).encode()

async def client(port, requests, lat, codes, interval):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=SSL)
    start = time.perf_counter()
    for k, request in enumerate(requests):
        if interval:
            await asyncio.sleep(max(0.0, start + k * interval - time.perf_counter()))
        sent = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\\r\\n\\r\\n")
        length = int(re.search(rb"(?i)content-length: (\\d+)", head).group(1))
        await reader.readexactly(length)
        lat.append(time.perf_counter() - sent)
        codes.append(int(head[9:12]))
    writer.close()

async def main():
    ports, hosts, seq, resources, concurrency, seconds = {ports}, {hosts}, {seq}, {resources}, {concurrency}, {seconds}
    requests = []
    for i in range(hosts):
        name, body = report(i, seq, resources)
        requests.append(
            f"POST /v1/hosts/{{name}}/passes HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nAuthorization: Bearer {token}\\r\\n"
            f"Content-Type: application/json\\r\\nContent-Length: {{len(body)}}\\r\\n\\r\\n".encode() + body
        )
    # paced: each connection sends its share evenly over ``seconds``; else as fast as answered
    interval = seconds * concurrency / hosts if seconds else 0.0
    lat, codes = [], []
    t = time.perf_counter()
    await asyncio.gather(*[client(ports[k % len(ports)], requests[k::concurrency], lat, codes, interval)
                           for k in range(concurrency)])
    took = time.perf_counter() - t
    lat.sort()
    print(json.dumps({{"reports": len(lat), "seconds": took, "rps": len(lat) / took,
                      "p50_ms": lat[len(lat) // 2] * 1000, "p99_ms": lat[int(len(lat) * 0.99)] * 1000,
                      "errors": sum(1 for c in codes if c not in (200, 201))}}))
asyncio.run(main())
"""


def post(ports: list[int], token: str, hosts: int, seq: int, resources: int, concurrency: int,
         seconds: float = 0.0, ca: Path | None = None) -> dict[str, float]:
    """Every host's report of cycle ``seq``, over ``concurrency`` connections spread on ``ports`` (TLS trusting
    ``ca`` when given)."""
    code = _POSTER.format(failed_every=FAILED_EVERY, changed_every=CHANGED_EVERY, ports=ports, hosts=hosts,
                          seq=seq, resources=resources, concurrency=concurrency, seconds=seconds, token=token,
                          cafile=str(ca) if ca else None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def timed(client: httpx.Client, url: str, runs: int) -> tuple[list[float], httpx.Response]:
    times, r = [], None
    for _ in range(runs):
        started = time.perf_counter()
        r = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        r.raise_for_status()
    assert r is not None
    return times, r


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def db_bytes(store_url: str) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one())
    finally:
        engine.dispose()


def https(cfg: Path, home: Path) -> Path:
    """``cfg`` made to serve HTTPS with ``tls = "auto"``, its CA in ``home`` (made now, so every replica shares
    it: ``docs/server.md``, "Several replicas"); the CA's file."""
    from datum.config import load_settings
    from datum.fleet.tls import prepared

    text = cfg.read_text().replace("[server]\n", '[server]\ntls = "auto"\ntls_names = ["127.0.0.1"]\n', 1)
    cfg.write_text(f'home = "{home}"\n' + text)
    served = prepared(load_settings(cfg))
    assert served is not None and served.ca_file is not None
    return served.ca_file


def main(hosts: int = 1000, replicas: int = 1, resources: int = 50, concurrency: int = 16,
         burst_seconds: float = 300.0, read_runs: int = 20, tls: bool = False) -> dict[str, object]:
    from datum.fleet.listing import cursor_after

    with tempfile.TemporaryDirectory(prefix="datum-bench-fleet-") as tmp, \
            database("postgresql", Path(tmp)) as store_url, ExitStack() as stack:
        home = Path(tmp)
        cfg, operator, agent = prepare(home, store_url)
        ca = https(cfg, home) if tls else None
        scheme = "https" if tls else "http"
        ports = [free_port() for _ in range(replicas)]
        servers = []
        for n, port in enumerate(ports):
            log = stack.enter_context((home / f"serve-{n}.log").open("w"))
            server = subprocess.Popen(
                [sys.executable, "-c", "from datum.cli.main import main; main()", "serve", "--config", str(cfg),
                 "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
            )
            stack.callback(server.wait, 10)
            stack.callback(server.terminate)
            servers.append(server)
        base = f"{scheme}://127.0.0.1:{ports[0]}"
        for port, server in zip(ports, servers, strict=True):
            wait_ready(f"{scheme}://127.0.0.1:{port}/v1/hosts", operator, server, ca)
        filled = post(ports, agent, hosts, 1, resources, concurrency, ca=ca)
        sustained = post(ports, agent, hosts, 2, resources, concurrency, ca=ca)
        burst = post(ports, agent, hosts, 3, resources, concurrency, burst_seconds, ca=ca)
        reads: dict[str, object] = {}
        verify = ssl.create_default_context(cafile=ca) if ca else True
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {operator}"}, timeout=120,
                          verify=verify) as client:
            deep = cursor_after(f"host-{hosts // 2:06d}")
            for name, url in (("list_first", "/v1/hosts"), ("list_deep", f"/v1/hosts?cursor={deep}"),
                              ("list_failed", "/v1/hosts?state=failed"), ("overview", "/ui/overview")):
                times, r = timed(client, url, read_runs)
                if name == "list_first":  # every host there, the failed ones counted as such
                    doc = r.json()
                    assert doc["total"] == hosts, doc["total"]
                    assert doc["counts"].get("failed", 0) == len(range(0, hosts, FAILED_EVERY)), doc["counts"]
                reads[f"{name}_ms_median"] = round(median(times), 1)
                reads[f"{name}_ms_worst"] = round(max(times), 1)
            times, scrape = timed(client, "/metrics", max(1, read_runs // 4))
            reads["metrics_ms_median"] = round(median(times), 1)
            reads["metrics_bytes"] = len(scrape.content)
            reads["metrics_series"] = sum(1 for line in scrape.text.splitlines() if line and not line.startswith("#"))
        rss = [rss_mib(s.pid) for s in servers]
        size = db_bytes(store_url)
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "hosts": hosts,
        "replicas": replicas,
        "tls": tls,
        "resources": resources,
        "fill_rps": round(filled["rps"]),
        "intake_rps": round(sustained["rps"]),
        "intake_p50_ms": round(sustained["p50_ms"], 2),
        "intake_p99_ms": round(sustained["p99_ms"], 2),
        "burst_seconds_asked": burst_seconds,
        "burst_seconds": round(burst["seconds"], 1),
        "burst_p99_ms": round(burst["p99_ms"], 2),
        "errors": int(filled["errors"] + sustained["errors"] + burst["errors"]),
        **reads,
        "server_rss_mib": rss,
        "database_mib": round(size / 2**20, 1),
        "load_average": load(),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--resources", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=16, help="keep-alive connections posting reports")
    ap.add_argument("--burst-seconds", type=float, default=300.0, help="the restart burst: every host within this")
    ap.add_argument("--read-runs", type=int, default=20)
    ap.add_argument("--tls", action="store_true", help='over HTTPS: tls = "auto", every connection TLS')
    a = ap.parse_args()
    out = main(a.hosts, a.replicas, a.resources, a.concurrency, a.burst_seconds, a.read_runs, a.tls)
    print(json.dumps(out))
    kept_up = out["burst_seconds"] <= a.burst_seconds * 1.1 and out["errors"] == 0
    ok = kept_up and out["burst_p99_ms"] < TARGET_BURST_P99_MS
    print(
        f"fleet of {a.hosts} hosts on postgresql{' over TLS' if a.tls else ''}, {a.replicas} server(s): intake {out['intake_rps']} reports/s "
        f"(p99 {out['intake_p99_ms']} ms), restart burst in {out['burst_seconds']} s of {a.burst_seconds:g} "
        f"(p99 {out['burst_p99_ms']} ms; target under {TARGET_BURST_P99_MS:g}), listing {out['list_first_ms_median']} ms, "
        f"deep page {out['list_deep_ms_median']} ms, overview {out['overview_ms_median']} ms, /metrics "
        f"{out['metrics_ms_median']} ms ({out['metrics_series']} series), RSS {out['server_rss_mib']} MiB, "
        f"database {out['database_mib']} MiB, load {out['load_average']}: {'MEETS' if ok else 'MISSES'}"
    )
