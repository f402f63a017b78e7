#!/usr/bin/env python3
"""Benchmark: the drift endpoint under load, and the server's memory over 100,000 requests.

Target (issue 14): with 10,000 diverged items and ``driftCap`` 500, ``GET
/v1/observability/admin/reconcilers/buckets/drift`` answers in under 20 ms at
the 99th percentile under 100 concurrent requests on loopback, measured by a
load tool in a second process, with one server on SQLite and with two
replicas on one PostgreSQL database (``--store postgresql --replicas 2``: the
connections are split between them, one wrk per replica, and the p99 is the
worse of the two); the server's RSS stays flat over 100,000 requests (issue 4).

The server is ``datum serve`` in its own process (scheduler off, so no pass
competes for the two cores; access log off unless ``--access-log``), pinned to
CPU 0 with the load on CPU 1 unless ``--no-pin``. The load comes from ``wrk``
(Debian package ``wrk``) when installed, else from a small asyncio HTTP/1.1
client in a second Python process.

The p99 is taken over one run of at least ``--requests`` requests (the whole
measurement, as a percentile is meant). This machine is a shared VM: now and
then it stops the server for a few hundred milliseconds whatever it runs (a
bare ASGI app shows the same pauses), and a short round that happens to hold
one reports that pause as its p99. ``--rounds N`` splits the run to show how
much; the load average is printed with the result. Prints the measured numbers;
run as ``.venv/bin/python bench/bench_api.py [--items N] [--requests N] [--concurrency C]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, database, header, verdict  # noqa: E402

PATH = "/v1/observability/admin/reconcilers/buckets/drift"
TARGET_P99_MS = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepare(home: Path, items: int, cap: int, access_log: bool, store_url: str) -> tuple[Path, str]:
    """A store whose buckets reconciler has ``items`` diverged items (all awaiting confirmation)."""
    from datum.api.front import tokens
    from datum.config import load_settings
    from datum.plugins import load
    from datum.reconcile.runner import Runner
    from datum.reconcilers import buckets as b
    from datum.store import open_store

    cfg = home / "datum.toml"
    cfg.write_text(
        f'store = "{store_url}"\n'
        "[reconcilers.buckets]\n"
        f'root = "{home / "buckets"}"\n'
        f"confirmation_ticks = 1000\ndrift_cap = {cap}\n"
        f"breaker = {{ restore = {items * 2}, reap = 10, align = {items * 2} }}\n"
        "[server]\nscheduler = false\n"
        f"access_log = {'true' if access_log else 'false'}\n"
    )
    settings = load_settings(cfg)
    store = open_store(settings.store_url)
    store.require(b.BRANCH)
    now = datetime.now(UTC)
    with store.begin() as conn:
        conn.execute(
            sa.insert(b.buckets),
            [{"name": f"bucket-{n:06d}", "status": b.CREATING, "created_at": now, "updated_at": now} for n in range(items)],
        )
    tick = Runner(load().registry(), settings, store).tick(b.NAME)
    assert tick.drift == items, tick
    token = tokens.create(store, "operator")
    store.dispose()
    return cfg, token


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


# -- load generators ---------------------------------------------------------------


def wrk(
    url: str, token: str, concurrency: int, seconds: float, pin: list[str], headers: tuple[str, ...] = ()
) -> dict[str, float]:
    """One wrk run (one load thread: enough, and it leaves the server a core); p50/p99 in ms, errors.
    ``headers`` are more request headers (``If-None-Match: "..."``)."""
    more = [arg for h in headers for arg in ("-H", h)]
    out = subprocess.run(
        [*pin, "wrk", "-t1", f"-c{concurrency}", f"-d{seconds:.0f}s", "--latency", "--timeout", "5s",
         "-H", f"Authorization: Bearer {token}", *more, url],
        capture_output=True, text=True, check=True,
    ).stdout
    def ms(label: str) -> float:
        m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        if not m:
            raise RuntimeError(f"no {label}% in wrk output:\n{out}")
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "requests": total,
        "p50_ms": ms("50"),
        "p99_ms": ms("99"),
        "errors": (int(non2xx.group(1)) if non2xx else 0) + (sum(int(g) for g in errors.groups()) if errors else 0),
        "rps": total / seconds,
    }


async def _client(host: str, port: int, request: bytes, count: int, latencies: list[float]) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    errors = 0
    for _ in range(count):
        started = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
        await reader.readexactly(length)
        latencies.append(time.perf_counter() - started)
        if not head.startswith(b"HTTP/1.1 200"):
            errors += 1
    writer.close()
    return errors


def pyload(url: str, token: str, concurrency: int, requests: int, pin: list[str]) -> dict[str, float]:
    """The fallback load tool: ``concurrency`` keep-alive connections in a second process."""
    u = httpx.URL(url)
    code = f"""
