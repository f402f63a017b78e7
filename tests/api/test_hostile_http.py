"""Hostile clients against ``datum serve`` for real: raw sockets on loopback, the server's own timeouts.

One server process per module, with small limits: 4 KiB bodies, 1 s to send
the headers, 1 s to send the body. Every refusal is in the contract's error
shape and closes the connection; the server keeps answering everyone else.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .story import pass_report, serving

LIMIT = 4096


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, dict[str, str], Path]]:
    """(base URL, port, tokens by principal, log path) of a ``datum serve`` with small limits."""
    from datum.api.front import tokens
    from datum.store import open_store

    tmp = tmp_path_factory.mktemp("hostile")
    cfg = tmp / "datum.toml"
    cfg.write_text(
        f'store = "sqlite:///{tmp / "datum.db"}"\n'
        f'[reconcilers.buckets]\nroot = "{tmp / "buckets"}"\n'
        "[server]\nscheduler = false\n"
        f"max_body_bytes = {LIMIT}\n"
        'header_timeout = "1s"\nbody_timeout = "1s"\nkeep_alive = "1s"\n'
    )
    store = open_store(f"sqlite:///{tmp / 'datum.db'}")
    minted = {p: tokens.create(store, p) for p in ("operator", "admin")}
    minted["agent"] = tokens.create(store, "agent", "web1")  # bound to the host the posts name
    store.dispose()
    log = tmp / "serve.log"
    with serving(cfg, log) as base:
        yield base, int(base.rsplit(":", 1)[1].strip("/")), minted, log


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.settimeout(10)
    return s


def answer(s: socket.socket, within: float = 5.0) -> tuple[int, dict[str, str], dict]:
    """Read one HTTP response (status, headers, JSON body) off ``s``, failing after ``within`` seconds."""
    s.settimeout(within)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"closed without an answer: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = s.recv(65536)
        assert chunk
        rest += chunk
    return status, headers, json.loads(rest[:length]) if length else {}


def closed(s: socket.socket, within: float) -> bool:
    """Whether the server closes ``s`` (EOF or reset) within ``within`` seconds, whatever it sent first."""
    s.settimeout(within)
    try:
        while s.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def assert_shape(body: dict, code: str) -> None:
    assert set(body) == {"issues"}, body
    assert body["issues"][0]["code"] == code and body["issues"][0]["message"], body


def refused(s: socket.socket, status: int, code: str, within: float = 3) -> dict:
    """The answer on ``s`` is ``status`` with ``code`` in the contract's shape: its body."""
    got, _headers, body = answer(s, within=within)
    assert got == status, (got, body)
    assert_shape(body, code)
    return body


def post_head(length: int | None, token: str | None = None, path: str = "/v1/hosts/web1/passes") -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if token:
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_an_unauthenticated_post_of_a_gigabyte_is_refused_before_its_body_is_read(server):
    _base, port, _tokens, _log = server
    for token in (None, "datum_not-a-token"):
        with connect(port) as s:
            started = time.monotonic()
            s.sendall(post_head(10**9, token))  # headers only: a server reading the body would wait forever
            status, headers, body = answer(s, within=3)
            assert time.monotonic() - started < 3
            assert status == 401 and headers.get("www-authenticate") == "Bearer"
            assert_shape(body, "UNAUTHENTICATED")
            assert closed(s, within=3)


def test_an_unauthenticated_chunked_post_is_refused_before_its_body_is_read(server):
    _base, port, _tokens, _log = server
    with connect(port) as s:
        s.sendall(post_head(None) + b"10\r\n0123456789abcdef\r\n")
        refused(s, 401, "UNAUTHENTICATED")


def test_a_declared_body_over_the_limit_is_413_at_once(server):
    _base, port, tokens, _log = server
    with connect(port) as s:
        s.sendall(post_head(LIMIT + 1, tokens["agent"]))
        body = refused(s, 413, "PAYLOAD_TOO_LARGE")
        assert body["issues"][0]["details"] == {"maxBodyBytes": LIMIT}
        assert closed(s, within=3)


