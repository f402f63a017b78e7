#!/usr/bin/env python3
"""Benchmark: the fleet's server side, report intake, the host listing and the manifest.

Targets (issue 9, Performance): 10,000 simulated hosts posting one pass report
each (50 resources) to ``POST /v1/hosts/{host}/passes``: at least 500 reports/s
on one server process on PostgreSQL; ``GET /v1/hosts`` (a page of host summaries with
every state's count) with those 10,000 hosts in under 200 ms; ``GET /v1/hosts/{host}/manifest`` under 10 ms at p99 with 100
concurrent clients.

The server is ``datum serve`` in its own process on a fresh PostgreSQL database
(``_common.database``; ``--store sqlite`` for a file), scheduler and access log
off, pinned to CPU 0 with the load on CPU 1 when there are two. The reports come
from a small asyncio HTTP/1.1 client in a second process (``--concurrency``
keep-alive connections, bodies built before the clock starts), every one
answered 201 or it counts as an error; the token is an admin token (it speaks for every host; an agent's speaks for its own), so each post
goes through Cedar's ``fleet:ReportPass`` on its ``Host``. The listing's first page
with the fleet's counts is timed ``--list-runs`` times (median and worst, the
whole JSON body read), then one walk of every page of 1,000. The manifest
load is ``wrk`` when installed (else the Python client of ``bench_api``): ``--manifest-seconds`` of
full answers (200, the figure the target is judged on), then as long of what an agent that has the
manifest asks (``If-None-Match`` with its ETag: a bodiless 304), printed apart.
Run as ``.venv/bin/python bench/bench_intake.py [--hosts N] [--resources N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, database, header, load, median, verdict  # noqa: E402
from bench_api import free_port, pyload, wait_ready, wrk  # noqa: E402

TARGET_RPS = 500.0
TARGET_LIST_MS = 200.0
TARGET_MANIFEST_P99_MS = 10.0


def report(host: str, resources: int, seq: int = 1) -> dict[str, object]:
    """A converged pass of ``resources`` files, as ``datum agent`` posts it."""
    return {
        "host": host,
        "mode": "enforce",
        "state": "converged",
        "startedAt": "2026-11-30T08:00:00Z",
        "finishedAt": "2026-11-30T08:00:01Z",
        "durationSeconds": 1.0,
        "bootId": "b00t",
        "exitCode": 0,
        "passId": f"{host}-{seq}",
        "seq": seq,
        "counts": {"converged": resources},
        "resources": [
            {"id": f"File[/etc/app/{n}.conf]", "type": "File", "name": f"/etc/app/{n}.conf", "action": "none",
             "state": "converged", "durationSeconds": 0.001}
            for n in range(resources)
        ],
    }


def prepare(home: Path, store_url: str, rollout: str = "off") -> tuple[Path, str, str]:
    """A configuration with a fleet directory, an operator token and an admin token that reports for every
    host (an agent token speaks for one host only: one per simulated host would be as many tokens to mint); with staged
    rollouts (``[fleet.rollout]``, canary ``host-00001``) unless ``rollout`` is ``off``."""
    from datum.api.front import tokens
    from datum.config import load_settings
    from datum.store import open_store

    fleet = home / "fleet"
    fleet.mkdir()
    (fleet / "nodes.yaml").write_text("nodes:\n  - match: {name: '*'}\n    manifests: [web.yaml]\n")
    (fleet / "web.yaml").write_text(
        "resources:\n" + "".join(f"  - File[/etc/app/{n}.conf]:\n      content: \"{n}\\n\"\n" for n in range(50))
    )
    cfg = home / "datum.toml"
    cfg.write_text(
        f'store = "{store_url}"\n'
        "[server]\nscheduler = false\naccess_log = false\n"
        f'[fleet]\nmanifests = "{fleet}"\n'
        + ('[fleet.rollout]\ncanary = ["host-00001"]\nwaves = ["100%"]\n' if rollout != "off" else "")
    )
    store = open_store(load_settings(cfg).store_url)
    operator, agent = tokens.create(store, "operator"), tokens.create(store, "admin")
    store.dispose()
    return cfg, operator, agent


_POSTER = """
import asyncio, json, re, sys, time
sys.path.insert(0, {bench!r})
from bench_intake import report

async def client(hosts, lat, codes):
    reader, writer = await asyncio.open_connection({host!r}, {port})
    for request in hosts:
        started = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\\r\\n\\r\\n")
        length = int(re.search(rb"(?i)content-length: (\\d+)", head).group(1))
        await reader.readexactly(length)
        lat.append(time.perf_counter() - started)
        codes.append(int(head[9:12]))
    writer.close()

