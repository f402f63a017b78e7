"""One front door: a request is admitted once (token to principal, Cedar's decision) by the guard, every
fast answer is an optimisation of a route registered on it, and every error body is written by one
function. Each test here fails if a second door comes back: a fast path that resolves the token or asks
Cedar again, a route table restated beside the routes, an error body built on the side."""

from __future__ import annotations

import ast
import configparser
import json
import pkgutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import datum.api
import datum.api.front
from datum.api.front import security
from datum.api.front.guard import served

from .story import pass_report, serve_fleet

ROOT = Path(__file__).resolve().parents[2]
API = Path(datum.api.__file__).parent
TOKEN_LIKE = "datum_" + "A" * 40  # what a token pasted into a URL by mistake looks like


@pytest.mark.parametrize(
    ("contract", "package"), [("api-front-door", datum.api), ("api-front-door-inside", datum.api.front)]
)
def test_every_module_of_the_api_is_in_a_layer_of_its_contract(contract, package):
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    layers = config[f"importlinter:contract:{contract}"]["layers"]
    listed = {m.strip() for line in layers.splitlines() for m in line.split(":") if m.strip()}
    assert {m.name for m in pkgutil.iter_modules(package.__path__)} == listed


def test_every_fast_answer_is_registered_on_a_served_route_that_needs_an_action(story):
    routes = served(story.app.router.routes)
    answers = security.fast_answers()
    assert len(answers) == 3  # the drift report, a pass report, the manifest
    for endpoint, answer in answers.items():
        (route,) = [r for r in routes if r.answer is answer]
        assert route.need is not None, f"{endpoint.__name__}'s fast answer is on a route that needs no action"


def _source_trees():
    for path in sorted(API.rglob("*.py")):
        yield path.relative_to(API).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def test_only_the_front_door_resolves_tokens_and_asks_cedar():
    """``security.principal`` and ``security.decision`` (which ``decide`` and a route's question ask) are the only
    callers of the token book and Cedar."""
    asks = {"known", "principal", "allowed", "decision"}
    callers: set[str] = set()
    for name, tree in _source_trees():
        if name == "front/tokens.py":
            continue
        functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in asks and isinstance(node.value, ast.Attribute)
                    and node.value.attr in ("tokens", "authorizer")):
                caller = [f.name for f in functions if f.lineno <= node.lineno <= (f.end_lineno or 0)]
                callers.add(f"{name}:{caller[-1] if caller else '<module>'}")
    assert callers == {"front/security.py:principal", "front/security.py:decision"}


def test_only_errors_writes_an_error_body():
    """No ``{"issues": ...}`` built, and no JSONResponse, outside ``datum.api.front.errors``."""
    for name, tree in _source_trees():
        if name == "front/errors.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                assert "issues" not in keys, f"{name}:{node.lineno} builds an error body"
            if isinstance(node, ast.Name | ast.Attribute):
                assert getattr(node, "id", getattr(node, "attr", None)) != "JSONResponse", f"{name}:{node.lineno}"


@pytest.fixture
def fleet(story, tmp_path):  # type: ignore[no-untyped-def]
    """The story with a fleet directory serving every host a manifest, and drift reports cached."""
    serve_fleet(story, tmp_path / "fleet", rule="*")
    state = story.app.state.datum
    state.reports.ttl = 60  # a cached drift report: the fast answer's case
    story.tick()
    story.agent("web1")  # its agent's token minted
    return story


AGENT = "agent@host:web1"


# (method, path, body) of each route with a fast answer
FAST_ROUTES = {
    "drift": ("GET", "/v1/observability/admin/reconcilers/{}/drift", None),
    "passes": ("POST", "/v1/hosts/{}/passes", "report"),
    "manifest": ("GET", "/v1/hosts/{}/manifest", None),
}


def _ask(client, story, route, principal, name):  # type: ignore[no-untyped-def]
    method, path, body = FAST_ROUTES[route]
    if name is None:
        name = "buckets" if route == "drift" else "web1"
    headers = {} if principal is None else {"Authorization": f"Bearer {story.tokens.get(principal, 'datum_nope')}"}
    content = json.dumps(pass_report(name) | {"seq": 7}).encode() if body else None
    if content:
        headers["Content-Type"] = "application/json"
    return client.request(method, path.format(name), content=content, headers=headers)


def _warm(story):  # type: ignore[no-untyped-def]
    """Every story token asked once, so the fast answers know them and each route's answer is composed."""
    for route in FAST_ROUTES:
        for principal in ("operator", AGENT, "stranger"):
            _ask(story.client, story, route, principal, None)


@pytest.mark.parametrize("route", sorted(FAST_ROUTES))
@pytest.mark.parametrize(
    ("principal", "name"),
    [(None, None), ("bogus", None), ("stranger", None), ("stranger", TOKEN_LIKE), ("operator", TOKEN_LIKE)],
)
def test_the_front_door_and_the_route_alone_answer_a_refusal_alike(fleet, route, principal, name):
    """The same request to the app (guard, fast answers) and to FastAPI alone (the route's ``needs``):
    the same status, body (shape and redaction) and ``WWW-Authenticate``."""
    _warm(fleet)
    alone = TestClient(fleet.app.framework, raise_server_exceptions=False)
    front = _ask(fleet.client, fleet, route, principal, name)
    route_alone = _ask(alone, fleet, route, principal, name)
    if principal == "operator" and route != "passes":
        pytest.skip("the operator may read these: not a refusal")
    assert front.status_code in (401, 403)
    assert (front.status_code, front.json()) == (route_alone.status_code, route_alone.json())
    assert front.headers.get("www-authenticate") == route_alone.headers.get("www-authenticate")
    assert TOKEN_LIKE not in front.text and "datum_nope" not in front.text
    if front.status_code == 403:
        (need,) = {r.need for r in served(fleet.app.router.routes) if r.answer is not None and r.need and
                   r.answer is security.fast_answers()[_endpoint(route)]}
        assert front.json()["issues"][0]["action"] == str(need[0])  # the route's own action