def test_a_chunked_body_without_length_is_413_once_it_passes_the_limit(server):
    _base, port, tokens, _log = server
    with connect(port) as s:
        s.sendall(post_head(None, tokens["agent"]))
        chunk = b"x" * 1024
        for _ in range(LIMIT // len(chunk) + 1):  # one chunk past the limit, then wait for the answer
            s.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        refused(s, 413, "PAYLOAD_TOO_LARGE")


def test_a_slowloris_body_is_cut_off_at_the_body_timeout(server):
    base, port, tokens, _log = server
    with connect(port) as s:
        s.sendall(post_head(200, tokens["agent"]))
        started = time.monotonic()
        got = None
        while time.monotonic() - started < 6:
            try:
                s.sendall(b" ")  # one byte every 0.2 s: the body would take 40 s
            except (BrokenPipeError, ConnectionResetError):
                break
            s.settimeout(0.2)
            try:
                got = s.recv(65536, socket.MSG_PEEK)
            except TimeoutError:
                continue
            break
        took = time.monotonic() - started
        assert got, "the server never answered the slow body"
        refused(s, 408, "REQUEST_TIMEOUT", within=2)
        assert 0.9 < took < 4, took
        assert closed(s, within=3)
    assert httpx.get(base + "readyz").status_code == 200  # no worker was held


def test_slow_or_silent_headers_are_closed_at_the_header_timeout(server):
    base, port, _tokens, _log = server
    with connect(port) as silent, connect(port) as trickle:
        started = time.monotonic()
        trickle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        shut = False
        while time.monotonic() - started < 6 and not shut:
            try:
                trickle.sendall(b"X-Slow: 1\r\n")  # a header every 0.2 s, never the blank line
            except (BrokenPipeError, ConnectionResetError):
                shut = True
                break
            shut = closed(trickle, within=0.2)
        assert shut, "a client trickling its headers kept the connection"
        assert time.monotonic() - started < 4
        assert closed(silent, within=3), "a connection that sends nothing was kept"
    assert httpx.get(base + "healthz").status_code == 200


def test_headers_over_the_limit_completed_by_their_last_chunk_are_431(server):
    """Issue 40: 60 kB of headers in one chunk and 10 kB more with the blank line in the next were
    answered 200: the chunk that completed the headers was parsed before it was counted."""
    base, port, _tokens, _log = server
    with connect(port) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        s.sendall("".join(f"X-Pad-{n}: {'a' * 1000}\r\n" for n in range(60)).encode())
        time.sleep(0.2)  # two reads on the server's side
        s.sendall("".join(f"X-More-{n}: {'b' * 1000}\r\n" for n in range(10)).encode() + b"\r\n")
        try:
            refused(s, 431, "INVALID_INPUT")
        except ConnectionResetError:
            pass
        assert closed(s, within=3)
    with connect(port) as s:  # 60 kB in all still passes
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        s.sendall("".join(f"X-Pad-{n}: {'a' * 1000}\r\n" for n in range(50)).encode())
        time.sleep(0.2)
        s.sendall("".join(f"X-More-{n}: {'b' * 1000}\r\n" for n in range(10)).encode() + b"Connection: close\r\n\r\n")
        assert s.recv(64).startswith(b"HTTP/1.1 200")


def test_endless_headers_are_431_and_closed(server):
    base, port, _tokens, _log = server
    with connect(port) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        pad = "".join(f"X-Pad-{n}: {'a' * 1000}\r\n" for n in range(66))  # 66 kB, never the blank line
        s.sendall(pad.encode())
        try:
            refused(s, 431, "INVALID_INPUT")
        except ConnectionResetError:
            pass  # the kernel may reset before the answer is read: closed is what matters
        assert closed(s, within=3)
    assert httpx.get(base + "healthz").status_code == 200


def test_a_principal_without_permission_is_403_before_its_body_is_read(server):
    """The route's Cedar decision does not depend on the body: it is made before a byte is read, so a
    refused principal holds no worker for the body (the server would wait for it and answer 408)."""
    _base, port, tokens, _log = server
    cases = [
        ("POST", "/v1/hosts/web1/passes", "operator", "fleet:ReportPass", 'on Host::"web1"'),
        ("POST", "/v1/hosts/web1/reboot-lease", "operator", "fleet:TakeRebootLease", 'on Host::"web1"'),
        ("PUT", "/v1/buckets/alpha", "agent", "buckets:Write", 'on Bucket::"alpha"'),  # a plugin's route
    ]
    for method, path, who, action, on in cases:
        with connect(port) as s:
            started = time.monotonic()
            s.sendall(post_head(LIMIT, tokens[who], path).replace(b"POST", method.encode(), 1) + b'{"host": "web1", ')
            status, _headers, body = answer(s, within=3)
            assert (status, body["issues"][0]["code"]) == (403, "FORBIDDEN"), (path, status, body)
            assert body["issues"][0]["action"] == action and on in body["issues"][0]["message"], body
            assert time.monotonic() - started < 0.9  # well before the 1 s body timeout
            assert closed(s, within=3)  # the unread body ends the connection


def test_a_permitted_principal_still_sends_its_whole_body(server):
    _base, port, tokens, _log = server
    with connect(port) as s:  # the agent may report: its body is waited for (and times out here)
        s.sendall(post_head(LIMIT, tokens["agent"]) + b'{"host": "web1", ')
        refused(s, 408, "REQUEST_TIMEOUT")


def test_a_body_within_the_limit_still_reaches_the_route(server):
    base, _port, tokens, _log = server
    report = pass_report("web1")
    r = httpx.post(base + "v1/hosts/web1/passes", json=report, headers={"Authorization": f"Bearer {tokens['agent']}"})
    assert r.status_code == 201, r.text
    assert r.json()["state"] == "failed"


def test_the_access_log_never_prints_a_query_string_token(server):
    base, _port, tokens, log = server
    secret = tokens["operator"]
    httpx.get(base + f"v1/hosts?token={secret}&x=1", headers={"Authorization": f"Bearer {secret}"})
    httpx.get(base + f"healthz?access_token={secret}")
    deadline = time.monotonic() + 5
    while "GET /healthz" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    text = log.read_text()
    assert "GET /v1/hosts?[query omitted]" in text
    assert secret not in text and "token=" not in text


def test_a_token_put_in_the_path_is_neither_logged_nor_echoed(server):
    """Someone puts a token in the URL path by mistake: the access log, and the 404's message, say
    ``datum_[redacted]``; a good part of a token is redacted as well."""
    base, _port, tokens, log = server
    secret = tokens["operator"]
    auth = {"Authorization": f"Bearer {secret}"}
    echoed = [
        httpx.get(base + f"v1/hosts/{secret}", headers=auth),  # a host by that name: it never reported
        httpx.get(base + f"v1/no-such/{secret[:30]}/path", headers=auth),  # an unknown path, echoed
        httpx.post(base + f"v1/hosts/{secret}", headers=auth),  # a path that answers GET only: 405
        httpx.get(base + f"healthz/x{secret}"),
        # refused by the guard before the body (an operator does not report passes): the 403 names the host
        httpx.post(base + f"v1/hosts/{secret}/passes", headers=auth, content=b"{}"),
    ]
    assert [r.status_code for r in echoed] == [404, 404, 405, 404, 403]
    assert all(secret[6:26] not in r.text for r in echoed), [r.text for r in echoed]
    assert "no host named 'datum_[redacted]'" in echoed[0].text
    deadline = time.monotonic() + 5
    while "GET /healthz/xdatum_[redacted]" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    text = log.read_text()
    assert "GET /v1/hosts/datum_[redacted] HTTP/1.1" in text and "POST /v1/hosts/datum_[redacted] HTTP/1.1" in text
    assert "GET /v1/no-such/datum_[redacted]/path HTTP/1.1" in text
    assert secret[6:26] not in text


def test_the_database_file_deleted_under_the_server_fails_readyz_and_refuses_writes(tmp_path):
    from datum.api.front import tokens
    from datum.store import open_store

    db = tmp_path / "datum.db"
    cfg = tmp_path / "datum.toml"
    cfg.write_text(
        f'store = "sqlite:///{db}"\n[reconcilers.buckets]\nroot = "{tmp_path / "buckets"}"\n'
        "[server]\nscheduler = false\n"
    )
    store = open_store(f"sqlite:///{db}")
    admin = {"Authorization": f"Bearer {tokens.create(store, 'admin')}"}
    store.dispose()
    with serving(cfg, tmp_path / "serve.log") as base:
        assert httpx.put(base + "v1/buckets/alpha", headers=admin).status_code == 201
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        ready = httpx.get(base + "readyz")
        assert ready.status_code == 503
        assert_shape(ready.json(), "UNAVAILABLE")
        assert str(db) in ready.json()["issues"][0]["message"]
        write = httpx.put(base + "v1/buckets/beta", headers=admin)
        assert write.status_code == 503, write.text
        assert_shape(write.json(), "UNAVAILABLE")
        report = httpx.post(base + "v1/hosts/web1/passes", json=pass_report("web1"), headers=admin)
        assert report.status_code == 503, report.text
        assert_shape(report.json(), "UNAVAILABLE")
        assert httpx.get(base + "healthz").status_code == 200  # alive, not ready


def test_the_api_edges_of_issue_40_through_a_real_server(server):
    """Over real HTTP to a real ``datum serve`` (issue 40, item 6): a pass id of non-ASCII digits is a 404, not a
    500; a pass time a wrong clock gave is a 422 at its field, nothing stored; a stored report holding Infinity
    (a hand edit, another writer) is served as unknown saying why, not converged with durationSeconds null."""
    import sqlite3

    base, _port, tokens, log = server
    agent = {"Authorization": f"Bearer {tokens['agent']}"}
    operator = {"Authorization": f"Bearer {tokens['operator']}"}
    assert httpx.post(base + "v1/hosts/web1/passes", json=pass_report("web1"), headers=agent).status_code == 201
    for digits in ("²", "①"):
        r = httpx.get(base + f"v1/hosts/web1/passes/{digits}", headers=operator)
        assert r.status_code == 404 and r.json()["issues"][0]["code"] == "NOT_FOUND", r.text
    wrong = pass_report("web1") | {"passId": "from-2400", "finishedAt": "2400-06-01T00:00:00+00:00"}
    r = httpx.post(base + "v1/hosts/web1/passes", json=wrong, headers=agent)
    assert r.status_code == 422, r.text
    assert [f["field"] for f in r.json()["issues"][0]["fields"]] == ["finishedAt"]
    assert httpx.get(base + "v1/hosts/web1/passes/from-2400", headers=operator).status_code == 404
    stored = json.dumps(pass_report("web1") | {"state": "converged", "durationSeconds": float("inf")})
    assert "Infinity" in stored
    db = sqlite3.connect(log.parent / "datum.db")
    with db:
        db.execute("UPDATE hosts SET report = ? WHERE host = 'web1'", (stored,))
    db.close()
    host = httpx.get(base + "v1/hosts/web1", headers=operator).json()
    assert host["state"] == "unknown" and "Infinity is not a JSON value" in host["reason"], host
