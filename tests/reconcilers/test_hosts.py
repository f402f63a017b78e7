"""The ``hosts`` reconciler: declared hosts against the hosts that report, on real stores.

Reports go in through the intake's own function (``record_pass``), passes run through the
runner with a clock the test moves (so a host falls silent the way it does in life: time passes
and no report comes), and the verdict is read where an operator reads it: the seed's drift
endpoint, ``datum drift hosts --json`` and the list surface.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from api.story import Clock
from datum.api.app import create_app
from datum.api.front import tokens
from datum.config import Settings
from datum.core.findings import Problem
from datum.fleet.inventory import declared
from datum.fleet.nodes import load_rules
from datum.plugins import load as load_plugins
from datum.reconcile.runner import Runner
from datum.reconcilers.hosts.reconciler import HostsSettings, revoked
from datum.store import open_store
from datum.store.hosts import record_pass
from datum.store.schema import tokens as token_table

# The agents' interval in these reports, seconds; [fleet] stale_after is 3 of them (105 s), which no tick
# of 30 s lands on: a host's age is never compared with its bound at equality (SQLite's julianday is a float).
INTERVAL = 35


def report(host: str, clock: Clock) -> dict[str, Any]:
    return {"host": host, "state": "converged", "finishedAt": clock.now.isoformat(), "intervalSeconds": INTERVAL,
            "resources": []}


class Fleet:
    """One fleet directory, one store, the hosts reconciler's settings, and a clock."""

    def __init__(self, tmp_path: Path, store_url: str, nodes: str, inventory: list[str] | None = None,
                 **section: Any) -> None:
        self.dir = tmp_path / "fleet"
        self.dir.mkdir()
        (self.dir / "nodes.yaml").write_text(nodes)
        (self.dir / "web.yaml").write_text("resources: []\n")
        hosts: dict[str, Any] = {"interval": "30s", "confirmation_ticks": 2, **section}
        if inventory is not None:
            (self.dir / "inventory.yaml").write_text(json.dumps({"hosts": inventory}))
            hosts.setdefault("inventory", "inventory.yaml")
        self.settings = Settings.model_validate({
            "home": str(tmp_path / "home"),
            "store": store_url,
            "fleet": {"manifests": str(self.dir)},
            "reconcilers": {"hosts": hosts},
            "server": {"scheduler": False},
        })
        self.store = open_store(store_url)
        self.registry = load_plugins().registry()
        self.clock = Clock()
        self.runner = Runner(self.registry, self.settings, self.store, clock=self.clock)
        self.app = create_app(self.settings, self.registry, self.store, clock=self.clock)
        self.app.state.datum.reports.ttl = 0
        self.client = TestClient(self.app, raise_server_exceptions=False)
        self.operator = {"Authorization": f"Bearer {tokens.create(self.store, 'operator')}"}

    def reports(self, *hosts: str) -> None:
        for host in hosts:
            assert record_pass(self.store, host, report(host, self.clock)) == "stored"

    def tick(self, passes: int = 1, every: timedelta = timedelta(seconds=30)) -> None:
        for _ in range(passes):
            self.clock.now += every
            self.runner.tick("hosts")

    def drift(self) -> dict[str, Any]:
        r = self.client.get("/v1/observability/admin/reconcilers/hosts/drift", headers=self.operator)
        assert r.status_code == 200, r.text
        return r.json()

    def items(self) -> dict[str, dict[str, Any]]:
        return {i["id"]: i for i in self.drift()["items"]}


NODES = """\
nodes:
  - match: {name: 'web*'}
    manifests: [web.yaml]
  - match: {name: web1}
    expected: true
  - match: {name: web2}
    expected: true
"""


@pytest.fixture
def fleet(tmp_path, store_url):
    f = Fleet(tmp_path, store_url, NODES, inventory=["db1", "web2"])
    yield f
    f.store.dispose()


