"""``datum audit`` and ``datum audit verify`` on the scene's store (issue 37 item 4): the CLI's own acts on the store
(token create and revoke, reboots clear) are rows of principal ``cli:<user>``; a command that changes nothing leaves
none; the table, ``--json``, the filters; verify exits 0 on a whole chain and 1 naming the first broken row."""

from __future__ import annotations

import json
from datetime import timedelta

import sqlalchemy as sa

from datum.config import load_settings
from datum.store import audit, open_store
from datum.store.leases import take
from datum.store.schema import audit_log

from .scene import Scene


def _store(scene: Scene):  # type: ignore[no-untyped-def]
    return open_store(load_settings(scene.config).store_url)


def test_the_clis_acts_are_rows_and_datum_audit_shows_them(scene: Scene, datum_cli):
    cfg = str(scene.config)
    me = audit.local_principal()
    code, out, err = datum_cli("token", "create", "--principal", "viewer", "--config", cfg, "--json")
    assert code == 0, err
    made = json.loads(out)
    assert datum_cli("token", "revoke", made["id"], "--config", cfg)[0] == 0
    store = _store(scene)
    try:
        take(store, "web1", "web", "b1", 1, timedelta(hours=1))  # a lease to clear
    finally:
        store.dispose()
    assert datum_cli("reboots", "clear", "web1", "--force", "--config", cfg)[0] == 0
    assert datum_cli("reboots", "clear", "web1", "--config", cfg)[0] == 64  # none held now: nothing done, no row
    assert datum_cli("rollout", "pause", "--config", cfg)[0] == 64  # no rollout: nothing done, no row

    code, out, err = datum_cli("audit", "--principal", me, "--limit", "3", "--config", cfg, "--json")
    assert code == 0, err
    page = json.loads(out)
    assert [(e["action"], e["resource"], e["outcome"]) for e in page["entries"]] == [
        ("fleet:ClearRebootLease", 'Host::"web1"', "allowed"),
        ("token:Revoke", f'Token::"{made["id"]}"', "allowed"),
        ("token:Create", f'Token::"{made["id"]}"', "allowed"),
    ]
    assert page["entries"][0]["request"] == "datum reboots clear web1 --force" and "status" not in page["entries"][0]
    assert "seq" not in page["entries"][0]  # no server sealed them yet: listed all the same
    assert page["entries"][2]["detail"] == "principal viewer" and "next" in page
    assert made["token"] not in out
    code, out, _ = datum_cli("audit", "--action", "token:Revoke", "--config", cfg)
    assert code == 0 and "token:Revoke" in out and made["id"] in out and "token:Create" not in out
    code, out, _ = datum_cli("audit", "--since", "2099-01-01T00:00:00Z", "--config", cfg)
    assert code == 0 and "no audit row" in out


def test_verify_passes_then_names_the_row_edited_in_the_store(scene: Scene, datum_cli):
    cfg = str(scene.config)
    for principal in ("viewer", "operator"):
        assert datum_cli("token", "create", "--principal", principal, "--config", cfg)[0] == 0
    code, out, err = datum_cli("audit", "verify", "--config", cfg)  # no server sealed them: verify does, then checks
    assert code == 0, err
    assert "whole" in out and "not chained yet" not in out
    code, out, _ = datum_cli("audit", "verify", "--config", cfg, "--json")
    whole = json.loads(out)
    assert code == 0 and whole["whole"] and whole["rows"] >= 2 and whole["head"]["seq"] == whole["rows"]
    store = _store(scene)
    try:
        with store.begin() as conn:  # someone with the store's password changes who did it
            conn.execute(sa.update(audit_log).where(audit_log.c.seq == 2).values(principal="someone-else"))
    finally:
        store.dispose()
    code, out, err = datum_cli("audit", "verify", "--config", cfg)
    assert code == 1
    assert "broken at row 2" in err and "changed after it was written" in err
    code, out, _ = datum_cli("audit", "verify", "--config", cfg, "--json")
    assert code == 1 and json.loads(out)["broken"]["seq"] == 2
