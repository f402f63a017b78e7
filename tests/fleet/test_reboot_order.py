"""Reboots in order, health first, in a real store (SQLite, and PostgreSQL through ``pg_module_database``):
``reboot_order`` from nodes.yaml, the requests that order the grants (and expire), the Prometheus block as the
grant sees it, and the intake keeping the lease of a host back unhealthy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from datum.core.budget import BY_NAME, back_unhealthy, halted, in_order, turn
from datum.core.findings import Problem
from datum.fleet.nodes import load_nodes
from datum.fleet.reboots import placed
from datum.store import open_store
from datum.store.engine import Store
from datum.store.hosts import take_pass
from datum.store.leases import read, release_rebooted, take

HOUR = timedelta(hours=1)
ORDER = ("web3", "web1", "web2")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def lease_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store with no lease and no request: a SQLite file of its own, or the module's PostgreSQL database."""
    url = f"sqlite:///{tmp_path / 'datum.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_module_database")
    store = open_store(url)
    with store.begin() as conn:
        for table in ("reboot_leases", "reboot_requests", "reboot_groups", "hosts"):
            conn.execute(sa.text(f"DELETE FROM {table}"))
    yield store
    store.dispose()


def _ask(store: Store, host: str, boot: str = "boot-1", limit: int = 1, **kw):
    return take(store, host, "web", boot, limit, HOUR, order=ORDER, **kw)


def _back(store: Store, host: str, boot: str = "boot-2", unhealthy: str | None = None) -> bool:
    with store.begin() as conn:
        return release_rebooted(conn, host, boot, unhealthy)


def test_leases_go_in_the_groups_order_to_the_hosts_that_asked(lease_store: Store):
    store = lease_store
    assert _ask(store, "web9").granted  # alone, with room: granted whatever its place (it is not in the list)
    for host in ("web2", "web1", "web3"):  # the slot is taken: each waits, and its ask is kept
        refused = _ask(store, host)
        assert not refused.granted and refused.ahead == () and [x.host for x in refused.rebooting] == ["web9"]
    assert sorted(w.host for w in read(store).waiting) == ["web1", "web2", "web3"]
    assert _back(store, "web9")  # back, converged and healthy: the slot frees
    out_of_turn = _ask(store, "web2")
    assert not out_of_turn.granted and out_of_turn.ahead == ("web3", "web1")
    assert turn(list(out_of_turn.ahead)) == "waiting for its turn to reboot (reboot_order): web3, web1 first"
    assert _ask(store, "web1").ahead == ("web3",)
    first = _ask(store, "web3")
    assert first.granted and first.lease is not None
    assert [w.host for w in read(store).waiting] == ["web1", "web2"]  # served: web3 waits no more
    assert not _ask(store, "web1").granted  # the budget: 1/1 rebooting
    assert _back(store, "web3")
    assert _ask(store, "web2").ahead == ("web1",)
    assert _ask(store, "web1").granted


def test_with_two_slots_the_first_two_waiting_in_order_are_granted(lease_store: Store):
    store = lease_store
    assert _ask(store, "web8", limit=2).granted and _ask(store, "web9", limit=2).granted
    for host in ("web2", "web1", "web3"):
        assert not _ask(store, host, limit=2).granted
    assert _back(store, "web8") and _back(store, "web9")
    assert _ask(store, "web2", limit=2).ahead == ("web3", "web1")
    assert _ask(store, "web1", limit=2).granted  # second of the waiting, two slots free
    assert _ask(store, "web2", limit=2).ahead == ("web3",)  # one slot left: web3's
    assert _ask(store, "web3", limit=2).granted


def test_an_expired_request_does_not_hold_the_others_back(lease_store: Store):
    store = lease_store
    assert _ask(store, "web9").granted
    assert not _ask(store, "web3", request_ttl=timedelta(seconds=2)).granted  # first in order, then quiet
    assert not _ask(store, "web1").granted
    assert _back(store, "web9")
    assert _ask(store, "web1").ahead == ("web3",)  # web3's ask is still live: its turn
    time.sleep(2.5)  # web3 no longer needs a reboot: it stopped asking, and its request expired
    assert [w.host for w in read(store).waiting] == ["web1"]
    assert _ask(store, "web1").granted


def test_a_block_refuses_every_grant_and_keeps_the_ask(lease_store: Store):
    store = lease_store
    refused = _ask(store, "web3", blocked="the Prometheus query up == 0 returns 1 series: up{job=\"x\"}")
    assert not refused.granted and refused.blocked and refused.lease is None
    assert [w.host for w in read(store).waiting] == ["web3"]
    assert _ask(store, "web3").granted  # the block lifted


def test_a_host_back_unhealthy_keeps_its_lease_and_past_the_timeout_halts_the_group(lease_store: Store):
    store = lease_store
    assert take(store, "web1", "web", "boot-1", 2, timedelta(milliseconds=600)).granted
    assert not _back(store, "web1", "boot-1", None)  # the same boot: still rebooting
    assert not _back(store, "web1", "boot-2", "came back unhealthy: health_check (check) exited 1")
    [lease] = read(store).all
    assert lease.unhealthy == "came back unhealthy: health_check (check) exited 1"
    assert lease.as_json()["unhealthy"] == lease.unhealthy
    time.sleep(0.8)  # not healthy within reboot_timeout
    refused = take(store, "web2", "web", "boot-1", 2, HOUR)
    assert not refused.granted and [x.host for x in refused.halted] == ["web1"]
    said = halted([x.host for x in refused.halted], {x.host: x.unhealthy for x in refused.halted})
    assert said == (
        "the group's reboots are halted: web1 has not come back healthy from a reboot within [fleet] reboot_timeout "
        "(web1 came back unhealthy: health_check (check) exited 1)"
    )
    assert _back(store, "web1", "boot-2")  # healthy at last: the lease goes, the group goes on
    assert take(store, "web2", "web", "boot-1", 2, HOUR).granted


