"""Authorization: 401 without or with a bad token, 403 naming the action, the decision per action and principal."""

from __future__ import annotations

import hashlib
import logging

import cedarpy
import pytest

from datum.api.app import create_app
from datum.api.front import tokens
from datum.api.front.authz import (
    SERVER,
    Action,
    Authorizer,
    host,
    reconciler,
    shipped_policies,
    shipped_schema,
)
from datum.core.findings import Problem

from .story import build_story, pass_report, settings_for

# The buckets plugin's actions, declared by its own schema fragment.
BUCKETS_READ = "buckets:Read"
BUCKETS_WRITE = "buckets:Write"


def bucket(name: str):
    return ("Bucket", name)


def schema_with_plugins() -> str:
    from datum.api.plugins import schema_fragments
    from datum.plugins import load

    return shipped_schema(schema_fragments(load()).values())

# (method, path, action, body)
ENDPOINTS = [
    ("GET", "/v1/observability/admin/reconcilers", Action.READ_SUBSTRATE, None),
    ("GET", "/v1/observability/admin/reconcilers/buckets/drift", Action.READ_SUBSTRATE, None),
    ("GET", "/metrics", Action.READ_SUBSTRATE, None),
    ("GET", "/ui/overview", Action.READ_SUBSTRATE, None),
    ("GET", "/v1/hosts", Action.READ_HOST, None),
    ("GET", "/v1/hosts/web1", Action.READ_HOST, None),
    ("POST", "/v1/hosts/web1/passes", Action.REPORT_PASS, pass_report()),
    ("GET", "/v1/hosts/web1/passes", Action.READ_HISTORY, None),
    ("GET", "/v1/events", Action.READ_HISTORY, None),
    ("GET", "/v1/audit", Action.READ_AUDIT, None),
    ("GET", "/v1/buckets", BUCKETS_READ, None),
    ("PUT", "/v1/buckets/alpha", BUCKETS_WRITE, None),
    ("DELETE", "/v1/buckets/alpha", BUCKETS_WRITE, None),
]

READS = {Action.READ_SUBSTRATE, Action.READ_HOST, Action.READ_HISTORY, BUCKETS_READ}
ALLOWED = {
    "operator": READS,
    "viewer": READS,
    "agent@host:web1": {Action.REPORT_PASS},
    "admin": {*Action, BUCKETS_READ, BUCKETS_WRITE},
    "stranger": set(),
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    s = build_story(tmp_path_factory.mktemp("auth"))
    s.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=s.agent("web1"))
    yield s
    s.client.close()
    s.store.dispose()


@pytest.mark.parametrize("principal", sorted(ALLOWED))
@pytest.mark.parametrize(("method", "path", "action", "body"), ENDPOINTS, ids=[f"{m} {p}" for m, p, *_ in ENDPOINTS])
def test_each_action_for_each_principal(shared, method, path, action, body, principal):
    # Each case stands alone (the workers of -n split a module): the bucket a
    # PUT creates is gone first, the one a DELETE deletes exists.
    if method == "PUT":
        shared.client.delete(path, headers=shared.auth("admin"))
    if method == "DELETE":
        shared.client.put(path, headers=shared.auth("admin"))
    r = shared.client.request(method, path, json=body, headers=shared.auth(principal))
    if action in ALLOWED[principal]:
        assert r.status_code < 400, r.text
    else:
        assert r.status_code == 403
        (issue,) = r.json()["issues"]
        assert (issue["code"], issue["action"]) == ("FORBIDDEN", str(action))
        assert principal in issue["message"]


