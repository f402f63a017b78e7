#!/usr/bin/env python3
"""Benchmark: what the audit log's row costs a pass report's intake (issue 37: under 10%).

Every pass report (``POST /v1/hosts/{host}/passes``) is an acting request: its audit row
(``datum.store.audit.record``: the chain's head row locked and updated, the row inserted, in the report's own
transaction) is written with the pass. Here ``datum serve`` takes ``--hosts`` reports of ``--resources``
resources each (``bench_intake``'s poster, ``--concurrency`` keep-alive connections, an agent token),
alternately as it ships and with the intake's audit row left out (the server started with
``datum.api.front.guard.ACTING`` emptied: the only way to do without it, for this comparison), ``--runs`` times
each on a fresh database, server pinned to CPU 0 and the load to CPU 1. The figures: the server's CPU per
report (what a busy machine does not stretch) and reports/s, medians; the verdict on the CPU's increase.
Run as ``.venv/bin/python bench/bench_audit.py [--store sqlite|postgresql]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, database, header, load, median, verdict  # noqa: E402
from bench_api import free_port, wait_ready  # noqa: E402
from bench_intake import post_reports, prepare, report  # noqa: E402

TARGET = 0.10  # the audit row's share of a report's server CPU

# ``datum serve`` as shipped, or with no acting request's row (the intake's among them).
SERVE = "from datum.cli.main import main; main()"
SERVE_UNAUDITED = "import datum.api.front.guard as g; g.ACTING = frozenset(); from datum.cli.main import main; main()"


def run(store: str, audited: bool, hosts: int, resources: int, concurrency: int, pin: bool) -> dict[str, float]:
    pinned = pin and bool(shutil.which("taskset")) and (os.cpu_count() or 1) >= 2
    server_pin = ["taskset", "-c", "0"] if pinned else []
    load_pin = ["taskset", "-c", "1"] if pinned else []
    with tempfile.TemporaryDirectory(prefix="datum-bench-audit-") as tmp, database(store, Path(tmp)) as store_url:
        home = Path(tmp)
        cfg, operator, agent = prepare(home, store_url)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = (home / "serve.log").open("w")
        server = subprocess.Popen(
            [*server_pin, sys.executable, "-c", SERVE if audited else SERVE_UNAUDITED, "serve", "--config", str(cfg),
             "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            wait_ready(f"{base}/v1/hosts", operator, server)
            warm = httpx.post(f"{base}/v1/hosts/warm-up/passes", json=report("warm-up", resources),
                              headers={"Authorization": f"Bearer {agent}"}, timeout=30)
            assert warm.status_code == 201, warm.text
            cpu = cpu_seconds(server.pid)
            intake = post_reports(base, agent, hosts, resources, concurrency, load_pin)
            used = cpu_seconds(server.pid) - cpu
        finally:
            server.terminate()
            server.wait(10)
            log.close()
        rows = _rows(store_url)
    expected = intake["reports"] + 1 if audited else 0  # the warm-up's too
    assert rows >= expected and (audited or rows == 0), (audited, rows, expected)
    return {"cpu_ms": used * 1000 / max(1, intake["reports"]), "rps": intake["rps"], "errors": intake["errors"],
            "p99_ms": intake["p99_ms"], "rows": rows}


def _rows(store_url: str) -> int:
    """The audit rows of the intake (the tokens' rows left out)."""
    import sqlalchemy as sa

    from datum.store import open_store
    from datum.store.schema import audit_log

    store = open_store(store_url)
    try:
        with store.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(audit_log)
                                    .where(audit_log.c.action == "fleet:ReportPass")).scalar_one())
    finally:
        store.dispose()


def main(store: str = "postgresql", hosts: int = 3000, resources: int = 50, concurrency: int = 16, runs: int = 3,
         pin: bool = True) -> dict[str, object]:
    off: list[dict[str, float]] = []
    on: list[dict[str, float]] = []
    for _ in range(runs):  # alternated, so a change of the machine's load falls on both
        off.append(run(store, False, hosts, resources, concurrency, pin))
        on.append(run(store, True, hosts, resources, concurrency, pin))
    cpu_off, cpu_on = median([r["cpu_ms"] for r in off]), median([r["cpu_ms"] for r in on])
    rps_off, rps_on = median([r["rps"] for r in off]), median([r["rps"] for r in on])
    return {
        "store": store, "hosts": hosts, "resources": resources, "concurrency": concurrency, "runs": runs,
        "cpu_ms_per_report_unaudited": [round(r["cpu_ms"], 3) for r in off],
        "cpu_ms_per_report_audited": [round(r["cpu_ms"], 3) for r in on],
        "reports_per_s_unaudited": [round(r["rps"]) for r in off],
        "reports_per_s_audited": [round(r["rps"]) for r in on],
        "p99_ms_unaudited": [round(r["p99_ms"], 1) for r in off],
        "p99_ms_audited": [round(r["p99_ms"], 1) for r in on],
        "errors": sum(int(r["errors"]) for r in off + on),
        "cpu_increase": round(cpu_on / cpu_off - 1, 4),
        "rps_decrease": round(1 - rps_on / rps_off, 4),
        "load_average": load(),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", choices=["sqlite", "postgresql"], default="postgresql")
    ap.add_argument("--hosts", type=int, default=3000)
    ap.add_argument("--resources", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-pin", action="store_true")
    a = ap.parse_args()
    print(header(f"the audit row's cost on report intake, {a.store}"))
    r = main(a.store, a.hosts, a.resources, a.concurrency, a.runs, not a.no_pin)
    for key, value in r.items():
        print(f"{key:>28}: {value}")
    ok = float(r["cpu_increase"]) < TARGET and not r["errors"]  # type: ignore[arg-type]
    print(f"audit row on intake ({a.store}, {a.hosts} reports x {a.resources} resources, {a.runs} runs each): "
          f"server CPU per report +{float(r['cpu_increase']) * 100:.1f}% (target under {TARGET * 100:.0f}%: "
          f"{verdict(ok)}), reports/s -{float(r['rps_decrease']) * 100:.1f}%, load {load()}: {verdict(ok)}")
