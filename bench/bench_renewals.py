#!/usr/bin/env python3
"""Benchmark: the server's CPU for a renewal storm, hosts renewing their sessions from their keys (issue 38).

An enrolled agent has a session for ``[enroll] session_ttl`` (1 h) and renews it at a
random point between 50% and 80% of its life (``datum.agent.identity.Session``): a
GET of a nonce and a POST of its signature, each over a connection of its own (the
agent's ``datum.bounded`` opens one per request), so each renewal costs the server
two TLS handshakes, an Ed25519 verification, the nonce taken once
(``spent_nonces``) and a session written. The worst minute is a fleet that started
at once (a data centre powered on, a server back after an outage that outlived
the sessions): every first renewal then falls between 30 and 48 min later.

The server is a real ``datum serve`` over TLS (``tls = "auto"``) on PostgreSQL,
with ``--identities`` hosts enrolled (their identities written to the store, each
with a key of its own); ``--concurrency`` threads renew through the agent's own
``Session`` (each renewal a fresh ``Session``: one nonce, one session), each
identity ``--rounds`` times. Measured: the server's CPU seconds (``/proc``, user
+ system, what a loaded machine does not stretch) per renewal, and the renewals
per second reached. Then the storm: ``--fleet`` identities' first renewals drawn
as the agent draws them (uniform in 50-80% of the life), counted per minute; the
peak minute times the CPU per renewal is the share of one core the storm needs.

``--http`` serves plain HTTP on loopback instead: what TLS adds, by difference.

Run as ``./scripts/bench renewals [--identities 500 --rounds 4 --concurrency 8 --fleet 100000 --http]``: one JSON
line of figures, then the verdict (target: the peak minute of 100,000 identities within one core).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, database, header, load, verdict  # noqa: E402
from bench_api import free_port, wait_ready  # noqa: E402
from bench_fleet import https  # noqa: E402

TARGET_CORE_SHARE = 1.0  # the storm's peak minute within one core of the server


def enrolled(store_url: str, count: int) -> tuple[list[tuple[str, object]], str]:
    """``count`` active identities written to the store, each with its own Ed25519 key: [(host, key)]; an operator
    token for the readiness check."""
    import sqlalchemy as sa
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from datum.agent.identity import public_of
    from datum.api.front import tokens
    from datum.identity import b64, fingerprint
    from datum.store import open_store
    from datum.store.schema import host_identities

    store = open_store(store_url)
    now = datetime.now(UTC)
    hosts = [(f"host-{n:06d}", Ed25519PrivateKey.generate()) for n in range(count)]
    rows = [{"host": name, "public_key": b64(public_of(key)), "fingerprint": fingerprint(public_of(key)),
             "state": "active", "reason": "bench", "created_at": now, "changed_at": now} for name, key in hosts]
    with store.begin() as conn:
        conn.execute(sa.insert(host_identities), rows)
    token = tokens.create(store, "operator")
    store.dispose()
    return hosts, token


def peak_minute(fleet: int, life: float, seed: int = 38) -> int:
    """The most first renewals in one minute of ``fleet`` identities whose sessions all began at once, each
    renewing at a uniform point of 50-80% of ``life`` seconds (as ``Session`` draws it)."""
    from datum.agent.identity import RENEW_FROM, RENEW_TO

    draw = random.Random(seed)
    minutes = Counter(int(draw.uniform(RENEW_FROM, RENEW_TO) * life // 60) for _ in range(fleet))
    return max(minutes.values())


def main(identities: int = 500, rounds: int = 4, concurrency: int = 8, fleet: int = 100_000,
         life: float = 3600.0, tls: bool = True) -> dict[str, object]:
    from datum.agent.identity import RENEW_FROM, RENEW_TO, Session
    from datum.trust import Trust

    with tempfile.TemporaryDirectory(prefix="datum-bench-renewals-") as tmp, \
            database("postgresql", Path(tmp)) as store_url, ExitStack() as stack:
        home = Path(tmp)
        cfg = home / "datum.toml"
        cfg.write_text(f'store = "{store_url}"\n[server]\nscheduler = false\naccess_log = false\n'
                       f'[enroll]\nsession_ttl = "{int(life)}s"\n')
        ca = https(cfg, home) if tls else None
        hosts, operator = enrolled(store_url, identities)
        port = free_port()
        log = stack.enter_context((home / "serve.log").open("w"))
        server = subprocess.Popen([sys.executable, "-c", "from datum.cli.main import main; main()", "serve",
                                   "--config", str(cfg), "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
        stack.callback(server.wait, 10)
        stack.callback(server.terminate)
        url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        wait_ready(f"{url}/v1/hosts", operator, server, ca)
        trust = Trust(ca_file=str(ca) if ca else None)
        Session(url, hosts[0][0], hosts[0][1], trust=trust).bearer()  # warm: imports, pools, the nonce secret

        def renew(which: tuple[str, object]) -> float:
            began = time.perf_counter()
            Session(url, which[0], which[1], trust=trust).bearer()
            return time.perf_counter() - began

        work = [h for _ in range(rounds) for h in hosts]
        cpu_before, began = cpu_seconds(server.pid), time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            latencies = sorted(pool.map(renew, work))
        wall, cpu = time.perf_counter() - began, cpu_seconds(server.pid) - cpu_before
    per = cpu / len(work)
    peak = peak_minute(fleet, life)
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "cores": os.cpu_count(),
        "tls": tls,
        "identities": identities,
        "renewals": len(work),
        "concurrency": concurrency,
        "renewals_per_s": round(len(work) / wall, 1),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 1),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 1),
        "server_cpu_ms_per_renewal": round(per * 1000, 2),
        "fleet": fleet,
        "session_ttl_s": life,
        "peak_minute_renewals": peak,
        "peak_minute_core_share": round(peak * per / 60, 3),
        "steady_renewals_per_s": round(fleet / (life * (RENEW_FROM + RENEW_TO) / 2), 1),  # the mean interval
        "load_average": load(),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--identities", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=4, help="renewals per identity")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--fleet", type=int, default=100_000, help="identities of the storm the figures are scaled to")
    ap.add_argument("--http", action="store_true", help="plain HTTP on loopback: what TLS adds, by difference")
    a = ap.parse_args()
    print(header("renewals"), file=sys.stderr)
    out = main(a.identities, a.rounds, a.concurrency, a.fleet, tls=not a.http)
    print(json.dumps(out))
    share = float(out["peak_minute_core_share"])  # type: ignore[arg-type]
    print(f"renewal storm of {a.fleet} identities: peak minute {out['peak_minute_renewals']} renewals, "
          f"{out['server_cpu_ms_per_renewal']} ms of server CPU each: {share:.0%} of one core "
          f"{verdict(share <= TARGET_CORE_SHARE)} (target: within one core)")
