"""Schemathesis against the OpenAPI document: no 5xx, and no response that violates its own schema."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from .story import build_story, pass_report, play

_story = None


def _app():
    """One story for the whole module: the generated cases read and write the same store."""
    global _story
    if _story is None:
        import tempfile
        from pathlib import Path

        _story = build_story(Path(tempfile.mkdtemp(prefix="datum-openapi-")))
        play(_story)
        _story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=_story.agent("web1"))
    return _story.app


schema = schemathesis.openapi.from_asgi("/openapi.json", _app())
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance]


def test_the_document_names_the_contract_paths():
    paths = set(_app().openapi()["paths"])
    assert {
        "/v1/observability/admin/reconcilers",
        "/v1/observability/admin/reconcilers/{name}/drift",
        "/v1/hosts",
        "/v1/hosts/{host}",
        "/v1/hosts/{host}/passes",
        "/v1/buckets",
        "/v1/buckets/{name}",
        "/metrics",
        "/healthz",
        "/readyz",
    } <= paths


@schema.parametrize()
@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_own_schema(case):
    # admin may take every action, so the cases reach the handlers rather than stop at 403
    case.call_and_validate(headers={"Authorization": f"Bearer {_story.tokens['admin']}"}, checks=CHECKS)