def _endpoint(route: str):  # type: ignore[no-untyped-def]
    from datum.api.routes import hosts, observability

    return {"drift": observability.drift, "passes": hosts.report_pass, "manifest": hosts.manifest}[route]


@pytest.mark.parametrize("route", sorted(FAST_ROUTES))
def test_a_fast_answer_gives_the_routes_answer(fleet, route):
    _warm(fleet)
    principal = "operator" if route == "drift" else "agent@host:web9" if route == "passes" else AGENT
    fleet.auth(principal)  # minted
    alone = TestClient(fleet.app.framework, raise_server_exceptions=False)
    if route == "passes":  # each stores a pass: the same seq again is the route's duplicate too
        first = _ask(fleet.client, fleet, route, principal, "web9")
        assert first.status_code == 201
    front = _ask(fleet.client, fleet, route, principal, "web9" if route == "passes" else None)
    slow = _ask(alone, fleet, route, principal, "web9" if route == "passes" else None)
    assert front.status_code == slow.status_code and front.json() == slow.json()
    assert front.headers["content-type"] == slow.headers["content-type"] == "application/json"
    assert front.headers.get("etag") == slow.headers.get("etag")
    assert front.headers.get("datum-pass") == slow.headers.get("datum-pass")


class Asks:
    """Counts the token book's and Cedar's lookups (wrapping the live state's own)."""

    def __init__(self, monkeypatch, state) -> None:  # type: ignore[no-untyped-def]
        self.tokens = 0
        self.cedar = 0
        known, decision = state.tokens.known, state.authorizer.decision

        def counted_known(token):  # type: ignore[no-untyped-def]
            self.tokens += 1
            return known(token)

        def counted_decision(*args):  # type: ignore[no-untyped-def]
            self.cedar += 1
            return decision(*args)

        monkeypatch.setattr(state.tokens, "known", counted_known)
        monkeypatch.setattr(state.authorizer, "decision", counted_decision)

    def reset(self) -> tuple[int, int]:
        was = (self.tokens, self.cedar)
        self.tokens = self.cedar = 0
        return was


def test_a_request_is_admitted_once_whoever_answers_it(fleet, monkeypatch):
    """The token resolved and Cedar asked once per request: by the fast answer's path and by the route's."""
    _warm(fleet)
    asks = Asks(monkeypatch, fleet.app.state.datum)
    agent = fleet.agent("web1")
    report = pass_report("web1") | {"seq": 8}
    fast = fleet.client.post("/v1/hosts/web1/passes", json=report, headers=agent)
    assert fast.status_code == 201 and asks.reset() == (1, 1)
    wrong_host = fleet.client.post("/v1/hosts/web1/passes", json=report | {"host": "web2"}, headers=agent)  # the route's 422
    assert wrong_host.status_code == 422 and asks.reset() == (1, 1)
    assert fleet.client.get("/v1/hosts/web1", headers=fleet.auth()).status_code == 200  # a route only
    assert asks.reset() == (1, 1)
    assert fleet.get("/v1/observability/admin/reconcilers/buckets/drift").status_code == 200
    assert asks.reset() == (1, 1)
    assert fleet.client.get("/v1/hosts/web1/manifest?x=1", headers=agent).status_code == 200  # query: the route
    assert asks.reset() == (1, 1)


def test_a_fast_answer_is_offered_only_what_its_route_admits(fleet, monkeypatch):
    """The fast answers run only for a principal Cedar allows the route's action; never for another."""
    _warm(fleet)
    offered: list[str] = []
    from datum.api.routes import hosts, observability

    for module, name in ((observability, "drift_now"), (hosts, "report_pass_now"), (hosts, "manifest_now")):
        real = getattr(module, name)

        async def spy(asked, _real=real, _name=name):  # type: ignore[no-untyped-def]
            offered.append(_name)
            return await _real(asked)

        endpoint = {"drift_now": observability.drift, "report_pass_now": hosts.report_pass,
                    "manifest_now": hosts.manifest}[name]
        monkeypatch.setitem(security._FAST, endpoint, spy)
    fleet.app.front.app._served = None  # the guard walks its routes again, with the spies on them
    for route in FAST_ROUTES:
        assert _ask(fleet.client, fleet, route, "stranger", None).status_code == 403
    assert _ask(fleet.client, fleet, "passes", "operator", None).status_code == 403  # reads, does not report
    assert offered == []
    assert _ask(fleet.client, fleet, "drift", "operator", None).status_code == 200
    assert _ask(fleet.client, fleet, "manifest", AGENT, None).status_code == 200
    assert offered == ["drift_now", "manifest_now"]
