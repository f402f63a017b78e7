"""``datum history HOST`` and ``datum events``: the pass archive at 80 columns, the same JSON as the API, and
findings for what is not a time or a cursor."""

from __future__ import annotations

import json
import re

from fastapi.testclient import TestClient

from datum.api.app import create_app
from datum.config import load_settings
from datum.plugins import load
from datum.store import open_store

from .scene import SILENT, Scene


def fits(out: str, width: int = 80) -> list[str]:
    lines = out.splitlines()
    assert not [line for line in lines if len(line) > width]
    return lines


def api(scene: Scene, path: str) -> dict:
    settings = load_settings(str(scene.config))
    store = open_store(settings.store_url)
    try:
        with TestClient(create_app(settings, load().registry(), store)) as client:
            r = client.get(path, headers={"Authorization": f"Bearer {scene.operator}"})
            assert r.status_code == 200, r.text
            return r.json()
    finally:
        store.dispose()


def test_history_lists_a_hosts_passes_with_both_times_and_the_same_json_as_the_api(scene: Scene, datum_cli):
    code, out, err = datum_cli("history", "web1", "--config", str(scene.config))
    assert code == 0, err
    lines = fits(out)
    assert lines[0].split() == ["finished", "state", "resources", "received", "pass"]
    # finished by the host's clock 3 minutes ago, received just now: both shown
    assert re.match(r"^3m \d+s ago +failed +1 failed, 1 blocked, 1 converged +(\d+s ago|just now) ", lines[2]), lines[2]
    assert "File[/etc/app/conf1.d/settings.conf] failed" in " ".join(out.split())  # the reason, under its row
    code, out, err = datum_cli("history", "web1", "--config", str(scene.config), "--json")
    assert code == 0, err
    assert json.loads(out) == api(scene, "/v1/hosts/web1/passes")
    _code, out, _err = datum_cli("history", "web1", "--config", str(scene.config), "--since", "1m")
    assert "no pass of this host is kept in that window" in out
    _code, out, _err = datum_cli("history", "web1", "--config", str(scene.config), "--wide")
    assert " UTC" in out and "ago" not in out
    code, out, err = datum_cli("history", "web9", "--config", str(scene.config))  # never reported: as the API
    assert code == 64 and "no host named 'web9' has reported a pass" in err, (code, err)


def test_events_list_what_failed_across_the_fleet(scene: Scene, datum_cli):
    code, out, err = datum_cli("events", "--config", str(scene.config), "--since", "1h")
    assert code == 0, err
    lines = fits(out)
    assert lines[0].split() == ["finished", "host", "resource", "action", "state"]
    flat = " ".join(out.split())
    assert "web1" in flat and "web3" in flat and SILENT[:10] not in flat  # the silent host's pass is 5h old
    _code, out, _err = datum_cli("events", "--config", str(scene.config), "--state", "failed", "--json")
    doc = json.loads(out)
    assert [(e["host"], e["state"]) for e in doc["events"]] == [("web1", "failed")]
    assert doc == api(scene, "/v1/events?state=failed")
    _code, out, _err = datum_cli("events", "--config", str(scene.config), "--host", "web3", "--json")
    assert [(e["resource"], e["state"]) for e in json.loads(out)["events"]] == [
        ("File[/etc/app/conf1.d/settings.conf]", "drifted")
    ]


def test_a_bad_since_or_cursor_is_a_finding(scene: Scene, datum_cli):
    code, out, err = datum_cli("events", "--config", str(scene.config), "--since", "yesterday", "--json")
    assert code == 65
    (issue,) = json.loads(out or err)["issues"]
    assert issue["fields"][0]["field"] == "--since"
    code, out, err = datum_cli("history", "web1", "--config", str(scene.config), "--cursor", "nope", "--json")
    assert code == 65 and json.loads(out or err)["issues"][0]["fields"][0]["field"] == "--cursor"


def test_history_shows_each_pass_number_whole_and_the_api_takes_it(scene: Scene, datum_cli):
    """Issue 40: at 80 columns the pass id (what GET /v1/hosts/{host}/passes/{pass} wants) was cut
    across three lines (an agent's pass id is a 36-character UUID); the table shows the archive's
    number instead, whole, and the route takes it."""
    import uuid

    from .scene import C as CONVERGED
    from .scene import report

    agent_pass = {**report("web1", [(CONVERGED, None)]), "passId": str(uuid.uuid4()), "seq": 1}
    settings = load_settings(str(scene.config))
    store = open_store(settings.store_url)
    try:
        with TestClient(create_app(settings, load().registry(), store)) as client:
            r = client.post("/v1/hosts/web1/passes", json=agent_pass,
                            headers={"Authorization": f"Bearer {scene.tokens['web1']}"})
            assert r.status_code in (200, 201), r.text
    finally:
        store.dispose()
    code, out, err = datum_cli("history", "web1", "--config", str(scene.config))
    assert code == 0, err
    lines = fits(out)
    listed = json.loads(datum_cli("history", "web1", "--config", str(scene.config), "--json")[1])["passes"]
    assert agent_pass["passId"] in {p.get("passId") for p in listed}
    for p in listed:
        row = next(line for line in lines if line.rstrip().endswith(f" {p['id']}"))
        assert row, (p, out)
        assert api(scene, f"/v1/hosts/web1/passes/{p['id']}")["id"] == p["id"]
