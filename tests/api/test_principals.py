"""Principals by what they may do, and tokens scoped to host groups, against a real ``datum serve``.

Every route that needs a Cedar action is taken from the app's own route table (``iter_route_contexts``, what
the request guard routes by), so a route added later is asked too: a ``viewer`` is answered 200 on every read
and 403 naming the action on every act; a token scoped to ``--group web`` never sees a ``db`` host in any
list, page, metric or event, and is refused on ``db`` hosts. docs/server.md's table of who may do what is
asked of Cedar, cell by cell.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from datum.api.app import create_app
from datum.api.front import tokens
from datum.api.front.authz import (
    SERVER,
    Authorizer,
    bound,
    host,
    reconciler,
    scoped,
    shipped_policies,
    shipped_schema,
)
from datum.api.front.security import need_of
from datum.config import Settings
from datum.plugins import load
from datum.store import open_store

from .story import config_file, pass_report, serving

DOCS = Path(__file__).parents[2] / "docs" / "server.md"
WEB, DB = ("web1", "web2"), ("db1", "db2")


def _schema() -> str:
    return shipped_schema(p.cedar_schema for p in load().plugins if p.cedar_schema)


def _reads(schema: str) -> set[str]:
    """The actions the schema puts in the ``read`` group."""
    return set(re.findall(r'action "([^"]+)" in \["read"\]', schema))


# -- the docs' table ------------------------------------------------------------------------------

_EXAMPLE = {"Server": SERVER, "Host": host("web1"), "Reconciler": reconciler("buckets"), "Bucket": ("Bucket", "alpha")}


def test_the_docs_table_of_who_may_do_what_is_the_shipped_policys():
    text = DOCS.read_text(encoding="utf-8")
    table = text.split("<!-- principals table: checked against default.cedar -->")[1].split("<!-- end of")[0]
    rows = [[c.strip().strip("`") for c in line.strip().strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    schema = _schema()
    authz = Authorizer(shipped_policies(), schema)
    principals = {"viewer": "viewer", "operator": "operator", "admin": "admin", "agent": bound("agent", "web1")}
    assert {r[0] for r in rows} == set(re.findall(r'action "([^"]+)"', schema)) - {"read", "write"}
    for action, on, *cells in rows:
        for (name, principal), cell in zip(principals.items(), cells, strict=True):
            for kind in (k.strip().strip("`") for k in on.split(",")):
                allowed = authz.allowed(principal, action, _EXAMPLE[kind])
                said = cell in ("yes", "its own")
                assert allowed is said, (action, kind, name, cell)
                if cell == "its own":  # and on no other host
                    assert not authz.allowed(principal, action, host("web2"))


def test_an_unscoped_principal_in_its_plain_name_and_a_scoped_one_only_on_its_groups():
    authz = Authorizer(shipped_policies(), _schema())
    web = scoped("operator", ["web"])
    assert authz.allowed(web, "fleet:ReadHost", host("web1"), "web")
    assert not authz.allowed(web, "fleet:ReadHost", host("db1"), "db")
    assert not authz.allowed(web, "fleet:ReadHost", host("new1"), None)  # a host the store does not know
    assert authz.allowed(web, "fleet:ClearRebootLease", host("web1"), "web")
    assert not authz.allowed(web, "fleet:ClearRebootLease", host("db1"), "db")
    assert authz.allowed(web, "fleet:ReadHost", SERVER)  # the list, which the server filters
    assert not authz.allowed(web, "fleet:ManageRollout", SERVER)  # fleet-wide: an unscoped token's
    decided = authz.decision(web, "fleet:ReadHost", host("db1"), "db")
    assert decided.policies == ("scoped-own-groups",)
    assert authz.decision("viewer", "fleet:ReadHost", SERVER).policies == ("viewer-reads",)


# -- a real datum serve ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    """A ``datum serve`` whose nodes.yaml puts web* in group web and db* in group db, each host reported once by
    its own agent; the tokens of every principal, and ``--group web`` ones."""
    tmp = tmp_path_factory.mktemp("principals")
    directory = tmp / "fleet"
    directory.mkdir()
    (directory / "nodes.yaml").write_text(
        "nodes:\n"
        "  - match: {name: 'web*'}\n    manifests: [motd.yaml]\n    group: web\n"
        "  - match: {name: 'db*'}\n    manifests: [motd.yaml]\n    group: db\n"
    )
    (directory / "motd.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: hello\n")
    cfg = config_file(tmp, scheduler=False)
    cfg.write_text(cfg.read_text() + f'[fleet]\nmanifests = "{directory}"\n')
    store = open_store(f"sqlite:///{tmp / 'datum.db'}")
    made = {p: tokens.create(store, p) for p in ("viewer", "operator", "admin")}
    made["web-operator"] = tokens.create(store, "operator", groups=["web"])
    made["web-viewer"] = tokens.create(store, "viewer", groups=["web"])
    agents = {h: tokens.create(store, "agent", h) for h in (*WEB, *DB)}
    store.dispose()
    with serving(cfg, tmp / "serve.log") as base:
        for name, token in agents.items():
            report = pass_report(name) | {"passId": f"p-{name}"}
            answer = httpx.post(f"{base}v1/hosts/{name}/passes", json=report, headers=_auth(token), timeout=30)
            assert answer.status_code == 201, answer.text
        yield base, made, cfg, tmp


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _routes() -> list[tuple[str, str, str]]:
    """(method, path template, Cedar action) of every route of the app that needs an action."""
    app = create_app(Settings.model_validate({"store": "sqlite://"}))
    found = []
    for route in iter_route_contexts(app.router.routes):
        need = need_of(getattr(route, "dependant", None))
        if need is None:
            continue
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                found.append((method, route.path, str(need[0])))
    return found


def _path(template: str, name: str) -> str:
    """``template`` with its parameters filled: the host ``name``, its kept pass, the buckets reconciler, ..."""
    bucket = template.startswith("/v1/buckets")
    return (template.replace("{host}", name).replace("{pass}", f"p-{name}").replace("{action}", "pause")
            .replace("{name}", "alpha" if bucket else "buckets"))


ROUTES = _routes()
READS = _reads(_schema())


def test_the_route_table_is_what_this_test_asks():
    """A read and an act of each kind are among the routes: the table was read, not an empty list."""
    actions = {a for _m, _p, a in ROUTES}
    assert {"fleet:ReadHost", "fleet:ReportPass", "fleet:ManageRollout", "fleet:ClearRebootLease"} <= actions
    assert any(a in READS for a in actions) and any(a not in READS for a in actions)


def test_a_viewer_reads_every_read_route_and_is_refused_every_act(fleet):
    base, made, _cfg, _tmp = fleet
    for method, template, action in ROUTES:
        path = _path(template, "web1")
        answer = httpx.request(method, base + path.lstrip("/"), headers=_auth(made["viewer"]),
                               json={} if method in ("POST", "PUT") else None, timeout=30)
        if action in READS:
            assert answer.status_code == 200, (method, path, answer.text)
        else:
            assert answer.status_code == 403, (method, path, answer.text)
            issue = answer.json()["issues"][0]
            assert (issue["code"], issue["action"]) == ("FORBIDDEN", action), (method, path)


def _lists(base: str, token: str) -> dict[str, str]:
    """Every list, page, metric and event read, by path: the answers' bodies."""
    paths = ["v1/hosts", "v1/hosts?state=failed", "v1/events", "v1/attention", "v1/reboots", "v1/rollouts",
             "v1/revisions", "ui/overview", "ui/overview?hosts=failed", "metrics"]
    found = {}
    for path in paths:
        answer = httpx.get(base + path, headers=_auth(token), timeout=30)
        assert answer.status_code == 200, (path, answer.text)
        found[path] = answer.text
    return found


