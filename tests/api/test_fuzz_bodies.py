"""Any body, to every route that takes one: an answer in the contract's shape, never a 5xx.

Hypothesis sends arbitrary bytes, arbitrary JSON, and pass reports with one
field replaced by arbitrary JSON (the near misses a parser lets through: NaN,
huge numbers, wrong types, deep nesting), with and without a token.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .story import build_story, pass_report

_story = None


def story():  # type: ignore[no-untyped-def]
    """One story for the module: examples share a store, as a live server's requests do."""
    global _story
    if _story is None:
        import tempfile

        _story = build_story(Path(tempfile.mkdtemp(prefix="datum-fuzz-")))
    return _story


def body_routes() -> list[tuple[str, str]]:
    """(method, path) of every route that may take a body, path parameters filled in."""
    out = []
    for path, operations in story().app.openapi()["paths"].items():
        for method in sorted(operations):
            if method in ("post", "put", "patch", "delete"):
                out.append((method.upper(), path.replace("{host}", "web1").replace("{name}", "alpha")))
    return out


ROUTES = body_routes()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=20), inner, max_size=5),
    max_leaves=30,
)
REPORT_KEYS = sorted(pass_report())
RESOURCE_KEYS = ["id", "type", "name", "action", "state", "changed", "reason", "error", "blockedBy", "diff",
                 "durationSeconds", "sensitive"]


@st.composite
def near_miss_reports(draw: st.DrawFn) -> bytes:
    report = pass_report()
    if draw(st.booleans()):
        report[draw(st.sampled_from(REPORT_KEYS))] = draw(json_values)
    else:
        resource = report["resources"][draw(st.integers(0, 2))]
        resource[draw(st.sampled_from(RESOURCE_KEYS))] = draw(json_values)
    return json.dumps(report, allow_nan=True).encode()


bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v, allow_nan=True).encode()),
    near_miss_reports(),
    st.sampled_from([b"NaN", b"[" * 5000, b'{"durationSeconds": 1e999}', b"\xff\xfe", b""]),
)


def assert_shaped(response) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"issues"} and body["issues"], body
        for issue in body["issues"]:
            assert isinstance(issue["code"], str) and isinstance(issue["message"], str), body


def test_the_fuzzed_routes_are_the_ones_that_take_bodies():
    assert ("POST", "/v1/hosts/web1/passes") in ROUTES and ("PUT", "/v1/buckets/alpha") in ROUTES


@pytest.mark.parametrize(("method", "path"), ROUTES)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=bodies, who=st.sampled_from(["agent", "admin", None]),
       content_type=st.sampled_from(["application/json", "text/plain", None]))
def test_any_body_gets_an_answer_in_the_contract_shape(method, path, body, who, content_type):
    s = story()
    headers = (s.agent("web1") if who == "agent" else s.auth(who)) if who else {}  # an agent token is bound
    if content_type:
        headers["Content-Type"] = content_type
    response = s.client.request(method, path, content=body, headers=headers)
    assert_shaped(response)
    if who is None and body and not path.startswith("/v1/enroll"):  # enrollment proves itself: no token
        assert response.status_code == 401  # refused before the body is read


def test_a_stored_fuzzed_report_reads_back():
    """Whatever a fuzzed report got stored as, every read of it answers in shape."""
    s = story()
    for path in ("/v1/hosts", "/v1/hosts/web1", "/ui/overview"):
        assert_shaped(s.get(path))
    for listed in s.get("/v1/hosts").json()["hosts"]:
        report = s.get(f"/v1/hosts/{listed['host']}").json().get("report") or {}
        assert all(math.isfinite(v) for v in _numbers(report))


def _numbers(value):  # type: ignore[no-untyped-def]
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
