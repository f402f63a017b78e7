"""``datum status`` reads the host its state file holds and exits with the contract's bits; ``--json`` on
every command that prints data (``token create|revoke``, ``reboot``, ``store migrate|recount``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datum.host.statefile import StateStore

from .scene import SILENT, Scene, reports

# The contract's bits of apply for the state a host reads, OR-ed with its pass's others (never "changed").
EXPECTED = {"web1": 4, "web2": 0, "web3": 8, "web4": 32, "web5": 16, "web6": 4, SILENT: 0}


def _file(tmp: Path, *reports: dict) -> Path:
    path = tmp / f"{'-'.join(r['host'] for r in reports)}.db"
    local = StateStore(str(path))
    for r in reports:
        local.record(r["host"], r)
    local.close()
    return path


@pytest.mark.parametrize("host", sorted(EXPECTED))
def test_status_of_another_hosts_file_reads_that_host_and_exits_with_its_states_bits(datum_cli, tmp_path, host):
    doc = reports()[host]
    path = _file(tmp_path, doc)
    code, out, err = datum_cli("status", "--state", str(path))
    assert code == EXPECTED[host], out + err
    assert out.startswith(f"host {host}: {doc['state']}") and f"host state: {doc['state']}" in out
    code, out, _ = datum_cli("status", "--state", str(path), "--json")
    assert code == EXPECTED[host] and json.loads(out) == doc


def test_status_before_any_pass_is_unknown_and_exits_4(datum_cli, tmp_path):
    code, out, _ = datum_cli("status", "--state", str(tmp_path / "none.db"), "--json")
    assert code == 4 and json.loads(out)["state"] == "unknown"


def test_a_file_of_several_hosts_needs_host(scene: Scene, datum_cli, tmp_path):
    path = _file(tmp_path, scene.reports["web3"], scene.reports["web5"])
    code, _out, err = datum_cli("status", "--state", str(path))
    assert code == 64 and "holds the reports of web3, web5" in err and "--host" in err
    code, out, _ = datum_cli("status", "--state", str(path), "--host", "web5")
    assert code == 16 and out.startswith("host web5: awaiting-reboot")
    assert "reboot needed: Package[linux-image-amd64] updated, running kernel differs; run 'datum reboot'" in (
        " ".join(out.split())
    )


def test_token_create_and_revoke_print_json(scene: Scene, datum_cli):
    cfg = str(scene.config)
    code, out, err = datum_cli("token", "create", "--principal", "agent", "--host", "web9", "--config", cfg, "--json")
    assert code == 0, err
    made = json.loads(out)
    assert set(made) == {"id", "principal", "host", "groups", "token"} and made["host"] == "web9"
    listed = json.loads(datum_cli("token", "list", "--config", cfg, "--json")[1])
    assert {"id": made["id"], "principal": "agent", "host": "web9"}.items() <= listed[-1].items()
    assert made["token"] not in json.dumps(listed)
    code, out, _ = datum_cli("token", "revoke", made["id"], "--config", cfg, "--json")
    assert code == 0 and json.loads(out) == {"id": made["id"], "principal": "agent", "host": "web9", "groups": None}


def test_token_create_scopes_a_token_to_host_groups(scene: Scene, datum_cli):
    cfg = str(scene.config)
    code, out, err = datum_cli("token", "create", "--principal", "viewer", "--group", "web", "--group", "db",
                               "--group", "web", "--config", cfg, "--json")
    assert code == 0, err
    made = json.loads(out)
    assert (made["principal"], made["host"], made["groups"]) == ("viewer", None, ["db", "web"])
    listed = json.loads(datum_cli("token", "list", "--config", cfg, "--json")[1])
    assert listed[-1]["groups"] == ["db", "web"]
    code, out, _ = datum_cli("token", "list", "--config", cfg)
    assert "db,web" in out
    code, _out, err = datum_cli("token", "create", "--principal", "agent", "--host", "web1", "--group", "web",
                                "--config", cfg)
    assert code == 64 and "an agent token speaks for one host" in err
    code, out, _err = datum_cli("token", "create", "--principal", "viewer", "--group", "no spaces", "--config", cfg,
                                "--json")
    assert code == 65 and json.loads(out)["issues"][0]["fields"][0]["field"] == "group"


def test_token_create_refuses_a_host_named_like_a_token(scene: Scene, datum_cli):
    """Issue 40: a token pasted for --host made a token bound to a host intake never accepts, and
    printed the pasted secret as a host name in datum token list."""
    cfg = str(scene.config)
    pasted = "datum_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
    code, out, err = datum_cli("token", "create", "--principal", "agent", "--host", pasted, "--config", cfg, "--json")
    assert code != 0 and pasted not in out + err
    problem = json.loads(out)
    [issue] = problem["issues"]
    assert issue["code"] == "INVALID_INPUT" and [f["field"] for f in issue["fields"]] == ["host"]
    assert "shaped like a bearer token" in issue["fields"][0]["message"]
    assert all(t["host"] != pasted for t in json.loads(datum_cli("token", "list", "--config", cfg, "--json")[1]))


def test_store_migrate_and_recount_print_json(scene: Scene, datum_cli, tmp_path):
    datum_cli("store", "migrate", "--config", str(scene.config))  # the plugins' branches, at their heads
    code, out, err = datum_cli("store", "migrate", "--config", str(scene.config), "--json")
    assert code == 0, err
    done = json.loads(out)
    assert done["upgraded"] is False and done["before"] == done["after"] and done["after"]
    fresh = tmp_path / "fresh.toml"
    fresh.write_text(f'store = "sqlite:///{tmp_path / "fresh.db"}"\n')
    done = json.loads(datum_cli("store", "migrate", "--config", str(fresh), "--json")[1])
    assert done["upgraded"] is True and done["before"] == [] and done["after"]
    import sqlite3

    from datum.store.status_counts import counts_name

    db = sqlite3.connect(tmp_path / "datum.db")
    with db:  # a kept count the triggers did not see: 5 active rows where there is 1, 7 more hosts failed
        db.execute(f'UPDATE "{counts_name("buckets")}" SET n = 5 WHERE status = \'active\'')
        failed = db.execute("SELECT count(*) FROM hosts WHERE state = 'failed'").fetchone()[0]
        db.execute(f'UPDATE "{counts_name("hosts")}" SET n = n + 7 WHERE status = \'failed\'')
        db.execute("UPDATE hosts_revision_status_counts SET n = n + 2 WHERE revision = '' AND status = 'failed'")
        db.execute("UPDATE hosts_group_status_counts SET n = n + 3 WHERE group_name = 'default' AND status = 'failed'")
    db.close()
    code, out, err = datum_cli("store", "recount", "--config", str(scene.config), "--json")
    assert code == 0, err
    assert {"reconciler": "buckets", "table": "buckets", "corrected": {"active": {"kept": 5, "true": 1}}} in (
        json.loads(out)
    )
    assert {"reconciler": None, "table": "hosts", "corrected": {"failed": {"kept": failed + 7, "true": failed}}} in (
        json.loads(out)
    )
    assert {"reconciler": None, "table": "hosts_revision_status_counts",
            "corrected": {" failed": {"kept": failed + 2, "true": failed}}} in json.loads(out)
    assert {"reconciler": None, "table": "hosts_group_status_counts",
            "corrected": {"default failed": {"kept": failed + 3, "true": failed}}} in json.loads(out)
    again = json.loads(datum_cli("store", "recount", "--config", str(scene.config), "--json")[1])
    assert {"reconciler": None, "table": "hosts_group_status_counts", "corrected": {}} in again
    assert {"reconciler": None, "table": "hosts_revision_status_counts", "corrected": {}} in again
    assert {"reconciler": "buckets", "table": "buckets", "corrected": {}} in again
    assert {"reconciler": None, "table": "hosts", "corrected": {}} in again


def test_reboot_prints_json(scene: Scene, datum_cli, tmp_path):
    boot = tmp_path / "boot_id"
    boot.write_text("b00t\n")
    done = tmp_path / "rebooted"
    config = tmp_path / "host.toml"
    config.write_text(f'[host]\nname = "web5"\nboot_id_file = "{boot}"\nreboot_command = "touch {done}"\n')
    state = _file(tmp_path, scene.reports["web5"], scene.reports["web2"])
    code, out, err = datum_cli("reboot", "--state", str(state), "--config", str(config), "--json")
    assert code == 0, err
    assert json.loads(out) == {
        "host": "web5", "needed": True, "reason": "Package[linux-image-amd64] updated, running kernel differs",
        "rebooting": True,
    }
    assert done.exists()
    config.write_text(f'[host]\nname = "web2"\nboot_id_file = "{boot}"\nreboot_command = "touch {done}"\n')
    code, out, _ = datum_cli("reboot", "--state", str(state), "--config", str(config), "--json")
    assert code == 0 and json.loads(out) == {"host": "web2", "needed": False, "reason": None, "rebooting": False}