def test_the_fleet_turns_it_on_and_a_declared_host_that_never_reported_is_missing(fleet):
    assert fleet.registry.settings(fleet.settings, "hosts").enabled
    fleet.reports("web1", "web2")
    fleet.tick()
    items = fleet.items()
    assert set(items) == {"db1"}
    assert items["db1"]["reason"] == "awaiting_confirmation"  # one pass is not an alarm
    assert items["db1"]["desired"] == "declared in inventory.yaml; never reported"
    fleet.reports("web1", "web2")
    fleet.tick()
    db1 = fleet.items()["db1"]
    assert (db1["direction"], db1["reason"], db1["streak"]) == ("restore", "hosts.never_reported", 2)
    assert "no report from it has reached the server" in db1["lastErr"]
    report_ = fleet.drift()
    assert (report_["health"], report_["drift"], report_["itemsReported"]) == ("ok", 1, True)


def test_a_host_that_falls_silent_is_missing_with_since_when_and_back_when_it_reports(fleet):
    fleet.reports("web1", "web2", "db1")
    fleet.tick()
    assert fleet.items() == {}
    # web2's agent stops; the others keep reporting every interval.
    for _ in range(2):
        fleet.tick()
        fleet.reports("web1", "db1")
    assert fleet.items() == {}  # 90 s without a report: not yet more than 3 of its 35 s intervals
    fleet.tick()
    fleet.reports("web1", "db1")
    item = fleet.items()["web2"]
    assert item["reason"] == "awaiting_confirmation"  # stale now, confirmed on the next pass
    fleet.tick()
    item = fleet.items()["web2"]
    assert item["reason"] == "hosts.silent"
    assert item["desired"].startswith("declared in nodes.yaml rule 2; last report received ")
    assert "its last pass finished 2m 30s ago, its interval 35s: silent for more than 3 of its intervals" in item["lastErr"]
    fleet.reports("web2")
    fleet.tick()
    assert "web2" not in fleet.items()


def test_many_gone_at_once_are_held_by_the_breaker_as_one_partition(tmp_path, store_url):
    names = [f"web{i}" for i in range(1, 9)]
    f = Fleet(tmp_path, store_url, NODES, inventory=names)
    try:
        f.reports(*names)
        f.tick()
        f.clock.now += timedelta(minutes=10)  # the server hears from none of them for ten minutes
        f.tick(2)
        report_ = f.drift()
        assert {i["reason"] for i in report_["items"]} == {"circuit_breaker"}
        assert {i["lastErr"] for i in report_["items"]} == {"restore breaker: 8 candidates exceed the breaker count of 5"}
        assert report_["drift"] == 8
        assert report_["health"] == "degraded"
    finally:
        f.store.dispose()


def test_an_undeclared_host_is_reported_and_left_alone_by_default(fleet):
    tokens.create(fleet.store, "agent", host="stray1")
    fleet.reports("web1", "web2", "db1", "stray1")
    fleet.tick(3)
    item = fleet.items()["stray1"]
    assert (item["direction"], item["reason"]) == ("reap", "suppressed_no_reap")
    assert _token_rows(fleet, "stray1") == 1


def _token_rows(fleet: Fleet, host: str) -> int:
    with fleet.store.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).where(token_table.c.host == host)).scalar_one()


def test_with_no_reap_off_a_strays_bound_tokens_are_revoked_and_a_second_token_is_blocked_on_its_owner(
    tmp_path, store_url
):
    f = Fleet(tmp_path, store_url, NODES, inventory=["db1"], no_reap=False,
              breaker={"reap": {"count": 10, "fraction": 1}})  # one stray in four hosts is past the default tenth
    try:
        tokens.create(f.store, "agent", host="stray1")
        tokens.create(f.store, "agent", host="stray1")
        tokens.create(f.store, "agent", host="web1")
        f.reports("web1", "web2", "db1", "stray1")
        f.tick()
        assert f.items()["stray1"]["reason"] == "awaiting_confirmation"
        assert _token_rows(f, "stray1") == 2  # nothing revoked on one sighting
        f.tick()
        assert f.items()["stray1"]["reason"] == "acting"
        assert _token_rows(f, "stray1") == 0 and _token_rows(f, "web1") == 1
        with f.store.connect() as conn:
            row = conn.execute(sa.select(revoked)).one()
        assert (row.host, row.tokens) == ("stray1", 2)
        f.tick()
        assert "stray1" not in f.items()  # revoked, its last report older: left to fall silent
        f.reports("stray1")  # yet it reports again: another token speaks for it
        f.tick(2)
        item = f.items()["stray1"]
        assert item["reason"] == "blocked_on_owner"
        assert "after its bound tokens were revoked" in item["lastErr"]
        assert f.drift()["blocked"] == 1
    finally:
        f.store.dispose()