@pytest.mark.parametrize("who", ["web-operator", "web-viewer"])
def test_a_token_scoped_to_web_never_sees_a_db_host_and_is_refused_on_them(fleet, who):
    base, made, _cfg, _tmp = fleet
    token = made[who]
    seen = _lists(base, token)
    for path, body in seen.items():
        for name in DB:
            assert name not in body, (path, name)
    assert {h["host"] for h in json.loads(seen["v1/hosts"])["hosts"]} == set(WEB)
    assert sum(json.loads(seen["v1/hosts"])["counts"].values()) == len(WEB)  # the counts are its groups' too
    assert {e["host"] for e in json.loads(seen["v1/events"])["events"]} == set(WEB)
    assert 'datum_host_state{host="web1"' in seen["metrics"]
    assert 'group="db"' not in seen["metrics"] and 'group="web"' in seen["metrics"]
    # the unscoped token sees both: what was filtered was there
    every = _lists(base, made["viewer"])
    assert all(name in every["v1/hosts"] and name in every["metrics"] for name in DB)
    for method, template, action in ROUTES:
        if "{host}" not in template:
            continue
        path = _path(template, "db1")
        answer = httpx.request(method, base + path.lstrip("/"), headers=_auth(token),
                               json={} if method in ("POST", "PUT") else None, timeout=30)
        assert answer.status_code == 403, (method, path, answer.text)
        assert answer.json()["issues"][0]["action"] == action
        if action in READS:  # its own group's host reads
            mine = httpx.request(method, base + _path(template, "web1").lstrip("/"), headers=_auth(token), timeout=30)
            assert mine.status_code == 200, (method, template, mine.text)


