"""The reboot budget's leases in a real store (SQLite and PostgreSQL): atomic grants, release, expiry; groups from nodes.yaml."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from datum.core.findings import Problem
from datum.fleet.nodes import group_of, load_rules
from datum.fleet.reboots import group_for
from datum.store import open_store
from datum.store.leases import Live, clear, give_back, read, release_rebooted, take

HOUR = timedelta(hours=1)


def test_concurrent_asks_from_several_servers_never_grant_more_than_the_limit(store_url):
    """Ten hosts of one group ask at once, each through its own Store (a server replica): two get a slot."""
    open_store(store_url).dispose()  # migrated once, before the race
    hosts = [f"web{i}" for i in range(10)] + ["db1", "db2"]
    stores = [open_store(store_url) for _ in hosts]
    start = threading.Barrier(len(hosts))
    granted: dict[str, bool] = {}
    errors: list[BaseException] = []

    def ask(store, host):
        try:
            start.wait()
            group = "db" if host.startswith("db") else "web"
            granted[host] = take(store, host, group, "boot-1", 2, HOUR).granted
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(s, h)) for s, h in zip(stores, hosts, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sum(granted[h] for h in hosts if h.startswith("web")) == 2
    assert granted["db1"] and granted["db2"]  # another group is not affected
    leases = read(stores[0])
    assert sorted(x.group for x in leases.rebooting) == ["db", "db", "web", "web"]
    for s in stores:
        s.dispose()


def test_a_lease_is_kept_in_its_boot_released_by_a_new_one_and_given_back(store):
    first = take(store, "web1", "web", "boot-1", 1, HOUR)
    assert first.granted and first.lease is not None
    again = take(store, "web1", "web", "boot-1", 1, HOUR)  # an agent restarted before it rebooted
    assert again.granted and again.lease == first.lease
    waiting = take(store, "web2", "web", "boot-1", 1, HOUR)
    assert not waiting.granted and [x.host for x in waiting.rebooting] == ["web1"]
    with store.begin() as conn:
        assert not release_rebooted(conn, "web1", "boot-1")  # a report from the same boot: still rebooting
    assert read(store).of("web1") is not None
    with store.begin() as conn:
        assert release_rebooted(conn, "web1", "boot-2")  # back from its reboot
    assert read(store).all == ()
    assert take(store, "web2", "web", "boot-1", 1, HOUR).granted
    assert not give_back(store, "web2", "boot-0")  # only the lease of that boot
    assert give_back(store, "web2", "boot-1")
    assert take(store, "web3", "web", "boot-1", 1, HOUR).granted


def test_a_host_not_back_within_the_timeout_halts_its_group_until_it_comes_back(store):
    assert take(store, "web1", "web", "boot-1", 2, timedelta(milliseconds=300)).granted
    time.sleep(0.5)  # web1 has not reported from a new boot within its reboot_timeout
    leases = read(store)
    assert leases.rebooting == [] and [x.host for x in leases.overdue] == ["web1"]
    refused = take(store, "web2", "web", "boot-1", 2, HOUR)  # a slot is free, yet the group is halted
    assert not refused.granted and [x.host for x in refused.halted] == ["web1"]
    assert take(store, "db1", "db", "boot-1", 2, HOUR).granted  # another group goes on
    with store.begin() as conn:
        release_rebooted(conn, "web1", "boot-2")  # it came back after all: the group goes on
    granted = take(store, "web2", "web", "boot-1", 2, HOUR)
    assert granted.granted and granted.halted == ()


def test_an_operator_clears_the_lease_of_a_host_that_will_not_come_back(store):
    assert take(store, "web1", "web", "boot-1", 1, timedelta(milliseconds=300)).granted
    time.sleep(0.5)
    assert not take(store, "web2", "web", "boot-1", 1, HOUR).granted
    assert clear(store, "web9") is None
    dropped = clear(store, "web1")
    assert dropped is not None and dropped.host == "web1" and dropped.group == "web"
    assert take(store, "web2", "web", "boot-1", 1, HOUR).granted
    # The host asking again in the boot its lease expired in (its reboot never came) is a new request.
    assert take(store, "web3", "web", "boot-1", 2, timedelta(milliseconds=300)).granted
    time.sleep(0.5)
    again = take(store, "web3", "web", "boot-1", 2, HOUR)
    assert again.granted and again.lease is not None and again.lease.expires_at - again.lease.since == HOUR


def test_clearing_a_live_lease_needs_force_a_host_rebooting_now_keeps_it(store):
    """The operator looked at web1 overdue from boot-1; web1 came back and took a new lease from boot-2 before the
    clear ran: that live lease is kept (another host of its group would go down while web1 reboots), unless
    ``force``. A lease of a host back but unhealthy is cleared: the operator looked at it."""
    assert take(store, "web1", "web", "boot-1", 1, timedelta(milliseconds=300)).granted
    time.sleep(0.5)  # overdue: what the operator saw
    assert take(store, "web1", "web", "boot-2", 1, HOUR).granted  # back, and asks again: live
    with pytest.raises(Live) as refused:
        clear(store, "web1")
    assert refused.value.lease.boot_id == "boot-2"
    assert [lease.boot_id for lease in read(store).all if lease.host == "web1"] == ["boot-2"]  # kept
    assert not take(store, "web2", "web", "boot-1", 1, HOUR).granted  # web1's reboot holds the group
    assert clear(store, "web1", force=True) is not None
    assert take(store, "web2", "web", "boot-1", 1, HOUR).granted
    with store.begin() as conn:
        assert release_rebooted(conn, "web2", "boot-2", unhealthy="health check failed") is False
    dropped = clear(store, "web2")  # live, back unhealthy, looked at
    assert dropped is not None and dropped.unhealthy == "health check failed"


def test_asking_again_in_the_same_boot_is_refused_while_blocked_or_halted_and_gives_the_slot_back(store):
    """An agent that restarts before its reboot asks again from the same boot: granted again while nothing
    refuses it, but not on the earlier yes once a block (a firing alert) or another host's overdue lease
    holds the group: its lease goes, so it never turns overdue on a slot it does not use."""
    assert take(store, "web1", "web", "boot-1", 2, HOUR).granted
    assert take(store, "web1", "web", "boot-1", 2, HOUR).granted  # asked again: the same lease
    blocked = take(store, "web1", "web", "boot-1", 2, HOUR, blocked="reboots are blocked: an alert fires")
    assert not blocked.granted and blocked.blocked == "reboots are blocked: an alert fires"
    assert [lease.host for lease in read(store).all] == []  # given back
    assert take(store, "web1", "web", "boot-1", 2, HOUR).granted  # the block lifted: granted anew
    assert take(store, "web2", "web", "boot-1", 2, timedelta(milliseconds=300)).granted
    time.sleep(0.5)  # web2 never came back: the group halts
    halted = take(store, "web1", "web", "boot-1", 2, HOUR)
    assert not halted.granted and [lease.host for lease in halted.halted] == ["web2"]
    assert [lease.host for lease in read(store).all] == ["web2"]  # web1's given back


def test_a_lease_from_another_boot_is_replaced(store):
    assert take(store, "web1", "web", "boot-1", 1, HOUR).granted
    # web1 rebooted and needs another reboot before its first report reached the server
    second = take(store, "web1", "web", "boot-2", 1, HOUR)
    assert second.granted and second.lease is not None and second.lease.boot_id == "boot-2"
    assert len(read(store).all) == 1


NODES = """\
labels:
  "db1": {os: debian}
