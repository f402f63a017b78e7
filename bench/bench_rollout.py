#!/usr/bin/env python3
"""Benchmark: how soon each rollout transition reaches the agents it concerns, and how long a whole rollout takes.

Targets (issue 36): with ``--hosts`` simulated agents holding their long poll on
``GET /v1/hosts/{host}/manifest?wait=N`` against one real ``datum serve``, every
waiter a transition concerns is answered within 2 s of it (a wave released: its
hosts get the new revision; an abort: the hosts that took it get the previous one
back), and a whole canary + 3-wave rollout with no soak is ``done`` in under 15 s
from the change on disk.

The server is a real ``datum serve`` (scheduler and access log off) with
``[fleet.rollout]`` canary ``host-00000``, waves 33%, 66%, 100%, soak 0. The agents
are one asyncio process of plain HTTP/1.1 connections, each a host with a token
bound to it: it fetches its manifest, reports a converged pass on the revision it
was served (``Datum-Revision``), then holds ``wait=`` with ``If-None-Match``; each
new answer is noted (time, revision) and reported as a converged pass at once, as
an agent whose pass takes no time would. The transitions are read from
``GET /v1/events?type=rollout`` (their ``at`` is the store's clock: this machine's);
each host's wave from the store. Then a second change, its rollout paused as it
starts (with no soak it could otherwise be done before the abort) and aborted
through the API once the canary has it: the time to the canary answered with the
previous revision again.

Each transition's figures: ``at_s`` (from the change on disk), its hosts answered (p50, p99, max) and
``reported_s``, from it to the last of its hosts' reports taken (their rows' ``updated_at``); ``server_cpu_s``,
the server's CPU from the change on disk to ``done``.

Run as ``./scripts/bench rollout [--hosts N]``: one JSON line of figures, then the verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, database, header, load, verdict  # noqa: E402
from bench_api import free_port, wait_ready  # noqa: E402
from bench_propagation import _more_files, manifest  # noqa: E402

TARGET_ANSWERED_S = 2.0
TARGET_ROLLOUT_S = 15.0
CANARY = "host-00000"


def prepare(home: Path, store_url: str, hosts: int) -> tuple[Path, str, Path]:
    """A configuration with a fleet directory and staged rollouts, an operator token, and one token per host
    (a JSON file the agents read)."""
    from datum.api.front import tokens
    from datum.config import load_settings
    from datum.store import open_store

    fleet = home / "fleet"
    fleet.mkdir()
    (fleet / "nodes.yaml").write_text("nodes:\n  - match: {name: '*'}\n    manifests: [web.yaml]\n    group: web\n")
    (fleet / "web.yaml").write_text(manifest(3, 0))
    cfg = home / "datum.toml"
    cfg.write_text(
        f'store = "{store_url}"\n[server]\nscheduler = false\naccess_log = false\n[fleet]\nmanifests = "{fleet}"\n'
        f'[fleet.rollout]\ncanary = ["{CANARY}"]\nwaves = ["33%", "66%", "100%"]\nsoak = "0s"\nmax_failed = "50%"\n'
    )
    store = open_store(load_settings(cfg).store_url)
    operator = tokens.create(store, "operator")
    bound = {f"host-{i:05d}": tokens.create(store, "agent", host=f"host-{i:05d}") for i in range(hosts)}
    store.dispose()
    kept = home / "tokens.json"
    kept.write_text(json.dumps(bound))
    return cfg, operator, kept


# The simulated agents. Prints {"ready": n} once every host reported its first pass, then, on "done" on stdin,
# {"got": {host: [[time, revision], ...]}, "errors": [...]}.
_AGENTS = r"""
import asyncio, json, random, re, resource, sys, time
from datetime import datetime, timezone

PORT, TOKENS, WAIT = {port!r}, json.load(open({tokens!r})), {wait}
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
LENGTH = re.compile(rb"(?i)content-length: *(\d+)")
ETAG = re.compile(rb'(?i)etag: *("[^"]*")')
REVISION = re.compile(rb"(?i)datum-revision: *([^\r\n]+)")
got, errors = {{}}, []

def now():
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")

def get(host, etag, wait):
    q = "" if wait is None else f"?wait={{wait}}"
    inm = "" if etag is None else f"If-None-Match: {{etag}}\r\n"
    return (f"GET /v1/hosts/{{host}}/manifest{{q}} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {{TOKENS[host]}}\r\n"
            f"{{inm}}\r\n").encode()

def post(host, revision):
    t = now()
    body = json.dumps({{"host": host, "mode": "enforce", "state": "converged", "startedAt": t, "finishedAt": t,
                       "durationSeconds": 0.0, "exitCode": 0, "counts": {{"converged": 3}}, "resources": [],
                       "revision": revision, "intervalSeconds": 1800}}).encode()
    return (f"POST /v1/hosts/{{host}}/passes HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {{TOKENS[host]}}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {{len(body)}}\r\n\r\n").encode() + body