import asyncio, json, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from bench_api import _client
async def main():
    lat = []
    req = b"GET {u.raw_path.decode()} HTTP/1.1\\r\\nHost: {u.host}\\r\\nAuthorization: Bearer {token}\\r\\n\\r\\n"
    t = time.perf_counter()
    errs = await asyncio.gather(*[_client({u.host!r}, {u.port}, req, {max(1, requests // concurrency)}, lat) for _ in range({concurrency})])
    took = time.perf_counter() - t
    lat.sort()
    print(json.dumps({{"requests": len(lat), "p50_ms": lat[len(lat)//2]*1000, "p99_ms": lat[int(len(lat)*0.99)]*1000,
                      "errors": sum(errs), "rps": len(lat)/took}}))
asyncio.run(main())
"""
    out = subprocess.run([*pin, sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def wait_ready(url: str, token: str, server: subprocess.Popen[bytes], ca: Path | None = None,
               timeout: float = 60) -> httpx.Response:
    """The first 200 of ``url`` within ``timeout`` seconds; over https, trusting the CA file ``ca`` once the server
    has made it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            verify = ssl.create_default_context(cafile=ca) if ca is not None else True
            r = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=5, verify=verify)
            if r.status_code == 200:
                return r
        except (httpx.TransportError, FileNotFoundError):  # FileNotFoundError: the CA is not made yet
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            raise RuntimeError("the server did not start")
        time.sleep(0.1)


def combine(parts: list[dict[str, float]]) -> dict[str, float]:
    """Runs against several replicas at once: requests and rates add up; the worse p50 and p99 count."""
    return {
        "requests": sum(p["requests"] for p in parts),
        "p50_ms": max(p["p50_ms"] for p in parts),
        "p99_ms": max(p["p99_ms"] for p in parts),
        "errors": sum(p["errors"] for p in parts),
        "rps": sum(p["rps"] for p in parts),
    }


def parallel(fn, urls: list[str], shares: list[int]) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(urls)) as pool:
        return combine(list(pool.map(fn, urls, shares)))


# -- the benchmark -----------------------------------------------------------------


def main(items: int = 10_000, cap: int = 500, requests: int = 100_000, concurrency: int = 100,
         access_log: bool = False, tool: str | None = None, rounds: int = 1, pin: bool = True,
         store: str = "sqlite", replicas: int = 1) -> dict[str, object]:
    tool = tool or ("wrk" if shutil.which("wrk") else "python")
    # Server on CPU 0, load on CPU 1: the two processes do not steal each other's core.
    pinned = pin and bool(shutil.which("taskset")) and (os.cpu_count() or 1) >= 2
    server_pin = ["taskset", "-c", "0"] if pinned else []
    load_pin = ["taskset", "-c", "1"] if pinned else []
    with tempfile.TemporaryDirectory(prefix="datum-bench-api-") as tmp, database(store, Path(tmp)) as store_url:
        home = Path(tmp)
        cfg, token = prepare(home, items, cap, access_log, store_url)
        ports = [free_port() for _ in range(replicas)]
        log = (home / "serve.log").open("w")
        servers = [
            subprocess.Popen(
                [*server_pin, sys.executable, "-c", "from datum.cli.main import main; main()", "serve", "--config",
                 str(cfg), "--port", str(port)],
                stdout=log, stderr=subprocess.STDOUT,
            )
            for port in ports
        ]
        urls = [f"http://127.0.0.1:{port}{PATH}" for port in ports]
        # the connections split between the replicas, as a balancer in front of them would
        shares = [concurrency // replicas + (1 if k < concurrency % replicas else 0) for k in range(replicas)]
        try:
            for url, server in zip(urls, servers, strict=True):
                r = wait_ready(url, token, server)
            body = r.json()
            shape = {"drift": body["drift"], "items": len(body["items"]), "dropped": body["dropped"],
                     "driftCap": body["driftCap"], "body_bytes": len(r.content)}
            # warm up, then measure in rounds until `requests` requests have been served
            per_round = max(concurrency, requests // rounds)
            if tool == "python":
                def run(n: int) -> dict[str, float]:
                    return combine([pyload(u, token, c, n // replicas, load_pin) for u, c in zip(urls, shares, strict=True)])
                run(per_round // 5)
            else:
                probe = parallel(lambda u, c: wrk(u, token, c, 3, load_pin), urls, shares)  # warm-up, and the rate
                # rounds of 5 s at least: a short run measures connection set-up, not the endpoint
                # (15 % over the warm-up's rate, so a round rarely falls short and needs another)
                seconds = max(5.0, 1.15 * per_round / max(probe["rps"], 1))
                def run(n: int) -> dict[str, float]:
                    return parallel(lambda u, c: wrk(u, token, c, seconds, load_pin), urls, shares)
            rss = [sum(rss_kib(s.pid) for s in servers)]
            cpu = sum(cpu_seconds(s.pid) for s in servers)
            results = []
            served = 0
            while served < requests:
                res = run(per_round)
                results.append(res)
                served += int(res["requests"])
                rss.append(sum(rss_kib(s.pid) for s in servers))
            cpu = sum(cpu_seconds(s.pid) for s in servers) - cpu
        finally:
            for server in servers:
                server.terminate()
            for server in servers:
                server.wait(10)
            log.close()
    p99s = [float(r["p99_ms"]) for r in results]
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "tool": tool,
        "cores": os.cpu_count(),
        **shape,
        "concurrency": concurrency,
        "requests": served,
        "errors": sum(int(r["errors"]) for r in results),
        "rps": round(sum(float(r["rps"]) for r in results) / len(results)),
        "p50_ms": round(max(float(r["p50_ms"]) for r in results), 2),
        "p99_ms": round(max(p99s), 2),  # over the whole run when it is one round
        "server_cpu_us_per_request": round(cpu * 1e6 / max(1, served), 1),  # every replica's
        "p99_ms_median_round": round(sorted(p99s)[len(p99s) // 2], 2),
        "p99_ms_worst_round": round(max(p99s), 2),
        "p99_ms_per_round": [round(p, 2) for p in p99s],
        "rss_mib_per_round": [round(k / 1024, 1) for k in rss],
        "rss_growth_mib": round((rss[-1] - rss[1]) / 1024, 1),
        "access_log": access_log,
        "store": store,
        "replicas": replicas,
        "pinned": pinned,
        "load_average": os.getloadavg()[0],
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--cap", type=int, default=500)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--access-log", action="store_true")
    ap.add_argument("--tool", choices=["wrk", "python"])
    ap.add_argument("--rounds", type=int, default=1, help="split the run into N rounds (default: one)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the server and the load to separate cores")
    ap.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--replicas", type=int, default=1, help="servers on the one store, the connections split")
    a = ap.parse_args()
    print(header(f"drift endpoint, {a.replicas} replica(s) on {a.store}"))
    result = main(a.items, a.cap, a.requests, a.concurrency, a.access_log, a.tool, a.rounds, not a.no_pin,
                  a.store, a.replicas)
    for key, value in result.items():
        print(f"{key:>20}: {value}")
    p99 = float(result["p99_ms"])  # type: ignore[arg-type]
    ok = p99 < TARGET_P99_MS and not result["errors"]
    print(f"drift endpoint, {a.replicas} replica(s) on {a.store}, {a.concurrency} concurrent: p99 {p99:.1f} ms "
          f"(p50 {result['p50_ms']} ms, {result['rps']} requests/s, {result['requests']} requests, "
          f"{result['errors']} errors), load {os.getloadavg()[0]:.2f}; target p99 under {TARGET_P99_MS:g} ms: "
          f"{verdict(ok)}")