def test_nothing_declared_cannot_tell_and_says_so(tmp_path, store_url):
    f = Fleet(tmp_path, store_url, "nodes:\n  - match: {name: 'web*'}\n    manifests: [web.yaml]\n")
    try:
        f.reports("web1", "stray1")
        f.tick(2)
        report_ = f.drift()
        assert report_["itemsReported"] is False and report_["items"] == []
        assert report_["health"] == "degraded"
        assert "no host is declared" in report_["error"]
        # The fleet's histogram is there all the same: every host state selected, none stranded.
        assert {c["status"]: c["count"] for c in report_["coverage"] if c["count"]} == {"converged": 2}
        assert not any(c["stranded"] for c in report_["coverage"])
    finally:
        f.store.dispose()


def test_an_unreadable_inventory_fails_the_pass_and_never_reads_as_empty(fleet):
    fleet.reports("web1", "web2", "db1")
    fleet.tick(2)
    (fleet.dir / "inventory.yaml").write_text("hosts: [db1, db1, '']\n")
    fleet.tick()
    report_ = fleet.drift()
    assert report_["health"] == "failing"
    assert "hosts[1]" in report_["error"] and "listed twice" in report_["error"]
    (fleet.dir / "inventory.yaml").unlink()
    fleet.tick()
    assert "cannot read the inventory" in fleet.drift()["error"]


def test_an_inventory_that_lists_no_host_trips_the_reap_breaker(tmp_path, store_url):
    f = Fleet(tmp_path, store_url, "nodes:\n  - match: {name: 'web*'}\n    manifests: [web.yaml]\n",
              inventory=[], no_reap=False)
    try:
        tokens.create(f.store, "agent", host="web1")
        f.reports("web1")
        f.tick(3)
        item = f.items()["web1"]
        assert item["reason"] == "circuit_breaker" and "the desired set is empty" in item["lastErr"]
        assert _token_rows(f, "web1") == 1
    finally:
        f.store.dispose()


def test_expected_declares_one_named_host(tmp_path):
    (tmp_path / "nodes.yaml").write_text(
        "nodes:\n"
        "  - match: {name: 'web*'}\n    expected: true\n"
        "  - match: {name: db1, facts: {os: debian}}\n    expected: true\n"
        "  - match: {name: db2}\n    expected: 'yes'\n"
    )
    with pytest.raises(Problem) as caught:
        load_rules(tmp_path)
    fields = {f.field for f in caught.value.findings[0].fields}
    assert fields == {"nodes.yaml: nodes[0].expected", "nodes.yaml: nodes[1].expected", "nodes.yaml: nodes[2].expected"}
    (tmp_path / "nodes.yaml").write_text("nodes:\n  - match: {name: db1}\n    expected: true\n")
    assert {h: d.where for h, d in declared(tmp_path, None).items()} == {"db1": "nodes.yaml rule 0"}
    (tmp_path / "nodes.yaml").write_text("nodes:\n  - match: {name: db1}\n    group: db\n")
    assert declared(tmp_path, None) is None  # nothing declared is not "nothing missing"


def test_settings_follow_the_fleet_and_keep_their_restore_breaker():
    off = Settings.model_validate({})
    assert not off.reconciler("hosts", HostsSettings).enabled
    on = Settings.model_validate({"fleet": {"manifests": "/srv/fleet", "stale_after": 5}})
    hosts = on.reconciler("hosts", HostsSettings)
    assert hosts.enabled and hosts.no_reap and hosts.fleet.stale_after == 5
    assert hosts.breaker.restore is not None and hosts.breaker.restore.count == 5
    tuned = Settings.model_validate({"reconcilers": {"hosts": {"inventory": "/srv/inv.yaml", "breaker": {"reap": 1}}}})
    hosts = tuned.reconciler("hosts", HostsSettings)
    assert hosts.enabled and hosts.breaker.restore.count == 5 and hosts.breaker.reap.count == 1


