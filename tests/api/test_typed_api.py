"""The OpenAPI document is typed: real responses walk its schemas with nothing left over.

The document is checked with openapi-spec-validator; then responses the server
really gives (the buckets story: backoff, blocked_on_owner, a tripped breaker,
a stranded status; hosts; buckets; every error status) are validated with
jsonschema against the schema the document names for that operation and
status, made strict: an object may carry no property its schema does not
declare. So a field added to a response and not to its model fails here.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from openapi_spec_validator import validate as validate_spec

from datum.api.app import create_app
from datum.api.front.errors import STATUS_BY_CODE
from datum.core.vocab import Direction, Health, HostState, Reason

from .story import build_story, pass_report, play


def strict(document: dict[str, Any]) -> dict[str, Any]:
    """The document's schemas with ``additionalProperties: false`` wherever an object lists its properties."""
    doc = copy.deepcopy(document)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc["components"])
    return doc


class Checker:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.strict = strict(document)
        self.checked: set[tuple[str, str, int]] = set()

    def schema_for(self, method: str, template: str, status: int) -> dict[str, Any]:
        operation = self.strict["paths"][template][method.lower()]
        responses = operation["responses"]
        assert str(status) in responses, f"{method} {template} answered {status}, which it does not document"
        return responses[str(status)]["content"]["application/json"]["schema"]

    def validate(self, body: Any, schema: dict[str, Any]) -> None:
        Draft202012Validator({**schema, "components": self.strict["components"]}).validate(body)

    def check(self, response: Any, template: str) -> Any:
        method = response.request.method
        body = response.json()
        self.validate(body, self.schema_for(method, template, response.status_code))
        self.checked.add((method, template, response.status_code))
        return body


@pytest.fixture
def story_played(tmp_path):
    s = build_story(tmp_path)
    s.settings.reconcilers["buckets"]["work_query"] = ["creating", "active", "deleting"]  # strands delete_blocked
    play(s)
    s.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=s.agent("web1"))
    yield s
    s.client.close()
    s.store.dispose()


def test_the_document_is_valid_openapi(story_played):
    validate_spec(story_played.app.openapi())


def test_real_responses_walk_the_schema_with_nothing_left_over(story_played):
    s = story_played
    checker = Checker(s.app.openapi())
    check = checker.check
    drift = "/v1/observability/admin/reconcilers/{name}/drift"
    body = check(s.get("/v1/observability/admin/reconcilers/buckets/drift"), drift)
    reasons = {i["reason"] for i in body["items"]}
    assert {"backoff", "circuit_breaker"} <= reasons
    assert any(c["stranded"] for c in body["coverage"])
    assert any("lastErr" in i and "retryAfter" in i and "failures" in i for i in body["items"])
    check(s.get("/v1/observability/admin/reconcilers"), "/v1/observability/admin/reconcilers")
    check(s.get("/v1/hosts"), "/v1/hosts")
    check(s.get("/v1/hosts/web1"), "/v1/hosts/{host}")
    assert check(s.get("/v1/attention"), "/v1/attention")["needs"]
    check(s.get("/v1/buckets"), "/v1/buckets")
    check(s.client.put("/v1/buckets/omega", headers=s.auth("admin")), "/v1/buckets/{name}")
    check(s.client.put("/v1/buckets/omega", headers=s.auth("admin")), "/v1/buckets/{name}")
    check(s.client.delete("/v1/buckets/omega", headers=s.auth("admin")), "/v1/buckets/{name}")
    check(s.client.get("/v1"), "/v1")
    check(s.client.get("/healthz"), "/healthz")
    check(s.client.get("/readyz"), "/readyz")
    # errors: every status in the error shape, documented on the operation that gave it
    r = s.client.get("/v1/hosts")
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    check(r, "/v1/hosts")
    r = s.get("/v1/buckets", "stranger")
    assert check(r, "/v1/buckets")["issues"][0]["action"] == "buckets:Read"
    assert check(s.get("/v1/observability/admin/reconcilers/nope/drift"), drift)["issues"][0]["code"] == "NOT_FOUND"
    check(s.get("/v1/hosts/nowhere"), "/v1/hosts/{host}")
    check(s.client.put("/v1/buckets/Bad_Name", headers=s.auth("admin")), "/v1/buckets/{name}")
    check(s.client.put("/v1/buckets/delta", headers=s.auth("admin")), "/v1/buckets/{name}")  # 200: asked before
    r = s.client.post("/v1/hosts/web1/passes", json={"host": "web1"}, headers=s.agent("web1"))
    assert r.status_code == 422
    check(r, "/v1/hosts/{host}/passes")
    r = s.client.delete("/v1/hosts/web1/passes", headers=s.auth())
    assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD, POST"
    checker.validate(r.json(), checker.schema_for("POST", "/v1/hosts/{host}/passes", 405))
    # the pass archive: a page of passes, one pass with its report, the fleet's events
    passes = check(s.get("/v1/hosts/web1/passes"), "/v1/hosts/{host}/passes")["passes"]
    detail = check(s.get(f"/v1/hosts/web1/passes/{passes[0]['id']}"), "/v1/hosts/{host}/passes/{pass}")
    assert detail["report"]["resources"]
    assert check(s.get("/v1/events"), "/v1/events")["events"]
    check(s.get("/v1/hosts/web1/passes/nope"), "/v1/hosts/{host}/passes/{pass}")
    check(s.get("/v1/events?state=nope"), "/v1/events")
    statuses = {c[2] for c in checker.checked}
    assert {200, 201, 202, 401, 403, 404, 422} <= statuses, statuses


