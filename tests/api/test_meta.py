"""Probes, metrics, 503 before the registry is wired, and errors in the contract's shape only."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from datum.api.app import create_app
from datum.api.front import tokens
from datum.plugins import load as _load_plugins
from datum.store import open_store

from .story import pass_report, play, settings_for


def test_healthz_needs_no_token(story):
    r = story.client.get("/healthz")
    assert (r.status_code, r.json()) == (200, {"status": "ok"})
    assert story.client.get("/readyz").json() == {"status": "ready"}


def test_before_the_registry_is_wired_observability_answers_503(tmp_path):
    settings = settings_for(tmp_path)
    store = open_store(settings.store_url)
    token = tokens.create(store, "operator")
    app = create_app(settings)
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        for path in ("/readyz", "/v1/observability/admin/reconcilers", "/v1/observability/admin/reconcilers/buckets/drift"):
            # a store token is unknown until the store is wired: configured tokens still work
            assert client.get(path, headers=auth).status_code in (401, 503)
        r = client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["issues"][0]["code"] == "UNAVAILABLE"
        app.state.datum.wire(_load_plugins().registry(), store)
        assert client.get("/readyz").status_code == 200
        assert client.get("/v1/observability/admin/reconcilers/buckets/drift", headers=auth).status_code == 200
    store.dispose()


def test_unknown_reconciler_is_404_naming_the_registered_ones(story):
    r = story.get("/v1/observability/admin/reconcilers/nope/drift")
    assert r.status_code == 404
    (issue,) = r.json()["issues"]
    assert issue["code"] == "NOT_FOUND" and "buckets" in issue["message"]


def test_unknown_paths_and_methods_answer_in_the_error_shape(story):
    r = story.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["issues"][0]["code"] == "NOT_FOUND"
    r = story.client.post("/v1/buckets", headers=story.auth())
    assert r.status_code == 405 and r.json()["issues"][0]["code"] == "METHOD_NOT_ALLOWED"


def test_an_unexpected_error_is_a_generic_500_without_a_stack_trace(story, monkeypatch):
    import datum.api.answers as answers

    def boom(*_args, **_kwargs):
        raise RuntimeError("secret internals at /srv/x.py line 3")

    monkeypatch.setattr(answers, "page", boom)
    r = story.get("/v1/hosts")
    assert r.status_code == 500
    assert r.json() == {
        "issues": [{"code": "INTERNAL", "message": "the server could not answer this request; see its log"}]
    }
    assert "Traceback" not in r.text and "secret internals" not in r.text


def test_metrics(story):
    play(story)
    story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
    r = story.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }

    def value(name, **labels):
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("datum_reconciler_drift", reconciler="buckets") == 4
    assert value("datum_reconciler_blocked", reconciler="buckets") == 1
    assert value("datum_reconciler_health", reconciler="buckets", health="degraded") == 1
    assert value("datum_reconciler_health", reconciler="buckets", health="ok") == 0
    assert value("datum_reconciler_items", reconciler="buckets", reason="circuit_breaker", direction="reap") == 3
    assert value("datum_reconciler_items", reconciler="buckets", reason="blocked_on_owner", direction="align") == 1
    assert value("datum_reconciler_stranded_coverage_rows", reconciler="buckets") == 0
    assert value("datum_reconciler_coverage_rows", reconciler="buckets", kind="bucket", status="active", selected="true",
                 terminal="false") == 2
    assert value("datum_reconciler_passes_total", reconciler="buckets", outcome="executed") == 3
    assert value("datum_reconciler_pass_duration_seconds", reconciler="buckets") > 0
    assert value("datum_hosts", state="failed") == 1
    assert value("datum_hosts", state="converged") == 0


def test_the_page_shell_needs_no_token_and_its_data_does(story):
    r = story.client.get("/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "datum.js" in r.text
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert story.client.get("/static/datum.js").status_code == 200
    assert story.client.get("/ui/overview").status_code == 401
    play(story)
    html = story.get("/ui/overview").text
    assert "delta exists and is not a directory" in html and "backoff" in html
    assert "This token may not read hosts" not in html