nodes:
  - match: {name: "web*"}
    manifests: [m.yaml]
    group: web
  - match: {labels: {os: debian}}
    group: debian-first
  - match: {name: "web9"}
    group: canary
"""


def test_groups_come_from_node_rules_the_last_that_gives_one(tmp_path: Path):
    (tmp_path / "m.yaml").write_text("resources: []\n")
    (tmp_path / "nodes.yaml").write_text(NODES)
    rules = load_rules(tmp_path)
    assert group_of(rules, "web1") == "web"
    assert group_of(rules, "web9") == "canary"
    assert group_of(rules, "db1") == "debian-first"  # by the label nodes.yaml gives it
    assert group_for(tmp_path, "db2") == "default"
    assert group_for(None, "web1") == "default"  # no fleet directory: one group
    (tmp_path / "nodes.yaml").write_text("nodes:\n  - match: {name: x}\n    group: ''\n")
    with pytest.raises(Problem) as refused:
        load_rules(tmp_path)
    assert "nodes[0].group" in str(refused.value.findings[0].fields)


def test_a_rule_that_gives_only_a_group_validates_and_serves_no_manifest(tmp_path: Path):
    from datum.fleet.effective import check_fleet, effective

    (tmp_path / "m.yaml").write_text("resources: []\n")
    (tmp_path / "nodes.yaml").write_text(NODES)
    assert check_fleet(tmp_path) == (3, 1)
    assert effective(tmp_path, "web1", {}).digest  # its manifests come from the first rule
    with pytest.raises(Problem) as none:
        effective(tmp_path, "db1", {"os_release": {"ID": "debian"}})  # a group, and no manifest
    assert none.value.findings[0].code == "NOT_FOUND"


def _pass(host: str, boot: str | None, seq: int) -> dict[str, object]:
    report: dict[str, object] = {
        "host": host, "mode": "enforce", "state": "converged", "startedAt": "2026-11-30T08:00:00+00:00",
        "finishedAt": "2026-11-30T08:00:01+00:00", "durationSeconds": 1.0, "exitCode": 0,
        "passId": f"{host}-{seq}", "seq": seq, "counts": {}, "resources": [],
    }
    if boot is not None:
        report["bootId"] = boot
    return report


def test_a_stored_pass_from_another_boot_frees_the_lease_in_the_intake_statement(store):
    """The intake's own write (history on, as the server takes a pass: one statement on PostgreSQL) frees
    the lease only for a stored pass from another boot; a pass of the same boot, without a boot id, not
    stored (older, the same again) or of another host leaves it."""
    from datum.store.hosts import take_pass

    def intake(host: str, boot: str | None, seq: int) -> str:
        return take_pass(store, host, _pass(host, boot, seq), history=True, release_lease=True).outcome

    assert take(store, "web1", "web", "boot-1", 1, HOUR).granted
    assert intake("web1", "boot-1", 5) == "stored"  # the pass before its reboot, same boot
    assert intake("web1", None, 6) == "stored"  # no boot id: nothing said about a reboot
    assert intake("web2", "boot-9", 1) == "stored"  # another host's pass
    assert intake("web1", "boot-2", 4) == "older"  # not stored: the lease stays
    assert intake("web1", "boot-2", 6) == "duplicate"
    assert [x.host for x in read(store).rebooting] == ["web1"]
    assert take_pass(store, "web1", _pass("web1", "boot-2", 7), history=True).outcome == "stored"
    assert [x.host for x in read(store).rebooting] == ["web1"]  # not asked to: kept
    assert intake("web1", "boot-2", 8) == "stored"  # back from its reboot
    assert read(store).all == ()
    assert take(store, "web2", "web", "boot-9", 1, HOUR).granted  # its slot is free
