"""The reboot budget's endpoints and the hosts' ``rebooting`` field walk the typed OpenAPI document."""

from __future__ import annotations

import json
from datetime import timedelta

from datum.config import FleetSettings

from .story import build_story, pass_report
from .test_typed_api import Checker

LEASE = "/v1/hosts/{host}/reboot-lease"


def test_lease_answers_hosts_and_the_reboots_list_are_typed(tmp_path):
    s = build_story(tmp_path)
    try:
        checker = Checker(s.app.openapi())
        check = checker.check
        s.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=s.agent("web1"))  # boot b00t
        granted = check(
            s.client.post("/v1/hosts/web1/reboot-lease", json={"bootId": "b00t", "facts": {"kernel": "6.1"}},
                          headers=s.agent("web1")), LEASE,
        )
        assert granted["granted"] and granted["group"] == "default" and granted["limit"] == 1
        assert granted["lease"]["host"] == "web1" and "reason" not in granted
        waiting = check(s.client.post("/v1/hosts/web2/reboot-lease", json={"bootId": "b1"}, headers=s.agent("web2")), LEASE)
        assert not waiting["granted"] and "lease" not in waiting
        assert waiting["reason"] == "waiting for the group's reboot budget (1/1 rebooting)"
        assert [x["host"] for x in waiting["rebooting"]] == ["web1"]
        one = check(s.get("/v1/hosts/web1"), "/v1/hosts/{host}")
        assert one["rebooting"] == granted["lease"]
        assert check(s.get("/v1/hosts"), "/v1/hosts")["hosts"][0]["rebooting"] == granted["lease"]
        listed = check(s.get("/v1/reboots"), "/v1/reboots")
        assert listed["limit"] == 1 and listed["timeoutSeconds"] == 3600
        assert listed["groups"] == [  # web2 asked and waits: its ask is listed until it expires or is served
            {"group": "default", "rebooting": [granted["lease"]], "overdue": [], "waiting": ["web2"]}
        ]
        # refusals: no boot id; a principal that may not take leases
        assert check(s.client.post("/v1/hosts/web1/reboot-lease", json={}, headers=s.agent("web1")), LEASE)[
            "issues"][0]["code"] == "INVALID_INPUT"
        refused = check(s.client.post("/v1/hosts/web1/reboot-lease", json={"bootId": "b"}, headers=s.auth("operator")), LEASE)
        assert refused["issues"][0]["action"] == "fleet:TakeRebootLease"
        # back from a reboot: a report from another boot id releases the lease, once converged and healthy
        s.client.post("/v1/hosts/web1/passes", json=pass_report() | {"bootId": "b00t-2"}, headers=s.agent("web1"))
        kept = check(s.get("/v1/hosts/web1"), "/v1/hosts/{host}")["rebooting"]
        assert kept["unhealthy"] == "came back failed: File[motd] failed: permission denied"
        whole = {k: v for k, v in pass_report(state="converged").items() if k != "reason"}
        whole |= {"bootId": "b00t-2", "exitCode": 0, "counts": {"converged": 1}, "resources": whole["resources"][:1]}
        sick = {"seq": 2, "health": {"ok": False, "detail": "health_check (check-app) exited 1"}}
        assert s.client.post("/v1/hosts/web1/passes", json=whole | sick, headers=s.agent("web1")).status_code == 201
        kept = check(s.get("/v1/reboots"), "/v1/reboots")["groups"][0]["rebooting"][0]
        assert kept["unhealthy"] == "came back unhealthy: health_check (check-app) exited 1"
        well = {"seq": 3, "health": {"ok": True}}
        assert s.client.post("/v1/hosts/web1/passes", json=whole | well, headers=s.agent("web1")).status_code == 201
        assert "rebooting" not in s.get("/v1/hosts/web1").json()
        # given back (the reboot command failed): only the lease of that boot
        assert s.client.post("/v1/hosts/web2/reboot-lease", json={"bootId": "b1"}, headers=s.agent("web2")).json()["granted"]
        assert s.client.delete("/v1/hosts/web2/reboot-lease?bootId=b0", headers=s.agent("web2")).status_code == 204
        assert s.get("/v1/reboots").json()["groups"][0]["rebooting"]
        assert s.client.delete("/v1/hosts/web2/reboot-lease?bootId=b1", headers=s.agent("web2")).status_code == 204
        assert s.get("/v1/reboots").json()["groups"][0]["rebooting"] == []
    finally:
        s.client.close()
        s.store.dispose()


def test_a_group_halted_by_a_host_not_back_says_so_until_an_operator_clears_it(tmp_path, datum_cli):
    s = build_story(tmp_path)
    state = s.app.state.datum
    state.settings = state.settings.model_copy(
        update={"fleet": FleetSettings(reboot_timeout=timedelta(seconds=1), reboot_concurrency=2)}
    )
    try:
        checker = Checker(s.app.openapi())
        ask = lambda host: checker.check(  # noqa: E731
            s.client.post(f"/v1/hosts/{host}/reboot-lease", json={"bootId": "b1"}, headers=s.agent(host)), LEASE
        )
        assert ask("web1")["granted"]
        import time

        time.sleep(1.2)  # web1 has not reported from a new boot within reboot_timeout
        halted = ask("web2")
        assert not halted["granted"] and [x["host"] for x in halted["halted"]] == ["web1"]
        assert halted["reason"] == (
            "the group's reboots are halted: web1 has not come back from a reboot within [fleet] reboot_timeout"
        )
        code, out, _ = datum_cli("explain", halted["reason"])
        assert code == 0 and "reboot_halted" in out and "datum reboots clear HOST" in out
        cfg = tmp_path / "datum.toml"
        cfg.write_text(f'store = "{s.settings.store_url}"\n')
        code, out, err = datum_cli("reboots", "list", "--config", str(cfg))
        assert code == 0 and "web1" in out and "overdue: its group is halted" in out
        code, out, err = datum_cli("reboots", "clear", "web1", "--config", str(cfg), "--json")
        assert code == 0, err
        assert json.loads(out)["host"] == "web1"
        assert datum_cli("reboots", "clear", "web1", "--config", str(cfg))[0] == 64  # no lease left: NOT_FOUND
        assert ask("web2")["granted"]
        code, out, err = datum_cli("reboots", "clear", "web2", "--config", str(cfg))  # live: web2 may be rebooting
        assert code == 65 and "web2 holds a live reboot lease" in err and "--force" in err, err
        assert [x["host"] for x in s.get("/v1/reboots").json()["groups"][0]["rebooting"]] == ["web2"]
        code, out, err = datum_cli("reboots", "clear", "web2", "--force", "--config", str(cfg))
        assert code == 0 and "cleared the reboot lease of web2" in out, err
        assert s.get("/v1/reboots").json()["groups"][0]["rebooting"] == []
    finally:
        s.client.close()
        s.store.dispose()