async def answer(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    m = LENGTH.search(head)
    body = await reader.readexactly(int(m.group(1))) if m else b""
    e, r = ETAG.search(head), REVISION.search(head)
    return status, (e.group(1).decode() if e else None), (r.group(1).decode() if r else None), body

async def exchange(reader, writer, data):
    writer.write(data)
    return await answer(reader)

async def agent(host, ready):
    for attempt in range(20):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", PORT)
            status, etag, revision, _ = await exchange(reader, writer, get(host, None, None))
            break
        except (OSError, asyncio.IncompleteReadError):
            await asyncio.sleep(0.2 * (attempt + 1))
    else:
        errors.append(f"{{host}}: connect")
        ready.append(host)
        return
    if status != 200:
        errors.append(f"{{host}}: {{status}}")
        ready.append(host)
        return
    status, *_ = await exchange(reader, writer, post(host, revision))
    if status != 201:
        errors.append(f"{{host}}: report {{status}}")
    ready.append(host)
    wait = random.randint(1, WAIT)
    while True:
        try:
            status, tag, rev, _ = await exchange(reader, writer, get(host, etag, wait))
        except (asyncio.IncompleteReadError, ConnectionError):
            reader, writer = await asyncio.open_connection("127.0.0.1", PORT)
            continue
        wait = WAIT
        if status == 200 and tag != etag:
            got.setdefault(host, []).append([time.time(), rev])
            etag = tag
            status, *_ = await exchange(reader, writer, post(host, rev))
            if status != 201:
                errors.append(f"{{host}}: report {{status}}")
        elif status not in (200, 304):
            errors.append(f"{{host}}: {{status}}")
            await asyncio.sleep(1)

async def main():
    ready, tasks = [], []
    hosts = sorted(TOKENS)
    for start in range(0, len(hosts), 200):
        tasks += [asyncio.create_task(agent(h, ready)) for h in hosts[start:start + 200]]
        while len(ready) < len(tasks):
            await asyncio.sleep(0.01)
    print(json.dumps({{"ready": len(ready) - len(errors), "errors": errors[:5]}}), flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)
    print(json.dumps({{"got": got, "errors": errors[:20]}}), flush=True)

asyncio.run(main())
"""


def api(base: str, token: str, path: str, method: str = "GET") -> dict:  # type: ignore[type-arg]
    request = urllib.request.Request(base + path, method=method, data=b"" if method == "POST" else None,
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - loopback
        return json.loads(answer.read())  # type: ignore[no-any-return]


def until(check, seconds: float) -> float:  # type: ignore[no-untyped-def]
    """Poll ``check`` every 50 ms until it is true: the time it took (seconds past the limit: a failure). A read
    the busy server did not answer in time is asked again."""
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        try:
            if check():
                return time.monotonic() - began
        except TimeoutError:
            continue
        time.sleep(0.05)
    raise SystemExit(f"gave up after {seconds} s")


def _at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main(hosts: int = 1000, store: str = "sqlite", wait: int = 300) -> dict[str, object]:
    from datum.store import open_store
    from datum.store.rollouts import membership

    with tempfile.TemporaryDirectory(prefix="datum-bench-rollout-") as tmp, database(store, Path(tmp)) as store_url:
        home = Path(tmp)
        cfg, operator, kept = prepare(home, store_url, hosts)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with (home / "serve.log").open("w") as log:
            server = subprocess.Popen(
                [sys.executable, "-c", "from datum.cli.main import main; main()", "serve", "--config", str(cfg),
                 "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, preexec_fn=_more_files,
            )
        client = None
        try:
            wait_ready(f"{base}/v1/rollouts", operator, server)
            client = subprocess.Popen([sys.executable, "-c", _AGENTS.format(port=port, tokens=str(kept), wait=wait)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=_more_files)
            assert client.stdin is not None and client.stdout is not None
            ready = json.loads(client.stdout.readline())
            time.sleep(1)
            t0, cpu0 = time.time(), cpu_seconds(server.pid)
            (home / "fleet" / "web.yaml").write_text(manifest(3, 1))
            first = lambda: api(base, operator, "/v1/rollouts")["rollouts"][0]  # noqa: E731
            until(lambda: first()["id"] >= 2 and first()["state"] in ("done", "halted"), 120)
            rolled = first()
            server_cpu_s = cpu_seconds(server.pid) - cpu0  # and a few reads of /v1/rollouts (this loop's)
            rollout_s = max(_at(t["at"]) for t in rolled["transitions"]) - t0
            opened = open_store(_store_url(cfg))
            try:
                waves = membership(opened, rolled["id"])
                stored_at = _stored_at(opened)  # before the second rollout: the canary reports again then
            finally:
                opened.dispose()
            # the second rollout: aborted once the canary has its revision
            (home / "fleet" / "web.yaml").write_text(manifest(3, 2))
            until(lambda: first()["id"] >= 3, 60)
            # paused at once: with no soak, 20 agents can take a rollout to done within the 2 s below, and a done
            # rollout refuses its abort (409, 2026-12-07 14:30); paused, the canary keeps what it took and no wave
            # is released until the abort
            api(base, operator, "/v1/rollouts/current/pause", "POST")
            second = first()["revision"]
            time.sleep(2)  # the canary has had time to take it
            until(lambda: api(base, operator, "/v1/rollouts/current/abort", "POST") is not None, 120)
            time.sleep(5)  # the canary answered again meanwhile (its time is the agents' to say)
            client.stdin.write("done\n")
            client.stdin.flush()
            client_view = json.loads(client.stdout.readline())
            events = api(base, operator, "/v1/events?type=rollout&limit=1000")["events"]
        finally:
            if client is not None and client.poll() is None:
                client.kill()
            server.terminate()
            server.wait(30)
    got = client_view["got"]
    moved = {(e["rollout"], e["action"], e["wave"]): _at(e["at"]) for e in events}
    per_transition = []
    for key, at in sorted(moved.items(), key=lambda kv: kv[1]):
        rollout, act, wave = key
        if rollout != rolled["id"] or act not in ("started", "released"):
            continue
        concerned = [h for h, w in waves.items() if w == wave] or ([CANARY] if act == "started" else [])
        lags = [min(t for t, rev in got.get(h, []) if rev == rolled["revision"]) - at
                for h in concerned if any(rev == rolled["revision"] for _t, rev in got.get(h, []))]
        reported = [stored_at[h] for h in concerned if h in stored_at]
        per_transition.append({"act": act, "wave": wave, "at_s": round(at - t0, 2), "hosts": len(concerned),
                               "reported_s": round(max(reported, default=at) - at, 2), "answered": len(lags),
                               "p50_s": round(percentile(lags, 0.5), 3), "p99_s": round(percentile(lags, 0.99), 3),
                               "max_s": round(max(lags, default=float("nan")), 3)})
    abort_at = next((at for (r, act, _w), at in moved.items() if act == "aborted"), None)
    back = [t for t, rev in got.get(CANARY, []) if abort_at is not None and t >= abort_at - 1 and rev != second]
    abort_s = round(min(back) - abort_at, 3) if back and abort_at is not None else None
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "store": store,
        "cores": os.cpu_count(),
        "hosts": hosts,
        "ready": ready["ready"],
        "errors": len(client_view["errors"]) + len(ready["errors"]),
        "first_errors": client_view["errors"][:3] or ready["errors"][:3],
        "rollout_state": rolled["state"],
        "rollout_s": round(rollout_s, 2),
        "server_cpu_s": round(server_cpu_s, 2),
        "transitions": per_transition,
        "abort_to_canary_s": abort_s,
        "load_average": load(),
    }


def _stored_at(store) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """When each host's last pass was stored (its row's ``updated_at``, this machine's clock)."""
    from datum.store.schema import hosts

    with store.connect() as conn:
        return {h: at.replace(tzinfo=UTC).timestamp() if at.tzinfo is None else at.timestamp()
                for h, at in conn.execute(hosts.select().with_only_columns(hosts.c.host, hosts.c.updated_at))}


def _store_url(cfg: Path) -> str:
    from datum.config import load_settings

    return load_settings(cfg).store_url


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--wait", type=int, default=300, help="seconds each held poll asks")
    a = ap.parse_args()
    print(header(f"rollout transitions to {a.hosts} waiting agents on {a.store}"))
    r = main(a.hosts, a.store, a.wait)
    print(json.dumps(r))
    worst = max((t["max_s"] for t in r["transitions"]), default=float("inf"))  # type: ignore[union-attr]
    complete = all(t["answered"] == t["hosts"] for t in r["transitions"])  # type: ignore[union-attr]
    abort = r["abort_to_canary_s"]
    ok_answered = complete and worst < TARGET_ANSWERED_S and abort is not None and float(abort) < TARGET_ANSWERED_S  # type: ignore[arg-type]
    ok_rollout = r["rollout_state"] == "done" and float(r["rollout_s"]) < TARGET_ROLLOUT_S  # type: ignore[arg-type]
    print(f"rollout to {a.hosts} waiting agents on {a.store}: every waiter answered within {worst} s of its "
          f"transition, the abort within {abort} s (target 2: {verdict(ok_answered)}); canary + 3 waves done in "
          f"{r['rollout_s']} s (target 15: {verdict(ok_rollout)}); load {load()}: {verdict(ok_answered and ok_rollout)}")