def test_an_agent_token_bound_to_no_host_may_do_nothing_and_is_told_to_bind_it(shared):
    """The shipped policy no longer lets an unbound agent token speak for any host: refused on every host
    route, with the command that makes a bound one."""
    shared.tokens["agent"] = tokens.create(shared.store, "agent")
    for method, path in (("POST", "/v1/hosts/web1/passes"), ("GET", "/v1/hosts/web1/manifest"),
                         ("POST", "/v1/hosts/web1/reboot-lease")):
        r = shared.client.request(method, path, json={}, headers=shared.auth("agent"))
        assert r.status_code == 403, (path, r.text)
        message = r.json()["issues"][0]["message"]
        assert "datum token create --principal agent --host NAME" in message, message
    r = shared.client.get("/v1/hosts", headers=shared.auth("agent"))
    assert r.status_code == 403 and "--host" not in r.json()["issues"][0]["message"]  # not a host route


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", "Bearer ", "Basic b3BlcmF0b3I6eA==", "Bearer datum_not-a-token", "bearer " + "x" * 500],
)
def test_no_or_a_bad_token_is_401_in_the_error_shape(shared, header):
    headers = {} if header is None else {"Authorization": header}
    r = shared.client.get("/v1/observability/admin/reconcilers/buckets/drift", headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    (issue,) = r.json()["issues"]
    assert issue["code"] == "UNAUTHENTICATED" and issue["message"]


def test_401_comes_before_404_and_403_before_404(shared):
    r = shared.client.get("/v1/observability/admin/reconcilers/nope/drift")
    assert r.status_code == 401
    r = shared.client.get("/v1/observability/admin/reconcilers/nope/drift", headers=shared.agent("web1"))
    assert r.status_code == 403


def test_the_shipped_policies_validate_against_the_shipped_schema():
    for schema in (shipped_schema(), schema_with_plugins()):
        result = cedarpy.validate_policies(shipped_policies(), cedarpy.Schema.from_str(schema))
        assert result.validation_passed, result.errors


def test_decisions_of_the_shipped_policies():
    authz = Authorizer(shipped_policies(), schema_with_plugins())
    resources = {
        Action.READ_SUBSTRATE: reconciler("buckets"),
        Action.READ_HOST: host("web1"),
        Action.READ_HISTORY: host("web1"),
        Action.REPORT_PASS: host("web1"),
        BUCKETS_READ: SERVER,
        BUCKETS_WRITE: bucket("alpha"),
    }
    for principal, allowed in ALLOWED.items():
        for action, resource in resources.items():
            assert authz.allowed(principal, action, resource) is (action in allowed), (principal, action)


def test_a_request_outside_the_schema_is_no_decision_and_so_a_deny():
    authz = Authorizer(shipped_policies(), schema_with_plugins())
    # buckets:Read applies to Server only: Cedar answers NoDecision, which must deny
    assert authz.allowed("admin", BUCKETS_READ, ("Host", "web1")) is False


def test_group_policies_work_because_entities_are_parsed_with_the_schema(tmp_path):
    policy = tmp_path / "p.cedar"
    policy.write_text('permit (principal == Principal::"ci", action in Action::"write", resource);\n')
    authz = Authorizer.from_settings(policy, _fragments())
    assert authz.allowed("ci", BUCKETS_WRITE, bucket("a"))
    assert authz.allowed("ci", Action.REPORT_PASS, host("h"))
    assert not authz.allowed("ci", Action.READ_SUBSTRATE, SERVER)


@pytest.mark.parametrize(
    "text",
    [
        "permit (principal, action, resource",  # does not parse
        'permit (principal, action == Action::"fleet:Reboot", resource);',  # unknown action
        'permit (principal == User::"x", action, resource);',  # unknown entity type
    ],
)
def test_a_policy_file_that_does_not_validate_refuses_to_start(tmp_path, text):
    policy = tmp_path / "p.cedar"
    policy.write_text(text)
    with pytest.raises(Problem) as caught:
        create_app(settings_for(tmp_path, policy=str(policy)))
    assert caught.value.code == "INVALID_INPUT"


def test_each_policy_at_fault_is_a_finding_naming_its_statement(tmp_path):
    """The contract's ``statement``: the index of the policy at fault in the file, a finding each, every one at
    once; -1 for a document that does not parse."""
    policy = tmp_path / "p.cedar"
    policy.write_text(
        'permit (principal == Principal::"ci", action, resource);\n'
        'permit (principal, action == Action::"fleet:Reboot", resource);\n'
        'permit (principal, action, resource);\n'
        'permit (principal == User::"x", action, resource);\n'
    )
    with pytest.raises(Problem) as caught:
        create_app(settings_for(tmp_path, policy=str(policy)))
    found = caught.value.to_json()["issues"]
    assert [f["statement"] for f in found] == [1, 3] and all(f["code"] == "INVALID_INPUT" for f in found), found
    assert all(f["fields"] for f in found)
    policy.write_text("permit (principal, action, resource")
    with pytest.raises(Problem) as caught:
        create_app(settings_for(tmp_path, policy=str(policy)))
    assert [f.get("statement") for f in caught.value.to_json()["issues"]] == [-1]


def test_configured_token_hashes_authenticate_without_the_store(tmp_path):
    from fastapi.testclient import TestClient

    secret = "datum_configured-secret"
    policy = tmp_path / "p.cedar"
    policy.write_text('permit (principal == Principal::"ci", action, resource);\n')
    settings = settings_for(
        tmp_path, policy=str(policy), tokens={"ci": "sha256:" + hashlib.sha256(secret.encode()).hexdigest()}
    )
    with TestClient(create_app(settings)) as client:
        ok = client.get("/v1/observability/admin/reconcilers", headers={"Authorization": f"Bearer {secret}"})
        bad = client.get("/v1/observability/admin/reconcilers", headers={"Authorization": "Bearer datum_other"})
    assert ok.status_code == 503  # authenticated and allowed; the registry is not wired
    assert ok.json()["issues"][0]["code"] == "UNAVAILABLE"
    assert bad.status_code == 401


def test_tokens_are_stored_as_hashes_only(tmp_path):
    from datum.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'd.db'}")
    secret = tokens.create(store, "operator")
    store.dispose()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("d.db"))
    assert secret.encode() not in raw
    assert hashlib.sha256(secret.encode()).hexdigest().encode() in raw


def test_no_token_in_any_log_line_or_body(shared, caplog):
    caplog.set_level(logging.DEBUG)
    secret = shared.tokens["operator"]
    bodies = []
    for method, path, _action, body in ENDPOINTS:
        for token in (secret, secret + "x"):
            r = shared.client.request(method, path, json=body, headers={"Authorization": f"Bearer {token}"})
            bodies.append(r.text)
    for text in bodies + [rec.getMessage() for rec in caplog.records]:
        assert secret not in text


def _fragments():
    from datum.api.plugins import schema_fragments
    from datum.plugins import load

    return list(schema_fragments(load()).values())


def test_a_plugins_fragment_that_does_not_merge_is_refused_alone():
    from datum.api.front.authz import fragment_problem

    assert fragment_problem(_fragments()[0]) is None
    assert "does not merge" in fragment_problem("entity Host;")  # redeclares Datum's own
    assert "does not merge" in fragment_problem("action oops")