async def main():
    requests = []
    for i in range({hosts}):
        name = f"host-{{i:05d}}"
        body = json.dumps(report(name, {resources})).encode()
        requests.append(
            f"POST /v1/hosts/{{name}}/passes HTTP/1.1\\r\\nHost: {host}\\r\\nAuthorization: Bearer {token}\\r\\n"
            f"Content-Type: application/json\\r\\nContent-Length: {{len(body)}}\\r\\n\\r\\n".encode() + body
        )
    lat, codes = [], []
    t = time.perf_counter()
    await asyncio.gather(*[client(requests[k::{concurrency}], lat, codes) for k in range({concurrency})])
    took = time.perf_counter() - t
    lat.sort()
    print(json.dumps({{"reports": len(lat), "seconds": took, "rps": len(lat) / took,
                      "p50_ms": lat[len(lat) // 2] * 1000, "p99_ms": lat[int(len(lat) * 0.99)] * 1000,
                      "errors": sum(1 for c in codes if c != 201), "bytes": len(requests[0])}}))
asyncio.run(main())
"""


def post_reports(base: str, token: str, hosts: int, resources: int, concurrency: int, pin: list[str]) -> dict:
    url = httpx.URL(base)
    code = _POSTER.format(bench=str(Path(__file__).parent), host=url.host, port=url.port, token=token,
                          hosts=hosts, resources=resources, concurrency=concurrency)
    out = subprocess.run([*pin, sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def time_listing(base: str, token: str, runs: int) -> tuple[list[float], int, float, int]:
    """The first page with the fleet's counts (what the target names), ``runs`` times; then one walk of
    every page (default limit), timed whole: (times in ms, hosts counted, walk in ms, hosts walked)."""
    times, count = [], 0
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        for _ in range(runs):
            started = time.perf_counter()
            r = client.get(f"{base}/v1/hosts")
            times.append((time.perf_counter() - started) * 1000)
            r.raise_for_status()
            doc = r.json()
            count = doc["total"] if isinstance(doc, dict) else len(doc)  # a list before the paged listing
        if not isinstance(doc, dict):
            return times, count, 0.0, count
        walked, url, started = 0, f"{base}/v1/hosts?limit=1000", time.perf_counter()
        while url:
            doc = client.get(url).raise_for_status().json()
            walked += len(doc["hosts"])
            url = f"{base}/v1/hosts?limit=1000&cursor={doc['next']}" if "next" in doc else ""
        walk = (time.perf_counter() - started) * 1000
    return times, count, walk, walked


def main(hosts: int = 10_000, resources: int = 50, concurrency: int = 16, list_runs: int = 5,
         manifest_seconds: float = 10.0, manifest_concurrency: int = 100, store: str = "postgresql",
         pin: bool = True, rollout: str = "off") -> dict[str, object]:
    pinned = pin and bool(shutil.which("taskset")) and (os.cpu_count() or 1) >= 2
    server_pin = ["taskset", "-c", "0"] if pinned else []
    load_pin = ["taskset", "-c", "1"] if pinned else []
    with tempfile.TemporaryDirectory(prefix="datum-bench-intake-") as tmp, database(store, Path(tmp)) as store_url:
        home = Path(tmp)
        cfg, operator, agent = prepare(home, store_url, rollout)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = (home / "serve.log").open("w")
        server = subprocess.Popen(
            [*server_pin, sys.executable, "-c", "from datum.cli.main import main; main()", "serve", "--config",
             str(cfg), "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            wait_ready(f"{base}/v1/hosts", operator, server)
            warm = httpx.post(f"{base}/v1/hosts/warm-up/passes", json=report("warm-up", resources),
                              headers={"Authorization": f"Bearer {agent}"}, timeout=30)
            assert warm.status_code == 201, warm.text
            cpu = cpu_seconds(server.pid)
            intake = post_reports(base, agent, hosts, resources, concurrency, load_pin)
            intake_cpu, cpu = cpu_seconds(server.pid) - cpu, cpu_seconds(server.pid)
            listing, listed, walk_ms, walked = time_listing(base, operator, list_runs)
            manifest_url = f"{base}/v1/hosts/host-00000/manifest"
            probe = httpx.get(manifest_url, headers={"Authorization": f"Bearer {agent}"}, timeout=30)
            assert probe.status_code == 200, probe.text
            if rollout == "rolling":  # a new revision rolling out: host-00000 is held back, served the previous
                web = home / "fleet" / "web.yaml"
                web.write_text(web.read_text().replace('"0\\n"', '"changed\\n"'))
                deadline = time.monotonic() + 10
                while True:  # the server's watch sees the edit and starts the rollout
                    rollouts = httpx.get(f"{base}/v1/rollouts", headers={"Authorization": f"Bearer {operator}"}).json()
                    if rollouts["rollouts"] and rollouts["rollouts"][0]["state"] == "rolling":
                        break
                    assert time.monotonic() < deadline, rollouts
                    httpx.get(manifest_url, headers={"Authorization": f"Bearer {agent}"}, timeout=30)
                    time.sleep(0.2)
                probe = httpx.get(manifest_url, headers={"Authorization": f"Bearer {agent}"}, timeout=30)
                assert probe.status_code == 200 and probe.headers["datum-revision"] == rollouts["rollouts"][0]["previous"]
            revalidated: dict[str, float] = {}
            if shutil.which("wrk"):
                wrk(manifest_url, agent, manifest_concurrency, 2, load_pin)  # warm-up
                cpu = cpu_seconds(server.pid)
                manifest = wrk(manifest_url, agent, manifest_concurrency, manifest_seconds, load_pin)
                manifest_cpu, cpu = cpu_seconds(server.pid) - cpu, cpu_seconds(server.pid)
                # what an agent that has the manifest already asks: If-None-Match with its ETag, a bodiless 304
                etag = f"If-None-Match: {probe.headers['etag']}"
                revalidated = wrk(manifest_url, agent, manifest_concurrency, manifest_seconds, load_pin, (etag,))
                revalidated["cpu"] = cpu_seconds(server.pid) - cpu
            else:
                cpu = cpu_seconds(server.pid)
                manifest = pyload(manifest_url, agent, manifest_concurrency, int(manifest_seconds * 1000), load_pin)
                manifest_cpu = cpu_seconds(server.pid) - cpu
        finally:
            server.terminate()
            server.wait(10)
            log.close()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "store": store,
        "rollout": rollout,
        "cores": os.cpu_count(),
        "pinned": pinned,
        "hosts": hosts,
        "resources": resources,
        "report_bytes": intake["bytes"],
        "concurrency": concurrency,
        "reports": intake["reports"],
        "errors": intake["errors"],
        "reports_per_s": round(intake["rps"]),
        "post_p50_ms": round(intake["p50_ms"], 2),
        "post_p99_ms": round(intake["p99_ms"], 2),
        "server_cpu_ms_per_report": round(intake_cpu * 1000 / max(1, intake["reports"]), 3),
        "listed": listed,
        "list_ms_median": round(median(listing), 1),
        "list_ms_worst": round(max(listing), 1),
        "walk_ms": round(walk_ms, 1),
        "walked": walked,
        "manifest_concurrency": manifest_concurrency,
        "manifest_requests": manifest["requests"],
        "manifest_errors": manifest["errors"],
        "manifest_p50_ms": round(float(manifest["p50_ms"]), 2),
        "manifest_p99_ms": round(float(manifest["p99_ms"]), 2),
        "server_cpu_us_per_manifest": round(manifest_cpu * 1e6 / max(1, int(manifest["requests"])), 1),
        "manifest_rps": round(manifest["requests"] / manifest_seconds),
        "manifest_304_p50_ms": round(float(revalidated.get("p50_ms", 0)), 2),
        "manifest_304_p99_ms": round(float(revalidated.get("p99_ms", 0)), 2),
        "manifest_304_rps": round(revalidated.get("requests", 0) / manifest_seconds),
        "manifest_304_errors": revalidated.get("errors", 0),
        "server_cpu_us_per_304": round(revalidated.get("cpu", 0) * 1e6 / max(1, int(revalidated.get("requests", 0))), 1),
        "load_average": load(),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--resources", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=16, help="keep-alive connections posting reports")
    ap.add_argument("--list-runs", type=int, default=5)
    ap.add_argument("--manifest-seconds", type=float, default=10.0)
    ap.add_argument("--store", choices=["sqlite", "postgresql"], default="postgresql")
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--rollout", choices=["off", "done", "rolling"], default="off",
                    help="[fleet.rollout] configured: none under way (done), or one rolling with the host held back")
    a = ap.parse_args()
    print(header(f"report intake, host listing, manifest on {a.store}"))
    r = main(a.hosts, a.resources, a.concurrency, a.list_runs, a.manifest_seconds, 100, a.store, not a.no_pin,
             a.rollout)
    for key, value in r.items():
        print(f"{key:>22}: {value}")
    ok_rps = float(r["reports_per_s"]) >= TARGET_RPS and not r["errors"]  # type: ignore[arg-type]
    ok_list = float(r["list_ms_median"]) < TARGET_LIST_MS and r["listed"] == a.hosts + 1  # type: ignore[arg-type]
    ok_manifest = float(r["manifest_p99_ms"]) < TARGET_MANIFEST_P99_MS and not r["manifest_errors"]  # type: ignore[arg-type]
    print(f"fleet on {a.store}, {a.hosts} hosts x {a.resources} resources: {r['reports_per_s']} reports/s "
          f"({r['errors']} errors; target 500: {verdict(ok_rps)}), GET /v1/hosts {r['list_ms_median']} ms "
          f"(target 200: {verdict(ok_list)}), manifest p99 {r['manifest_p99_ms']} ms at 100 concurrent "
          f"(304s: {r['manifest_304_p99_ms']} ms) "
          f"(target 10: {verdict(ok_manifest)}), load {load()}: {verdict(ok_rps and ok_list and ok_manifest)}")