def test_a_scoped_operator_clears_its_groups_leases_and_steers_no_rollout(fleet):
    base, made, _cfg, _tmp = fleet
    token = made["web-operator"]
    refused = httpx.delete(base + "v1/reboots/db1", headers=_auth(token), timeout=30)
    assert refused.status_code == 403 and refused.json()["issues"][0]["action"] == "fleet:ClearRebootLease"
    assert "scoped-own-groups" in refused.json()["issues"][0]["message"]
    own = httpx.delete(base + "v1/reboots/web1", headers=_auth(token), timeout=30)
    assert own.status_code == 404 and "holds no reboot lease" in own.text  # allowed: there is none to clear
    fleet_wide = httpx.post(base + "v1/rollouts/current/pause", headers=_auth(token), timeout=30)
    assert fleet_wide.status_code == 403 and fleet_wide.json()["issues"][0]["action"] == "fleet:ManageRollout"
    assert httpx.post(base + "v1/rollouts/current/pause", headers=_auth(made["operator"]), timeout=30).status_code == 404


def test_authz_explain_says_allow_or_deny_and_the_policy_that_decided(fleet, datum_cli, tmp_path):
    _base, made, cfg, _tmp = fleet
    file = tmp_path / "token"
    file.write_text(made["web-operator"] + "\n")
    file.chmod(0o600)
    code, out, _err = datum_cli("authz", "explain", "--token-file", str(file), "fleet:ReadHost", 'Host::"db1"',
                                "--config", str(cfg))
    assert code == 1, out
    assert out.startswith('deny: Principal::"operator@groups:web" may not') and 'in HostGroup::"db"' in out
    assert "forbidden by policy scoped-own-groups" in out
    code, out, _err = datum_cli("authz", "explain", "--token-file", str(file), "fleet:ReadHost", 'Host::"web1"',
                                "--config", str(cfg), "--json")
    assert code == 0
    said = json.loads(out)
    assert (said["decision"], said["group"], said["policies"]) == ("allow", "web", ["operator-reads"])
    assert made["web-operator"] not in out
    code, _out, err = datum_cli("authz", "explain", "--token-file", str(file), "fleet:Nope", "Server",
                                "--config", str(cfg))
    assert code == 64 and "no Cedar action 'fleet:Nope'" in err