def test_a_field_missing_from_the_schema_fails_the_check(story_played):
    s = story_played
    checker = Checker(s.app.openapi())
    drift = "/v1/observability/admin/reconcilers/{name}/drift"
    body = s.get("/v1/observability/admin/reconcilers/buckets/drift").json()
    schema = checker.schema_for("GET", drift, 200)
    checker.validate(body, schema)
    for tamper in (
        lambda b: b.update(newField=1),
        lambda b: b["items"][0].update(history=[]),
        lambda b: b["coverage"][0].update(ownerTeam="x"),
        lambda b: b.pop("driftCap"),
        lambda b: b["items"][0].update(reason="not_a_reason"),
        lambda b: b["items"][0].update(lastErr=None),  # absent, never null
    ):
        changed = copy.deepcopy(body)
        tamper(changed)
        with pytest.raises(ValidationError):
            checker.validate(changed, schema)


def test_503_and_500_are_in_the_error_shape_and_documented(tmp_path, monkeypatch):
    from .story import settings_for

    app = create_app(settings_for(tmp_path))  # not wired: 503
    checker = Checker(app.openapi())
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/readyz")
        assert r.status_code == 503
        checker.check(r, "/readyz")
    s = build_story(tmp_path / "s")
    from datum.reconcilers.buckets import routes as route

    monkeypatch.setattr(route.buckets, "rows", lambda _store: 1 / 0)
    r = s.get("/v1/buckets")
    assert r.status_code == 500 and "ZeroDivision" not in r.text
    Checker(s.app.openapi()).check(r, "/v1/buckets")
    s.store.dispose()


def test_enums_name_every_value_of_the_vocabularies(story_played):
    schemas = story_played.app.openapi()["components"]["schemas"]
    assert set(schemas["Reason"]["enum"]) == {r.value for r in Reason}
    assert set(schemas["Direction"]["enum"]) == {d.value for d in Direction}
    assert set(schemas["Health"]["enum"]) == {h.value for h in Health}
    assert set(schemas["HostState"]["enum"]) == {h.value for h in HostState}
    assert set(schemas["ErrorCode"]["enum"]) == set(STATUS_BY_CODE)
    item = schemas["DriftItem"]
    assert set(item["required"]) == {"kind", "direction", "id", "streak", "confirmationsNeeded", "reason"}
    for optional in ("lastErr", "desired", "actual", "failures", "retryAfterPasses", "retryAfter"):
        assert "null" not in str(item["properties"][optional]), optional  # absent, never null
    report = schemas["DriftReport"]
    assert {"asOf", "lastRanAt", "items", "coverage", "itemsReported", "coverageReported", "dropped"} <= set(
        report["required"]
    )
    assert "coverageError" not in report["required"]
    assert set(schemas["CoverageEntry"]["required"]) == {
        "kind", "status", "count", "selected", "terminal", "oldestAgeSeconds", "stranded"
    }


def test_every_operation_documents_every_status_the_server_can_give(story_played):
    document = story_played.app.openapi()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            documented = {int(s) for s in operation["responses"]}
            assert {400, 405, 408, 413, 414, 431, 500} <= documented, (method, path)
            if operation.get("security"):
                assert {401, 403} <= documented, (method, path)
                assert "WWW-Authenticate" in operation["responses"]["401"]["headers"]
            if "{" in path:
                assert 422 in documented, (method, path)
            assert "Allow" in operation["responses"]["405"]["headers"]
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Issues"}
    bucket = document["paths"]["/v1/buckets/{name}"]["put"]["parameters"][0]["schema"]
    assert bucket["pattern"] and bucket["maxLength"] == 63


def test_the_drift_body_served_is_the_model_round_tripped(story_played):
    # The fast path serves the cached body as is: validated here, not per request.
    from datum.reconcile.report import DriftReport

    body = story_played.get("/v1/observability/admin/reconcilers/buckets/drift").json()
    again = DriftReport.model_validate(body).dump()
    assert again == body
