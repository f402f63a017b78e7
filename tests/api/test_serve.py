"""``datum serve`` and ``datum token create`` for real: a uvicorn process on loopback, its log, its URL."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from .story import config_file, serving


def config(tmp_path: Path) -> Path:
    return config_file(tmp_path, interval="200ms")


def test_token_create_prints_the_token_alone_on_the_last_line(tmp_path, datum_cli):
    cfg = str(config(tmp_path))
    code, out, _err = datum_cli("token", "create", "--principal", "operator", "--config", cfg)
    assert code == 0
    token = out.strip().splitlines()[-1]
    assert token.startswith("datum_") and " " not in token and len(token) > 40
    code, _out, err = datum_cli("token", "create", "--principal", "no spaces please", "--config", cfg)
    assert code == 65 and "principal" in err


@pytest.fixture
def served(tmp_path, datum_cli):
    """``datum serve`` in its own process, with an operator token; yields (base URL, token, log path)."""
    cfg = config(tmp_path)
    _code, out, _ = datum_cli("token", "create", "--principal", "operator", "--config", str(cfg))
    token = out.strip().splitlines()[-1]
    log = tmp_path / "serve.log"
    with serving(cfg, log) as base:
        yield base, token, log


def test_serve_on_loopback_ticks_and_never_logs_the_token(served):
    base, token, log = served
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.put(base + "v1/buckets/alpha", headers=auth).status_code == 403  # operator only reads
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the scheduler ticks every 200ms without being asked
        body = httpx.get(base + "v1/observability/admin/reconcilers/buckets/drift", headers=auth).json()
        if body.get("lastRanAt"):
            break
        time.sleep(0.1)
    assert body["health"] == "ok" and body["reconciler"] == "buckets"
    assert httpx.get(base + "v1/hosts", headers={"Authorization": f"Bearer {token}x"}).status_code == 401
    text = log.read_text()
    assert f"serving the page at {base}" in text
    assert "GET /v1/observability/admin/reconcilers/buckets/drift" in text  # the access log is on
    assert token not in text


def test_a_revoked_token_is_refused_by_a_running_server_within_seconds(served, datum_cli, tmp_path):
    """datum token list names tokens by an id, never the token; revoke deletes one, and the server
    that has just accepted it (and remembers it) refuses it at its next check of the tokens it
    remembers, within RECHECK (2 s), not when its memory of the token would have lapsed."""
    import json

    from datum.api.front.tokens import ID_LENGTH, RECHECK, digest

    base, token, _log = served
    cfg = str(tmp_path / "datum.toml")
    code, out, _ = datum_cli("token", "create", "--principal", "agent", "--host", "web1", "--config", cfg)
    agent_token = out.strip().splitlines()[-1]
    code, out, err = datum_cli("token", "list", "--json", "--config", cfg)
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["principal"], r["host"]) for r in rows] == [("operator", None), ("agent", "web1")]
    assert all(len(r["id"]) == ID_LENGTH for r in rows)
    assert token not in out and agent_token not in out and digest(token) not in out  # ids only
    code, text, _ = datum_cli("token", "list", "--config", cfg)
    listed = [line.split() for line in text.splitlines()]
    assert listed[0] == ["id", "principal", "host", "groups", "created"]
    assert listed[2][:3] == [rows[0]["id"], "operator", "any"] and listed[3][:3] == [rows[1]["id"], "agent", "web1"]

    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.get(base + "v1/hosts", headers=auth).status_code == 200  # accepted, and remembered
    code, out, err = datum_cli("token", "revoke", rows[0]["id"], "--config", cfg)
    revoked = time.monotonic()
    assert code == 0 and f"revoked token {rows[0]['id']} of principal operator" in out, out + err
    assert f"running servers refuse it within {RECHECK:g} s" in out
    deadline = revoked + RECHECK + 1
    while httpx.get(base + "v1/hosts", headers=auth).status_code != 401:
        assert time.monotonic() < deadline, "the revoked token still works"
        time.sleep(0.2)
    code, out, _ = datum_cli("token", "list", "--json", "--config", cfg)
    assert [r["principal"] for r in json.loads(out)] == ["agent"]  # the other token stays

    code, _out, err = datum_cli("token", "revoke", rows[0]["id"], "--config", cfg)
    assert code == 64 and "no token has the id" in err
    code, _out, err = datum_cli("token", "revoke", "abc", "--config", cfg)
    assert code == 64 and "hex digits" in err