def test_datum_drift_hosts_answers_which_hosts_are_missing(fleet, datum_cli):
    fleet.reports("web1", "web2")
    fleet.tick(2)
    cfg = fleet.dir.parent / "datum.toml"
    cfg.write_text(
        f'store = "{fleet.settings.store_url}"\n[fleet]\nmanifests = "{fleet.dir}"\n'
        '[reconcilers.hosts]\ninventory = "inventory.yaml"\n'
    )
    code, out, _ = datum_cli("drift", "hosts", "--json", "--config", str(cfg))
    assert code == 0
    assert [(i["id"], i["reason"]) for i in json.loads(out)["items"]] == [("db1", "hosts.never_reported")]
    code, out, _ = datum_cli("drift", "hosts", "--config", str(cfg))
    assert "db1" in out and "hosts.never_reported" in out


def test_every_surface_names_the_host_that_never_reported_and_words_undeclared_hosts_as_what_they_are(
    fleet, datum_cli, monkeypatch
):
    """One declared host never reports and ten undeclared ones report fine: /v1/attention, the page and
    ``datum drift`` / ``datum status`` at 80 columns name db1, and say the ten report without being declared
    (not "10 reaps: suppressed_no_reap"); ``datum explain`` reads each line back into its reason."""
    import html
    import re

    monkeypatch.setenv("COLUMNS", "80")
    strays = [f"stray{i}" for i in range(10)]
    for _ in range(3):
        fleet.reports("web1", "web2", *strays)
        fleet.tick()
    needs = fleet.client.get("/v1/attention", headers=fleet.operator).json()["needs"]
    assert [(n["reason"], n["text"]) for n in needs] == [
        ("hosts.never_reported", "host db1 is declared and has never reported (hosts)")
    ]
    assert "lastErr" not in needs[0]["do"] and "datum agent" in needs[0]["do"]
    page = html.unescape(re.sub(r"<[^>]+>|\s+", " ", fleet.client.get("/ui/overview", headers=fleet.operator).text))
    page = re.sub(r"\s+", " ", page)
    assert "host db1 is declared and has never reported" in page
    assert "10 hosts report that nodes.yaml does not declare; left alone (no_reap): stray0, stray1, stray2 and 7 more" in page
    assert "10 reaps" not in page and "1 restore:" not in page
    cfg = fleet.dir.parent / "datum.toml"
    cfg.write_text(
        f'store = "{fleet.settings.store_url}"\n[fleet]\nmanifests = "{fleet.dir}"\n'
        '[reconcilers.hosts]\ninventory = "inventory.yaml"\n'
    )
    code, out, _ = datum_cli("drift", "hosts", "--config", str(cfg))
    flat = re.sub(r"\s+", " ", out)
    assert code == 0 and "10 reaps" not in out and "1 restore" not in out
    assert "host db1 is declared and has never reported" in flat
    assert "10 hosts report that nodes.yaml" in out  # its column folds the rest of the phrase
    assert max(len(line) for line in out.splitlines()) <= 80
    for text, word in ((needs[0]["text"], "hosts.never_reported"),
                       ("10 hosts report that nodes.yaml does not declare; left alone (no_reap): stray0, stray1",
                        "suppressed_no_reap")):
        code, out, err = datum_cli("explain", text, "--json")
        assert code == 0, err
        assert json.loads(out)["explanations"][0]["name"] == word
    means = json.loads(out)["explanations"][0]["means"]  # the undeclared hosts' line: what a reap is here
    assert "agent tokens bound to an undeclared host revoked" in means and "nothing on the host" in means


def test_a_plugins_item_phrase_must_name_its_items_and_a_key_it_knows():
    from datum.sdk import ReconcilerPlugin

    ok = ReconcilerPlugin(name="x", reconciler=object, reasons={"stuck": "d"},
                          items={"stuck": ("{names} is stuck", "{n} are stuck: {names}"), "reap": ("a {names}", "{names}")})
    assert ok.problems() == []
    bad = ReconcilerPlugin(name="x", reconciler=object, items={"stuck": ("{names}", "{names}"),
                                                              "reap": ("a {host}", "{names}"), "align": ("no names", "{n}")})
    assert len(bad.problems()) == 3, bad.problems()
