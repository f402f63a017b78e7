#!/usr/bin/env python3
"""Benchmark: how long a manifest change takes to reach every waiting agent, and what the waits cost.

Targets (issue 23, item 4): 10,000 agents holding their long poll on
``GET /v1/hosts/{host}/manifest?wait=N`` against one ``datum serve``: every one
has fetched the changed manifest within 10 s of the change on disk; under
20 KiB of server memory per waiting agent; the server's CPU while they wait
and nothing changes under 5% of one core.

The server is a real ``datum serve`` (scheduler and access log off) on a
fleet directory whose ``nodes.yaml`` gives every host one manifest of
``--resources`` files; ``--replicas 2`` starts two on one PostgreSQL database
and one fleet directory, the agents split between them. The agents are
simulated: one asyncio process of ``--agents`` plain HTTP/1.1 connections
(``_AGENTS`` below), each a host of its own (``host-00042``) with one admin
token (an agent's speaks for its own host only), so every request goes through the front door and Cedar. Each
fetches its manifest, then at once holds ``wait=`` the agent's own
(``datum.agent.push.WAIT``) with ``If-None-Match``, asking again on a 304
and after a 200; its first wait is a random part of that, so the waits end
spread out as in a fleet that has run a while. With every wait held: the
servers' RSS over their RSS before the first agent, per agent; their CPU over
``--idle`` seconds. Then ``--changes`` times: a manifest file is rewritten and
the time from just before the write to the last agent having read the whole
new answer is taken (the agents' clocks are this machine's). Servers pinned to
CPU 0 and the agents to CPU 1 when there are two.

With ``--tls`` the server speaks HTTPS (``[server] tls = "auto"``, its CA and certificate made in the
benchmark's directory) and each agent's connection is TLS, trusting that CA: what a held poll costs over
TLS (issue 38's target: under 40 KiB of server memory per held poll).

Run as ``./scripts/bench propagation [--agents N] [--replicas 2 --store postgresql] [--tls]``: one JSON
line of figures, then the verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, database, header, load, median, verdict  # noqa: E402
from bench_api import free_port, wait_ready  # noqa: E402

TARGET_SECONDS = 10.0
TARGET_KIB_PER_AGENT = 20.0
TARGET_KIB_PER_AGENT_TLS = 40.0
TARGET_IDLE_CPU = 0.05


def manifest(resources: int, version: int) -> str:
    return "resources:\n" + "".join(
        f"  - File[/etc/app/{n}.conf]:\n      content: \"{n} v{version}\\n\"\n" for n in range(resources)
    )


def prepare(home: Path, store_url: str, resources: int, tls: bool = False) -> tuple[Path, str, str]:
    """A configuration with a fleet directory (over HTTPS with ``tls``: the server's own CA, made in ``home``),
    an operator token and an admin token that reports for every host (an agent token speaks for one host
    only: one per simulated host would be as many tokens to mint)."""
    from datum.api.front import tokens
    from datum.config import load_settings
    from datum.store import open_store

    fleet = home / "fleet"
    fleet.mkdir()
    (fleet / "nodes.yaml").write_text("nodes:\n  - match: {name: '*'}\n    manifests: [web.yaml]\n")
    (fleet / "web.yaml").write_text(manifest(resources, 0))
    cfg = home / "datum.toml"
    https = 'tls = "auto"\ntls_names = ["127.0.0.1"]\n' if tls else ""
    cfg.write_text(
        f'home = "{home}"\nstore = "{store_url}"\n[server]\nscheduler = false\naccess_log = false\n{https}'
        f'[fleet]\nmanifests = "{fleet}"\n'
    )
    store = open_store(load_settings(cfg).store_url)
    operator, agent = tokens.create(store, "operator"), tokens.create(store, "admin")
    store.dispose()
    return cfg, operator, agent


# The simulated agents: one process, one asyncio connection each. Reads a line on stdin per change
# made, prints JSON lines: {"held": n}, then one {"round": k, ...} per change.
_AGENTS = r"""
import asyncio, json, random, re, resource, ssl, sys, time

PORTS, TOKEN, N, WAIT, CAFILE = {ports!r}, {token!r}, {agents}, {wait}, {cafile!r}
SSL = ssl.create_default_context(cafile=CAFILE) if CAFILE else None  # --tls: the server's own CA
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
LENGTH = re.compile(rb"(?i)content-length: *(\d+)")
ETAG = re.compile(rb'(?i)etag: *("[^"]*")')
digests = {{}}      # agent -> the digest it has
fetched = {{}}      # digest -> [time each agent read it]
errors = []
dropped = []       # waits whose connection closed under them (asked again on a new one)

def request(host, etag, wait):
    q = "" if wait is None else f"?wait={{wait}}"
    inm = "" if etag is None else f"If-None-Match: {{etag}}\r\n"
    return (f"GET /v1/hosts/{{host}}/manifest{{q}} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {{TOKEN}}\r\n"
            f"{{inm}}\r\n").encode()

async def answer(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    m = LENGTH.search(head)
    body = await reader.readexactly(int(m.group(1))) if m else b""
    e = ETAG.search(head)
    return status, (e.group(1).decode() if e else None), body

async def connect(i, host):
    # a connection and the manifest's first answer, tried again (a busy server's backlog overflows)
    for attempt in range(20):
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", PORTS[i % len(PORTS)], ssl=SSL), 30)
            writer.write(request(host, None, None))
            status, etag, _ = await asyncio.wait_for(answer(reader), 60)
            if status == 200:
                return reader, writer, etag
            errors.append(status)
            return None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
            await asyncio.sleep(0.2 * (attempt + 1))
    errors.append("connect")
    return None

async def agent(i, held):
    host = f"host-{{i:05d}}"
    try:
        got = await connect(i, host)
    finally:
        held.append(i)
    if got is None:
        return
    reader, writer, etag = got
    digests[i] = etag
    wait = random.randint(1, WAIT)  # a fleet that has run a while: the waits end spread out
    while True:  # held at once: an idle keep-alive connection would be closed by the server
        writer.write(request(host, etag, wait))
        try:
            status, got, body = await answer(reader)
        except (asyncio.IncompleteReadError, ConnectionError):  # closed under it: as an agent, a new connection
            dropped.append(i)
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", PORTS[i % len(PORTS)], ssl=SSL)
            except OSError:
                errors.append("reconnect")
                return
            continue
        wait = WAIT
        if status == 200 and got != etag:
            fetched.setdefault(got, []).append(time.time())
            etag = got
        elif status not in (200, 304):
            errors.append(status)
            return

async def main():
    held = []
    tasks = []
    for start in range(0, N, 200):  # connect in batches: the listen backlog is finite
        tasks += [asyncio.create_task(agent(i, held)) for i in range(start, min(N, start + 200))]
        while len(held) < len(tasks):
            await asyncio.sleep(0.01)
    await asyncio.sleep(1)
    print(json.dumps({{"held": len(held) - len(errors), "errors": len(errors)}}), flush=True)
    loop = asyncio.get_running_loop()
    rounds = 0
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line.strip():
            break
        rounds += 1
        give_up = time.monotonic() + 120
        while time.monotonic() < give_up:  # every agent has read a digest that arrived after the change
            done = [d for d, ts in fetched.items() if len(ts) >= N]
            if done or errors:
                break
            await asyncio.sleep(0.01)
        last = max(fetched.values(), key=len, default=[])  # short of N: the round gave up
        print(json.dumps({{"round": rounds, "first": min(last, default=0), "last": max(last, default=0),
                          "fetched": len(last), "errors": len(errors), "dropped": len(dropped)}}), flush=True)
        fetched.clear()

asyncio.run(main())
"""


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _more_files() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(agents: int = 10_000, resources: int = 20, replicas: int = 1, store: str = "sqlite", changes: int = 3,
         idle: float = 10.0, wait: int | None = None, pin: bool = True, tls: bool = False) -> dict[str, object]:
    from datum.agent.push import WAIT

    wait = wait or WAIT
    if replicas > 1 and store != "postgresql":
        raise SystemExit("replicas share a PostgreSQL store: --store postgresql")
    pinned = pin and bool(shutil.which("taskset")) and (os.cpu_count() or 1) >= 2
    server_pin = ["taskset", "-c", "0"] if pinned else []
    load_pin = ["taskset", "-c", "1"] if pinned else []
    with tempfile.TemporaryDirectory(prefix="datum-bench-push-") as tmp, database(store, Path(tmp)) as store_url:
        home = Path(tmp)
        cfg, operator, agent = prepare(home, store_url, resources, tls)
        ca = home / "tls" / "ca.pem" if tls else None
        scheme = "https" if tls else "http"
        ports = [free_port() for _ in range(replicas)]
        logs, servers = [], []
        for port in ports:
            log = (home / f"serve-{port}.log").open("w")
            logs.append(log)
            servers.append(subprocess.Popen(
                [*server_pin, sys.executable, "-c", "from datum.cli.main import main; main()", "serve", "--config",
                 str(cfg), "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, preexec_fn=_more_files,
            ))
        client = None
        try:
            for port, server in zip(ports, servers, strict=True):
                wait_ready(f"{scheme}://127.0.0.1:{port}/v1/hosts/warm-up/manifest", agent, server, ca)
            before = sum(rss_kib(s.pid) for s in servers)
            code = _AGENTS.format(ports=ports, token=agent, agents=agents, wait=wait, cafile=str(ca) if ca else None)
            client = subprocess.Popen([*load_pin, sys.executable, "-c", code], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            assert client.stdin is not None and client.stdout is not None
            started = time.monotonic()
            ready = json.loads(client.stdout.readline())
            connect_s = time.monotonic() - started
            time.sleep(1)
            holding = sum(rss_kib(s.pid) for s in servers)
            cpu = sum(cpu_seconds(s.pid) for s in servers)
            time.sleep(idle)
            idle_cpu = (sum(cpu_seconds(s.pid) for s in servers) - cpu) / idle
            settled = sum(rss_kib(s.pid) for s in servers)  # again after the idle time: what settled meanwhile
            rounds = []
            for version in range(1, changes + 1):
                t0 = time.time()
                (home / "fleet" / "web.yaml").write_text(manifest(resources, version))
                client.stdin.write("change\n")
                client.stdin.flush()
                got = json.loads(client.stdout.readline())
                got["seconds"] = got["last"] - t0
                got["first_seconds"] = got["first"] - t0
                rounds.append(got)
                time.sleep(1)
            client.stdin.close()
            client.wait(30)
        finally:
            if client is not None and client.poll() is None:
                client.kill()
            for server in servers:
                server.terminate()
            for server in servers:
                server.wait(30)
            for log in logs:
                log.close()
    seconds = [r["seconds"] for r in rounds]
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "store": store,
        "replicas": replicas,
        "tls": tls,
        "cores": os.cpu_count(),
        "pinned": pinned,
        "agents": agents,
        "held": ready["held"],
        "resources": resources,
        "wait_s": wait,
        "connect_s": round(connect_s, 1),
        "errors": ready["errors"] + max((r["errors"] for r in rounds), default=0),
        "dropped_waits": max((r["dropped"] for r in rounds), default=0),
        "fetched": min((r["fetched"] for r in rounds), default=0),
        "all_fetched_s": [round(s, 2) for s in seconds],
        "all_fetched_s_median": round(median(seconds), 2) if seconds else None,
        "first_fetched_s": [round(r["first_seconds"], 2) for r in rounds],
        "server_rss_mib_before": round(before / 1024, 1),
        "server_rss_mib_holding": round(holding / 1024, 1),
        "kib_per_agent": round((holding - before) / max(1, agents), 1),
        "kib_per_agent_after_idle": round((settled - before) / max(1, agents), 1),
        "idle_cpu_core_fraction": round(idle_cpu, 4),
        "load_average": load(),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--resources", type=int, default=20)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--changes", type=int, default=3)
    ap.add_argument("--idle", type=float, default=10.0, help="seconds over which the idle CPU is measured")
    ap.add_argument("--wait", type=int, default=None, help="seconds each wait asks (default: the agent's)")
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--tls", action="store_true", help='over HTTPS: tls = "auto", every agent a TLS connection')
    a = ap.parse_args()
    over = " over TLS" if a.tls else ""
    print(header(f"propagation to waiting agents{over} on {a.store}, {a.replicas} replica(s)"))
    r = main(a.agents, a.resources, a.replicas, a.store, a.changes, a.idle, a.wait, not a.no_pin, a.tls)
    target_kib = TARGET_KIB_PER_AGENT_TLS if a.tls else TARGET_KIB_PER_AGENT
    print(json.dumps(r))
    ok_time = r["all_fetched_s_median"] is not None and max(r["all_fetched_s"]) < TARGET_SECONDS  # type: ignore[arg-type]
    ok_all = r["fetched"] == a.agents and not r["errors"]
    ok_mem = float(r["kib_per_agent"]) < target_kib  # type: ignore[arg-type]
    ok_cpu = float(r["idle_cpu_core_fraction"]) < TARGET_IDLE_CPU  # type: ignore[arg-type]
    print(f"propagation{over} on {a.store} x{a.replicas}, {a.agents} waiting agents: all fetched in "
          f"{max(r['all_fetched_s'])} s at worst (target 10: {verdict(ok_time and ok_all)}), "  # type: ignore[arg-type]
          f"{r['kib_per_agent']} KiB per agent (target {target_kib:g}: {verdict(ok_mem)}), idle CPU "
          f"{float(r['idle_cpu_core_fraction']) * 100:.1f}% of a core (target 5%: {verdict(ok_cpu)}), "  # type: ignore[arg-type]
          f"load {load()}: {verdict(ok_time and ok_all and ok_mem and ok_cpu)}")
