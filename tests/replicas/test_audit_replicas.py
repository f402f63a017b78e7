"""Two real ``datum serve`` on one PostgreSQL database acting at once (issue 37 item 4, across replicas): every act
each takes is one audit row (an operator's, and an agent's pass report written with the pass), both servers seal the rows into one chain as they come (neither waits for the other to
write), and ``datum audit verify`` finds it whole, every row in it."""

from __future__ import annotations

import subprocess
import sys
import threading

import httpx
import pytest
import sqlalchemy as sa
from replica_harness import SLOW, wait_for

from api.story import pass_report
from datum.api.front.tokens import create as create_token
from datum.store import open_store

pytestmark = pytest.mark.parametrize(
    "store_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)

WORKERS = 4  # client threads per replica, all at once
ACTS = 30  # acts per thread


def _count(fleet, where: str) -> int:
    with fleet.engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM audit_log WHERE {where}")).scalar_one())


@pytest.mark.replicas
def test_two_servers_acting_at_once_keep_one_chain_that_verifies(fleet, store_url):
    f = fleet(2, [])
    store = open_store(store_url)
    try:  # an agent token bound to each worker's host
        agents = {(r.port, w): create_token(store, "agent", host=f"h{r.port}-{w}") for r in f.replicas
                  for w in range(WORKERS)}
    finally:
        store.dispose()
    errors: list[str] = []
    start = threading.Barrier(2 * WORKERS)

    def act(replica, worker: int) -> None:
        start.wait()
        for i in range(ACTS):
            # an operator's act (no lease there: 404, its row written with the answer) ...
            r = replica.client.delete(f"/v1/reboots/r{replica.port}-w{worker}-{i}")
            if r.status_code != 404:
                errors.append(f"{r.status_code} {r.text}")
            # ... and an agent's pass report (stored: 201, its row in the intake's statement)
            host = f"h{replica.port}-{worker}"
            r = httpx.post(f"{replica.client.base_url}/v1/hosts/{host}/passes", json=pass_report(host) | {"seq": i + 1},
                           headers={"Authorization": f"Bearer {agents[(replica.port, worker)]}"}, timeout=10)
            if r.status_code != 201:
                errors.append(f"{r.status_code} {r.text}")

    threads = [threading.Thread(target=act, args=(r, w)) for r in f.replicas for w in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    acts = "action = 'fleet:ClearRebootLease' AND principal = 'operator' AND status = 404"
    assert _count(f, acts) == 2 * WORKERS * ACTS
    reports = "action = 'fleet:ReportPass' AND principal LIKE 'agent@host:h%' AND status = 201"
    assert _count(f, reports) == 2 * WORKERS * ACTS
    # the servers seal them (every second), not verify: none is left waiting
    wait_for(lambda: _count(f, "seq IS NULL") == 0, 30, "the servers to seal every row")
    with f.engine.connect() as conn:
        seqs = [int(s) for s in conn.execute(sa.text("SELECT seq FROM audit_log ORDER BY seq")).scalars()]
    assert seqs == list(range(1, len(seqs) + 1))  # one line: no gap, no seq twice
    done = subprocess.run([sys.executable, str(SLOW), "audit", "verify", "--config", str(f.replicas[0].config),
                           "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"whole": true' in done.stdout and f'"rows": {len(seqs)}' in done.stdout, done.stdout
