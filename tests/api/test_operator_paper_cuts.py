"""Small things an operator trips on: unknown paths, trailing slashes, HEAD, Allow, Cedar ids, /docs offline,
malformed HTTP and over-long URLs in the error shape, and ``datum serve --log-format json``."""

from __future__ import annotations

import json
import re
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from .story import config_file, pass_report, play, serving

DRIFT = "/v1/observability/admin/reconcilers/buckets/drift"


def test_an_unknown_path_is_404_in_the_error_shape_with_a_hint(story):
    r = story.get("/v1/nope")
    assert r.status_code == 404
    (issue,) = r.json()["issues"]
    assert issue["code"] == "NOT_FOUND" and "GET /v1" in issue["message"] and "/v1/nope" in issue["message"]
    assert story.client.get("/nowhere/at/all").json()["issues"][0]["code"] == "NOT_FOUND"


def test_the_api_root_lists_its_endpoints(story):
    r = story.client.get("/v1")
    assert r.status_code == 200
    body = r.json()
    listed = {(e["method"], e["path"]) for e in body["endpoints"]}
    assert {
        ("GET", "/v1/observability/admin/reconcilers"),
        ("GET", "/v1/observability/admin/reconcilers/{name}/drift"),
        ("GET", "/v1/hosts"),
        ("POST", "/v1/hosts/{host}/passes"),
        ("PUT", "/v1/buckets/{name}"),
        ("GET", "/metrics"),
    } <= listed
    assert body["openapi"] == "/openapi.json" and body["docs"] == "/docs"


def test_a_trailing_slash_is_served_not_redirected(story):
    story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
    plain = story.get("/v1/hosts")
    slashed = story.client.get("/v1/hosts/", headers=story.auth(), follow_redirects=False)
    assert slashed.status_code == 200 and "location" not in slashed.headers
    assert slashed.json() == plain.json()
    assert story.client.get("/v1/hosts/web1/", headers=story.auth(), follow_redirects=False).status_code == 200


def test_405_allows_every_method_of_the_path(story):
    r = story.client.get("/v1/buckets/alpha", headers=story.auth("admin"))
    assert r.status_code == 405 and r.headers["Allow"] == "PUT, DELETE"
    assert r.json()["issues"][0]["code"] == "METHOD_NOT_ALLOWED" and "PUT, DELETE" in r.json()["issues"][0]["message"]
    r = story.client.post("/healthz")
    assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD"
    r = story.client.delete("/v1/hosts/web1/passes", headers=story.auth())
    assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD, POST"


def test_head_works_wherever_get_does(story):
    play(story)
    for path, auth in (("/healthz", {}), ("/readyz", {}), ("/v1", {}), ("/v1/hosts", story.auth()),
                       (DRIFT, story.auth()), ("/v1/observability/admin/reconcilers", story.auth()),
                       ("/metrics", story.auth()), ("/openapi.json", {}), ("/docs", {})):
        got = story.client.get(path, headers=auth)
        head = story.client.head(path, headers=auth)
        assert head.status_code == got.status_code == 200, path
        assert head.content == b"", path
        assert head.headers["content-type"] == got.headers["content-type"], path
    assert story.client.head("/v1/hosts").status_code == 401  # HEAD is a GET: the same refusals


def test_403_names_cedar_entities_in_cedar_syntax(story):
    r = story.client.put("/v1/buckets/alpha", headers=story.auth("operator"))
    assert r.status_code == 403
    (issue,) = r.json()["issues"]
    assert issue["action"] == "buckets:Write"
    assert issue["message"] == 'Principal::"operator" may not Action::"buckets:Write" on Bucket::"alpha"'
    r = story.get("/v1/observability/admin/reconcilers", "stranger")
    assert 'on Server::"datum"' in r.json()["issues"][0]["message"]


def test_docs_work_without_the_internet(story):
    html = story.client.get("/docs").text
    assert "/openapi.json" in html
    urls = re.findall(r"""(?:src|href)=['"]([^'"]+)['"]""", html)
    assert urls and all(not urlsplit(u).netloc for u in urls), urls  # nothing from another host
    for u in urls:
        r = story.client.get(u)
        assert r.status_code == 200 and len(r.content) > 1000, u
    assert "SwaggerUIBundle" in story.client.get("/docs/assets/swagger-ui-bundle.js").text


# ---- a live `datum serve`: what uvicorn answers before the app, and the JSON log


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("paper-cuts")
    log = tmp / "serve.log"
    with serving(config_file(tmp, scheduler=False), log, "--log-format", "json") as base:
        u = urlsplit(base)
        yield (u.hostname, u.port), base, log


def raw(address, request: bytes) -> tuple[int, dict, bytes]:
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def test_malformed_http_is_answered_in_the_error_shape(live):
    address, _base, _log = live
    status, headers, body = raw(address, b"GET /healthz HTTP/1.1\r\nHost x\r\n\r\n")  # a header without ':'
    assert status == 400 and headers["content-type"] == "application/json"
    assert json.loads(body)["issues"][0]["code"] == "INVALID_INPUT"
    status, _h, body = raw(address, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n")
    assert status == 400 and json.loads(body)["issues"][0]["code"] == "INVALID_INPUT"


def test_an_over_long_url_is_414_in_the_error_shape(live):
    address, _base, _log = live
    status, headers, body = raw(address, b"GET /v1/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 414 and headers["connection"] == "close"
    (issue,) = json.loads(body)["issues"]
    assert issue["code"] == "INVALID_INPUT" and "8192" in issue["message"]
    status, _h, _b = raw(address, b"GET /v1/" + b"a" * 4000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status == 404  # long, but within the bound: the app answers


def test_log_format_json_writes_one_object_per_line(live):
    _address, base, log = live
    httpx.get(base + "healthz?token=secret-in-a-url")
    deadline = time.monotonic() + 5
    while "/healthz" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    access = [line for line in lines if line["logger"] == "uvicorn.access" and line.get("path", "").startswith("/healthz")]
    assert access and access[0]["method"] == "GET" and access[0]["status"] == 200
    assert "secret-in-a-url" not in log.read_text()
    assert any("serving the page at" in line["message"] for line in lines)