def _pass(host: str, boot: str, seq: int, state: str = "converged", health: dict | None = None) -> dict:
    report: dict = {
        "host": host, "mode": "enforce", "state": state, "startedAt": "2026-11-30T08:00:00+00:00",
        "finishedAt": "2026-11-30T08:00:01+00:00", "durationSeconds": 1.0, "exitCode": 0, "bootId": boot,
        "passId": f"{host}-{seq}", "seq": seq, "counts": {}, "resources": [],
    }
    if health is not None:
        report["health"] = health
    return report


def test_the_intake_frees_the_lease_only_on_converged_and_healthy(lease_store: Store):
    """As the server takes a pass (history on: one statement on PostgreSQL)."""
    store = lease_store

    def intake(report: dict) -> None:
        assert take_pass(store, report["host"], report, history=True, release_lease=True).outcome == "stored"

    assert take(store, "web1", "web", "boot-1", 1, HOUR).granted
    intake(_pass("web1", "boot-2", 1, "failed"))
    assert read(store).of("web1").unhealthy == "came back failed"
    sick = {"ok": False, "detail": "health_url http://127.0.0.1:1/healthz answered 503 Service Unavailable"}
    intake(_pass("web1", "boot-2", 2, health=sick))
    assert read(store).of("web1").unhealthy == f"came back unhealthy: {sick['detail']}"
    intake(_pass("web1", "boot-2", 3, health={"ok": True, "detail": "health_url answered 2xx"}))
    assert read(store).all == ()
    assert take(store, "web2", "web", "boot-1", 1, HOUR).granted
    intake(_pass("web2", "boot-2", 1))  # no health checked (none configured): converged is enough
    assert read(store).all == ()


def test_back_unhealthy_is_one_rule():
    assert back_unhealthy({"state": "converged"}) is None
    assert back_unhealthy({"state": "converged", "health": {"ok": True}}) is None
    assert back_unhealthy({"state": "converged", "health": {"ok": False}}) == (
        "came back unhealthy: its health check did not pass"
    )
    # the agent says degraded for it now: the lease keeps the check's words, not "came back degraded: came back ..."
    assert back_unhealthy({"state": "degraded", "reason": "came back unhealthy: health_check (t) exited 1",
                           "health": {"ok": False, "detail": "health_check (t) exited 1"}}) == (
        "came back unhealthy: health_check (t) exited 1"
    )
    assert back_unhealthy({"state": "degraded", "reason": "File[x] skipped: no provider"}) == (
        "came back degraded: File[x] skipped: no provider"
    )
    assert back_unhealthy({"state": "awaiting-reboot", "reason": "kernel 6.2 in /boot, running 6.1"}) == (
        "came back awaiting-reboot: kernel 6.2 in /boot, running 6.1"
    )


def test_in_order_by_name_is_natural_and_a_list_puts_the_others_after():
    assert in_order(BY_NAME, ["web10", "web2", "web1"]) == ["web1", "web2", "web10"]
    assert in_order(("web3", "web1"), ["web2", "web1", "web10", "web3"]) == ["web3", "web1", "web2", "web10"]


NODES = """\
nodes:
  - match: {name: "web*"}
    group: web
  - match: {name: "db*"}
    group: db
reboot_order:
  web: [web3, web1, web2]
  db: name
"""


def test_reboot_order_reads_from_nodes_yaml(tmp_path: Path):
    (tmp_path / "nodes.yaml").write_text(NODES)
    rules, order = load_nodes(tmp_path)
    assert len(rules) == 2 and order == {"web": ("web3", "web1", "web2"), "db": "name"}
    assert placed(tmp_path, "web1") == ("web", ("web3", "web1", "web2"))
    assert placed(tmp_path, "db7") == ("db", "name")
    assert placed(tmp_path, "other") == ("default", None)  # a group it does not name: first come


def test_every_reboot_order_finding_is_at_its_field(tmp_path: Path):
    (tmp_path / "nodes.yaml").write_text(
        NODES.replace("  db: name\n", "  db: first\n  cache: name\n  default: [a, a, 'b*', 3]\n")
    )
    with pytest.raises(Problem) as refused:
        load_nodes(tmp_path)
    fields = {f.field: f.message for finding in refused.value.findings for f in finding.fields}
    assert set(fields) == {
        "nodes.yaml: reboot_order.db",
        "nodes.yaml: reboot_order.cache",
        "nodes.yaml: reboot_order.default[1]",
        "nodes.yaml: reboot_order.default[2]",
        "nodes.yaml: reboot_order.default[3]",
    }, fields
    assert "no rule gives group 'cache'" in fields["nodes.yaml: reboot_order.cache"]
    assert "named twice" in fields["nodes.yaml: reboot_order.default[1]"]
    (tmp_path / "nodes.yaml").write_text(NODES + "surprise: 1\n")
    with pytest.raises(Problem) as unknown:
        load_nodes(tmp_path)
    assert [f.field for x in unknown.value.findings for f in x.fields] == ["nodes.yaml: surprise"]
