"""The OpenAPI document says exactly what the server takes and gives: no value it allows is refused, no null
it promises is ever served, every object's fields named, operation ids a generated client would want.

schemathesis with every check against a live server is ``test_schemathesis_live.py``; this file holds the
document to each rule, and the one definition behind each published pattern to what the server does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datum.api.app import operation_id
from datum.fleet.listing import CURSOR_MAX_LENGTH, CURSOR_PATTERN, cursor_after, host_after
from datum.wire import NO_NUL

from .story import pass_report, serve_fleet

# Nullable because they are null before the first tick (the contract says so); nothing else is.
NULL_BEFORE_THE_FIRST_TICK = {
    ("DriftReport", "asOf"), ("DriftReport", "lastRanAt"),
    ("ReconcilerSummary", "asOf"), ("ReconcilerSummary", "lastRanAt"),
}
# Objects that are maps by nature, their keys data: resources by state, marker files by path, an agent's facts,
# an error's details (contract section 6: `details{}`).
MAPS = {("PassReport", "counts"), ("EffectiveManifest", "files"), ("HostSummary", "counts"), ("HostStatus", "counts"), ("RebootStatus", "markers"),
        ("RebootLeaseRequest", "facts"), ("HostList", "counts"), ("FindingModel", "details"),
        ("PassSummary", "counts"), ("PassDetail", "counts"), ("RevisionCounts", "states"), ("EnrollRequest", "facts")}

OPERATION_IDS = {
    ("get", "/v1/observability/admin/reconcilers"): "listReconcilers",
    ("get", "/v1/observability/admin/reconcilers/{name}/drift"): "getDriftReport",
    ("get", "/v1/observability/admin/reconcilers/{name}/policy"): "getReconcilerPolicy",
    ("get", "/v1/hosts"): "listHosts",
    ("get", "/v1/hosts/{host}"): "getHost",
    ("post", "/v1/hosts/{host}/passes"): "reportPass",
    ("get", "/v1/hosts/{host}/passes"): "listPasses",
    ("get", "/v1/hosts/{host}/passes/{pass}"): "getPass",
    ("get", "/v1/events"): "listEvents",
    ("get", "/v1/audit"): "listAudit",
    ("get", "/v1/hosts/{host}/manifest"): "getManifest",
    ("post", "/v1/hosts/{host}/reboot-lease"): "takeRebootLease",
    ("delete", "/v1/hosts/{host}/reboot-lease"): "giveBackRebootLease",
    ("get", "/v1/reboots"): "listReboots",
    ("delete", "/v1/reboots/{host}"): "clearRebootLease",
    ("get", "/v1/revisions"): "listRevisions",
    ("get", "/v1/rollouts"): "listRollouts",
    ("post", "/v1/rollouts/current/{action}"): "manageRollout",
    ("get", "/v1/attention"): "getAttention",
    ("get", "/v1/enroll/nonce"): "getEnrollNonce",
    ("post", "/v1/enroll"): "enrollHost",
    ("post", "/v1/enroll/session"): "openSession",
    ("get", "/healthz"): "getHealth",
    ("get", "/readyz"): "getReadiness",
    ("get", "/v1"): "getApiRoot",
    ("get", "/metrics"): "getMetrics",
    ("get", "/v1/buckets"): "listBuckets",
    ("put", "/v1/buckets/{name}"): "putBucket",
    ("delete", "/v1/buckets/{name}"): "deleteBucket",
}


def _walk(node: Any, path: tuple[str, ...] = ()):
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, (*path, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, (*path, str(i)))


def test_no_field_is_nullable_but_the_two_null_before_the_first_tick(story):
    document = story.app.openapi()
    nullable = set()
    for path, node in _walk(document):
        if node == {"type": "null"} or (isinstance(node, dict) and node.get("type") == "null"):
            where = [p for p in path if p not in ("anyOf", "oneOf") and not p.isdigit()]
            nullable.add(tuple(where))
        assert not (isinstance(node, dict) and "default" in node and node["default"] is None), path
    named = {(p[2], p[4]) for p in nullable if p[:2] == ("components", "schemas") and p[3] == "properties"}
    assert named == NULL_BEFORE_THE_FIRST_TICK
    assert len(nullable) == len(named), nullable  # no nullable parameter either (cursor, state, headers)


def test_every_object_names_its_fields(story):
    schemas = story.app.openapi()["components"]["schemas"]
    free = []
    for name, schema in schemas.items():
        for field, prop in (schema.get("properties") or {}).items():
            if prop.get("type") == "object" and "properties" not in prop and (name, field) not in MAPS:
                free.append((name, field))
            if prop.get("type") == "object" and isinstance(prop.get("additionalProperties"), dict):
                assert (name, field) in MAPS, (name, field)
    assert free == []
    attempted = schemas["RebootStatus"]["properties"]["attempted"]
    assert attempted["$ref"] == "#/components/schemas/RebootAttempt"
    assert set(schemas["RebootAttempt"]["required"]) == {"kernel", "requestedAt", "bootId"}


def test_operation_ids_are_the_route_names_a_client_calls(story):
    document = story.app.openapi()
    ids = {(m, p): op["operationId"] for p, ops in document["paths"].items() for m, op in ops.items()}
    assert ids == OPERATION_IDS
    assert len(set(ids.values())) == len(ids)
    root = story.client.get("/v1").json()
    assert {(e["method"].lower(), e["path"]): e["operationId"] for e in root["endpoints"]} == OPERATION_IDS


def test_an_operation_id_is_the_route_name_in_camel_case():
    class Route:
        def __init__(self, name: str) -> None:
            self.name = name

    assert operation_id(Route("get_drift_report")) == "getDriftReport"  # type: ignore[arg-type]
    assert operation_id(Route("healthz")) == "healthz"  # type: ignore[arg-type]


def _cursor_parameter(document: dict[str, Any]) -> dict[str, Any]:
    (param,) = [p for p in document["paths"]["/v1/hosts"]["get"]["parameters"] if p["name"] == "cursor"]
    return param["schema"]


def test_the_cursor_is_published_from_the_definition_the_server_checks(story):
    schema = _cursor_parameter(story.app.openapi())
    assert schema["pattern"] == CURSOR_PATTERN and schema["maxLength"] == CURSOR_MAX_LENGTH
    assert schema["type"] == "string"


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(min_size=1, max_size=253))
def test_every_cursor_the_listing_makes_is_one_the_document_allows(name):
    made = cursor_after(name)
    assert re.fullmatch(CURSOR_PATTERN, made) and len(made) <= CURSOR_MAX_LENGTH
    assert host_after(made) == name.split("\x00", 1)[0]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.from_regex(CURSOR_PATTERN, fullmatch=True).filter(lambda c: len(c) <= CURSOR_MAX_LENGTH))
def test_every_cursor_the_document_allows_is_taken(cursor):
    assert "\x00" not in host_after(cursor)  # a position, never a refusal


def test_what_the_pattern_refuses_is_422_and_what_it_allows_is_a_page(story):
    story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
    for bad in ("bogus", "aDo", "aDpz=", "aDpz\n", "a" * (CURSOR_MAX_LENGTH + 1)):
        r = story.client.get("/v1/hosts", params={"cursor": bad}, headers=story.auth())
        assert r.status_code == 422, bad
        assert r.json()["issues"][0]["fields"][0]["field"] == "cursor"
    for odd in ("aDoA", "aDr_____", cursor_after("web0")):  # "h:" and a NUL; bytes that are not UTF-8; before web1
        r = story.client.get("/v1/hosts", params={"cursor": odd}, headers=story.auth())
        assert r.status_code == 200, (odd, r.text)
    assert [h["host"] for h in r.json()["hosts"]] == ["web1"]


def test_a_null_where_a_field_does_not_apply_is_refused(story):
    for field, where in (("reason", "reason"), ("bootId", "bootId"), ("reboot", "reboot")):
        r = story.client.post("/v1/hosts/web1/passes", json=pass_report() | {field: None}, headers=story.agent("web1"))
        assert r.status_code == 422, field
        assert [f["field"] for f in r.json()["issues"][0]["fields"]] == [where]
    resource = pass_report()["resources"][0] | {"diff": None}  # type: ignore[index]
    r = story.client.post(
        "/v1/hosts/web1/passes", json=pass_report() | {"resources": [resource]}, headers=story.agent("web1")
    )
    assert r.status_code == 422 and r.json()["issues"][0]["fields"][0]["field"] == "resources[0].diff"


def test_a_host_name_holding_a_nul_is_refused_and_a_nul_in_text_is_stored_as_a_replacement(story):
    (host,) = story.app.openapi()["paths"]["/v1/hosts/{host}"]["get"]["parameters"]
    assert host["schema"]["pattern"] == NO_NUL
    r = story.get("/v1/hosts/we%00b")
    assert r.status_code == 422 and r.json()["issues"][0]["fields"][0]["field"] == "host"
    report = pass_report() | {"reason": "File[motd] failed: \x00"}
    r = story.client.post("/v1/hosts/web1/passes", json=report, headers=story.agent("web1"))
    assert r.status_code == 201, r.text
    assert story.get("/v1/hosts/web1").json()["report"]["reason"] == "File[motd] failed: \ufffd"


def test_the_facts_header_is_a_json_object_as_published(story, tmp_path):
    serve_fleet(story, tmp_path / "fleet")
    (param,) = [
        p for p in story.app.openapi()["paths"]["/v1/hosts/{host}/manifest"]["get"]["parameters"]
        if p["name"] == "X-Datum-Facts"
    ]
    assert param["in"] == "header" and param["content"] == {"application/json": {"schema": {"type": "object"}}}

    def get(facts: str | None) -> httpx.Response:
        headers = story.agent("web1") | ({"X-Datum-Facts": facts} if facts is not None else {})
        return story.client.get("/v1/hosts/web1/manifest", headers=headers)

    for good in (None, "{}", '{"os_release": {"ID": "debian"}}'):
        assert get(good).status_code == 200, good
        assert get(good).status_code == 200, good  # the fast answer, once composed, says the same
    for bad in ("", "[]", "1", "null", "{nope"):
        r = get(bad)
        assert r.status_code == 422, bad
        assert r.json()["issues"][0]["fields"][0]["field"] == "X-Datum-Facts"


def test_the_report_route_does_not_read_the_facts_header(story):
    """The group recorded comes from the host's name and labels, never its facts: the report route publishes no
    facts header, and a pass sent with one (readable or not) is stored all the same."""
    post = story.app.openapi()["paths"]["/v1/hosts/{host}/passes"]["post"]
    assert "X-Datum-Facts" not in [p["name"] for p in post.get("parameters", [])]
    for facts in ("{nope", "[]", '{"os_release": {"ID": "debian"}}'):
        headers = story.agent("web1") | {"X-Datum-Facts": facts}
        r = story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=headers)
        assert r.status_code in (200, 201), r.text


def test_an_integer_bound_is_an_integer(story):
    seq = story.app.openapi()["components"]["schemas"]["PassReport"]["properties"]["seq"]
    assert seq["maximum"] == 2**62 and isinstance(seq["maximum"], int)
    r = story.client.post("/v1/hosts/web1/passes", json=pass_report() | {"seq": 2**62 + 1}, headers=story.agent("web1"))
    assert r.status_code == 422


def test_the_manifest_answer_is_typed_for_a_generated_client(story):
    """Issue 40, item 6: ``getManifest``'s 200 had no schema (a generated client got ``Any`` for the one answer
    an agent lives on); it is ``EffectiveManifest``, and a real answer validates against it."""
    document = story.app.openapi()
    answer = document["paths"]["/v1/hosts/{host}/manifest"]["get"]["responses"]["200"]
    assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/EffectiveManifest"}
    schema = document["components"]["schemas"]["EffectiveManifest"]
    assert set(schema["required"]) == {"host", "digest", "manifests", "manifest", "files"}
    serve_fleet(story, story.root.parent / "fleet-typed")
    got = story.client.get("/v1/hosts/web1/manifest", headers=story.agent("web1"))
    assert got.status_code == 200, got.text
    from datum.api.models import EffectiveManifest

    parsed = EffectiveManifest.model_validate(got.json())
    assert parsed.host == "web1" and parsed.digest == got.headers["ETag"].strip('"') and parsed.manifest.resources


def test_a_client_generated_from_the_document_reads_the_manifest_and_the_host_listing(story, tmp_path):
    """Issue 40's Done when: the OpenAPI document read by a generated client. datamodel-code-generator makes
    pydantic models of every schema the document publishes (as a client generator does); the models of
    getManifest's and listHosts' answers exist, are no ``Any``, and real answers of the server validate in them."""
    import importlib.util
    import subprocess
    import sys

    codegen = Path(sys.executable).parent / "datamodel-codegen"
    document = tmp_path / "openapi.json"
    document.write_text(json.dumps(story.app.openapi()))
    made = tmp_path / "client_models.py"
    run = subprocess.run(
        [str(codegen), "--input", str(document), "--input-file-type", "openapi", "--output", str(made),
         "--output-model-type", "pydantic_v2.BaseModel", "--use-annotated"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    spec = importlib.util.spec_from_file_location("client_models", made)
    assert spec and spec.loader
    models = importlib.util.module_from_spec(spec)
    sys.modules["client_models"] = models
    try:
        spec.loader.exec_module(models)
        manifest_model, listing_model = models.EffectiveManifest, models.HostList
        assert manifest_model.model_fields["manifest"].annotation is not Any
        serve_fleet(story, story.root.parent / "fleet-generated")
        got = story.client.get("/v1/hosts/web1/manifest", headers=story.agent("web1"))
        assert got.status_code == 200, got.text
        parsed = manifest_model.model_validate(got.json())
        assert parsed.host == "web1" and parsed.digest == got.headers["ETag"].strip('"')
        story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
        listed = listing_model.model_validate(story.get("/v1/hosts").json())
        assert [h.host for h in listed.hosts] == ["web1"]
    finally:
        sys.modules.pop("client_models", None)
