"""The intake fast answer: a known agent's valid report is stored without FastAPI's routing, with the
route's own answers; anything in doubt (unknown token, refusal, bad body, wrong content type) goes to
the route, so every error keeps its one path and shape."""

from __future__ import annotations

import json
import sys

import pytest

import datum.api.routes.hosts as route

from .story import pass_report


@pytest.fixture
def paths(monkeypatch):  # type: ignore[no-untyped-def]
    """Which of the two took each report: the fast answer or the route, as they call the route's ``take``."""
    taken: list[str] = []
    real = route.take

    def spy(*args):  # type: ignore[no-untyped-def]
        # the route's endpoint calls take itself; the fast answer hands it to a worker thread
        taken.append("route" if sys._getframe(1).f_code is route.report_pass.__code__ else "fast")
        return real(*args)

    monkeypatch.setattr(route, "take", spy)
    return taken


def post(story, body, host="web1", content_type="application/json"):  # type: ignore[no-untyped-def]
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**story.agent(host), "Content-Type": content_type}
    return story.client.post(f"/v1/hosts/{host}/passes", content=data, headers=headers)


def test_a_known_agents_reports_take_the_fast_path_with_the_routes_answers(story, paths):
    # the request guard looked the token up in the store (off the event loop): the fast path knows it
    first = post(story, pass_report() | {"seq": 1, "passId": "p1"})
    assert first.status_code == 201 and paths == ["fast"]
    second = post(story, pass_report() | {"seq": 2, "passId": "p2"})
    assert second.status_code == 201 and paths == ["fast", "fast"]
    assert second.json() == story.get("/v1/hosts/web1").json()
    again = post(story, pass_report() | {"seq": 2, "passId": "p2"})
    assert again.status_code == 200 and again.headers["Datum-Pass"] == "duplicate"
    older = post(story, pass_report() | {"seq": 1, "passId": "p1"})
    assert older.status_code == 200 and older.headers["Datum-Pass"] == "older"
    assert paths == ["fast"] * 4
    assert story.get("/v1/hosts/web1").json()["seq"] == 2  # never an older pass over a newer


def test_what_is_in_doubt_goes_to_the_route_and_gets_its_errors(story, paths):
    assert post(story, pass_report() | {"seq": 1}).status_code == 201  # caches the token
    paths.clear()
    bad = post(story, pass_report() | {"state": "happy", "extra": 1})
    assert bad.status_code == 422 and {f["field"] for f in bad.json()["issues"][0]["fields"]} >= {"state", "extra"}
    assert post(story, b"{nope").status_code == 422
    wrong_host = post(story, pass_report("web1") | {"seq": 3}, host="web2")
    assert wrong_host.status_code == 422 and wrong_host.json()["issues"][0]["fields"][0]["field"] == "host"
    text = post(story, pass_report() | {"seq": 4}, content_type="text/plain")
    assert text.status_code == 422
    assert paths == ["route"]  # only the wrong host reached take, through the route, which refused it
    lying = post(story, pass_report(state="converged") | {"seq": 5})  # validates, does not hold together
    assert lying.status_code == 422 and "roll up to 'failed'" in lying.text and paths == ["route", "fast"]
    operator = story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.auth())
    assert operator.status_code == 403 and operator.json()["issues"][0]["action"] == "fleet:ReportPass"
