"""HTTPS between real processes on loopback: ``datum serve`` with ``tls = "auto"`` or certificate files, and
``datum agent`` / ``datum apply --report-to`` trusting it by ``--ca-file`` or ``--pin`` (``datum.trust``)."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import ssl
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from datum.trust import pin_of, presented

from .conftest import Agent, Fleet, _fleet


class TlsFleet(Fleet):
    """The test fleet served over HTTPS (``[server] tls = "auto"`` unless told): trusted by its own CA."""

    def url_of(self, replica: int) -> str:
        return f"https://127.0.0.1:{self.ports[replica]}"

    @property
    def tls_dir(self) -> Path:
        return self.base / "home" / "tls"  # the test's DATUM_HOME (tests/conftest.py), replica 0's

    @property
    def ca(self) -> Path:
        return self.tls_dir / "ca.pem"

    @property
    def verify(self) -> Any:
        return ssl.create_default_context(cafile=self.ca)

    def show(self) -> dict[str, Any]:
        run = self.datum("tls", "show", "--json", "--config", str(self.server_config))
        assert run.code == 0, run.err
        return dict(json.loads(run.out))


AUTO = 'tls = "auto"\ntls_names = ["localhost", "127.0.0.1"]\n'


@pytest.fixture
def tls_fleet(tmp_path: Path) -> Iterator[TlsFleet]:
    with _fleet(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}", kind=TlsFleet, server=AUTO) as f:
        f.start()
        assert isinstance(f, TlsFleet)
        yield f


def _spooled(agent: Agent) -> int:
    db = sqlite3.connect(agent.state)
    try:
        return int(db.execute("SELECT count(*) FROM agent_spool").fetchone()[0])
    finally:
        db.close()


def _origin(agent: Agent) -> str:
    db = sqlite3.connect(agent.state)
    try:
        return str(json.loads(db.execute("SELECT report FROM agent_reports").fetchone()[0])["manifestOrigin"])
    finally:
        db.close()


def _leaf_pin(port: int) -> str:
    """The pin of the certificate the server on ``port`` presents now (a new connection)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        return pin_of(presented(sock)[0])


def test_auto_tls_serves_what_tls_show_says_and_agents_trusting_it_converge(tls_fleet: TlsFleet):
    fleet = tls_fleet
    shown = fleet.show()
    assert shown["tls"] == "auto" and shown["caFile"] == str(fleet.ca)
    assert shown["names"] == ["localhost", "127.0.0.1"]
    assert shown["pin"].startswith("sha256:") and len(shown["pin"]) == 7 + 64
    assert shown["chain"][-1]["pin"] == shown["pin"]  # the CA is presented after the server's certificate
    assert shown["chain"][0]["pin"] == _leaf_pin(fleet.port) and shown["chain"][0]["notAfter"] == shown["notAfter"]
    for name in ("ca.pem", "ca.key", "server.pem", "server.key"):
        assert (fleet.tls_dir / name).stat().st_mode & 0o777 == 0o600, name
    assert fleet.tls_dir.stat().st_mode & 0o777 == 0o700
    assert f"--pin {shown['pin']}" in fleet.log_of(0).read_text()  # printed at start, as datum tls show says it
    operator = fleet.token("operator")
    by_ca = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    run = by_ca.once("--ca-file", str(fleet.ca))
    assert run.code == 2, run.err
    assert (by_ca.root / "srv" / "index.html").read_text().startswith("hello from")
    assert fleet.get("/v1/hosts/web1", operator).json()["state"] == "converged"
    # the pin alone, from the environment as /etc/datum/agent.env gives it; the host name as the URL's
    by_pin = Agent(fleet, "web2", fleet.token("agent", "--host", "web2"))
    argv, env = by_pin._command()
    argv[argv.index("--server") + 1] = f"https://localhost:{fleet.port}"
    run = fleet.datum(*argv, env={**env, "DATUM_PIN": shown["pin"]})
    assert run.code == 2, run.err
    assert fleet.get("/v1/hosts/web2", operator).json()["state"] == "converged"
    # the certificate's expiry on /metrics, for the alert
    from prometheus_client.parser import text_string_to_metric_families

    scraped = {
        (s.name, s.labels.get("cert")): s.value
        for family in text_string_to_metric_families(fleet.get("/metrics", operator).text) for s in family.samples
    }
    from datetime import datetime

    not_after = datetime.fromisoformat(shown["notAfter"].replace("Z", "+00:00")).timestamp()
    assert scraped[("datum_tls_cert_expiry_timestamp_seconds", "server")] == not_after
    assert scraped[("datum_tls_cert_expiry_timestamp_seconds", "ca")] > not_after


def _handshake_and_answer(port: int, ca: Path, version: ssl.TLSVersion) -> ssl.SSLSession:
    """One request on a connection of ``version`` trusting ``ca``: the session the client holds after reading
    the answer (TLS 1.3 session tickets arrive after the handshake, read with the first data)."""
    context = ssl.create_default_context(cafile=ca)
    context.minimum_version = context.maximum_version = version
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        assert sock.version() == version.name.replace("v1_", "v1.") and sock.compression() is None
        sock.sendall(b"GET /v1/hosts/web1/manifest HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]  # no token: the front door's answer
        session = sock.session
        assert session is not None
        return session


def test_the_server_issues_no_tls13_session_tickets_and_refuses_tls11(tls_fleet: TlsFleet):
    """No agent resumes a session (datum.fleet.tls.context): the tickets OpenSSL would send after each
    handshake are not sent. TLS 1.2 still serves; TLS 1.1 is refused."""
    fleet = tls_fleet
    assert not _handshake_and_answer(fleet.port, fleet.ca, ssl.TLSVersion.TLSv1_3).has_ticket
    _handshake_and_answer(fleet.port, fleet.ca, ssl.TLSVersion.TLSv1_2)
    old = ssl.create_default_context(cafile=fleet.ca)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1 is: that is the point
        old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with socket.create_connection(("127.0.0.1", fleet.port), timeout=10) as raw, \
            pytest.raises(ssl.SSLError) as refused:
        old.wrap_socket(raw, server_hostname="127.0.0.1")
    # The server's refusal: its alert, or its close once it read the hello (uvloop may not flush the alert);
    # a client refusing by itself would say NO_PROTOCOLS_AVAILABLE before sending anything.
    assert refused.value.reason in ("TLSV1_ALERT_PROTOCOL_VERSION", "UNEXPECTED_EOF_WHILE_READING"), refused.value


def test_an_agent_not_told_what_to_trust_or_told_a_wrong_pin_is_refused_and_keeps_its_manifest_and_reports(
    tls_fleet: TlsFleet,
):
    fleet = tls_fleet
    shown = fleet.show()
    agent = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    assert agent.once("--pin", shown["pin"]).code == 2
    untold = agent.once()
    assert untold.code == 0, untold.err  # the kept manifest, applied: converged
    assert "the server's certificate is not trusted (self-signed certificate in certificate chain)" in untold.err
    assert "give them to --ca-file or --pin" in untold.err and "1 kept for later" in untold.err
    assert _origin(agent).startswith("cached: cannot reach") and _spooled(agent) == 1
    wrong = "sha256:" + "0" * 64
    refused = agent.once("--pin", wrong)
    assert refused.code == 0, refused.err
    said = refused.err
    assert f"expected {wrong}, presented {shown['chain'][0]['pin']} (CN=localhost), {shown['pin']} (CN=Datum CA " in said
    assert _spooled(agent) == 2 and "is not trusted" in _origin(agent)
    # trusted again: every report kept meanwhile is delivered
    back = agent.once("--ca-file", str(fleet.ca), "--pin", shown["pin"])
    assert back.code == 0 and "delivered 3" in back.err, back.err
    assert _spooled(agent) == 0


def test_apply_report_to_trusts_by_ca_file(tls_fleet: TlsFleet, tmp_path: Path):
    fleet = tls_fleet
    token = fleet.token("agent", "--host", "lone1")
    manifest = tmp_path / "m.yaml"
    manifest.write_text("resources:\n  - Directory[/srv]: {}\n")
    (tmp_path / "cfg.toml").write_text('[host]\nname = "lone1"\n')
    root = tmp_path / "root"
    root.mkdir()
    common = ["apply", str(manifest), "--root", str(root), "--config", str(tmp_path / "cfg.toml"),
              "--report-to", fleet.url, "--token", token]
    untrusted = fleet.datum(*common)
    assert "the pass report was not delivered" in untrusted.err and "not trusted" in untrusted.err
    trusted = fleet.datum(*common, "--state", str(tmp_path / "s2.db"), env={"DATUM_CA_FILE": str(fleet.ca)})
    assert trusted.code == 0 and "not delivered" not in trusted.err, trusted.err
    assert fleet.get("/v1/hosts/lone1", fleet.token("operator")).json()["state"] == "converged"
    (root / "srv").rmdir()
    bad = fleet.datum(*common, "--pin", "sha256:abc")
    assert bad.code == 64 and "'sha256:abc' is not a pin" in bad.err, bad.err
    assert not (root / "srv").exists()  # refused before the pass


def _certificates(home: Path) -> tuple[Path, Path, str, Path]:
    """A certificate chain and key of a CA of its own (made as tls = "auto" makes them, in ``home``), its
    server certificate's pin, and the CA's file."""
    from datum.config import Settings
    from datum.fleet.tls import prepared

    served = prepared(Settings.model_validate({"home": str(home), "server": {"tls": "auto", "tls_names": ["127.0.0.1"]}}))
    assert served is not None
    assert served.ca_file is not None
    return served.cert_file, served.key_file, served.chain[0].pin, served.ca_file


def test_sighup_swaps_the_certificate_files_while_a_held_long_poll_is_answered(tmp_path: Path):
    first_cert, first_key, first_pin, first_ca = _certificates(tmp_path / "a")
    second_cert, second_key, second_pin, _ = _certificates(tmp_path / "b")
    served_cert, served_key = tmp_path / "served.pem", tmp_path / "served.key"
    served_cert.write_bytes(first_cert.read_bytes())
    served_key.write_bytes(first_key.read_bytes())
    files = f'tls_cert = "{served_cert}"\ntls_key = "{served_key}"\n'
    with _fleet(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}", kind=TlsFleet, server=files) as fleet:
        assert isinstance(fleet, TlsFleet)
        fleet.tls_dir.mkdir(parents=True)
        fleet.ca.write_bytes(first_ca.read_bytes())  # what httpx trusts: the first certificate's CA
        fleet.start()
        assert _leaf_pin(fleet.port) == first_pin
        token = fleet.token("agent", "--host", "web1")
        etag = fleet.get("/v1/hosts/web1/manifest", token).headers["ETag"]
        answered: list[httpx.Response] = []

        def hold() -> None:  # a long poll on a connection made with the first certificate
            answered.append(httpx.get(
                fleet.url + "/v1/hosts/web1/manifest?wait=60", timeout=90, verify=fleet.verify,
                headers={"Authorization": f"Bearer {token}", "If-None-Match": etag},
            ))

        poll = threading.Thread(target=hold)
        poll.start()
        time.sleep(1.0)  # held
        served_cert.write_bytes(second_cert.read_bytes())
        served_key.write_bytes(second_key.read_bytes())
        assert fleet.proc is not None
        fleet.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while _leaf_pin(fleet.port) != second_pin:  # new handshakes present the new certificate
            assert time.monotonic() < deadline, fleet.log_of(0).read_text()
            time.sleep(0.2)
        assert fleet.proc.poll() is None and poll.is_alive() and not answered
        (fleet.manifests / "common.yaml").write_text("resources:\n  - Directory[/srv]:\n      mode: '0750'\n")
        poll.join(60)
        assert answered and answered[0].status_code == 200 and answered[0].headers["ETag"] != etag
        assert "SIGHUP: the certificate of 127.0.0.1 was loaded again" in fleet.log_of(0).read_text()
        # files that do not load: the certificate in use stays, said in the log
        served_key.write_bytes(first_key.read_bytes())
        fleet.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "the certificate in use is kept" not in fleet.log_of(0).read_text():
            assert time.monotonic() < deadline, fleet.log_of(0).read_text()
            time.sleep(0.2)
        assert _leaf_pin(fleet.port) == second_pin and fleet.proc.poll() is None


def test_plain_http_off_loopback_is_refused_at_start_unless_asked_for(tmp_path: Path):
    """Checked before anything listens: 192.0.2.1 (TEST-NET) is no address of this host, so a start that got
    past the refusal fails to listen (exit 69), and nothing here ever binds an address but loopback."""
    (tmp_path / "server.toml").write_text(f'store = "sqlite:///{tmp_path / "datum.db"}"\n[server]\nscheduler = false\n')
    fleet = Fleet(tmp_path, "")
    refused = fleet.datum("serve", "--config", str(tmp_path / "server.toml"), "--host", "192.0.2.1", "--port", "8443")
    assert refused.code == 65, refused.err
    assert "refused to serve plain HTTP on 192.0.2.1" in refused.err and "--insecure-http" in refused.err
    asked = fleet.datum("serve", "--config", str(tmp_path / "server.toml"), "--host", "192.0.2.1", "--port", "8443",
                        "--insecure-http")
    assert asked.code == 69 and "192.0.2.1 is not an address of this host" in asked.err, asked.err
    (tmp_path / "server.toml").write_text((tmp_path / "server.toml").read_text() + "insecure_http = true\n")
    configured = fleet.datum("serve", "--config", str(tmp_path / "server.toml"), "--host", "192.0.2.1", "--port", "8443")
    assert configured.code == 69, configured.err


def test_an_operator_s_remote_command_trusts_what_it_is_told(tls_fleet: TlsFleet, tmp_path: Path):
    """``--server`` commands (issue 36, item 6) take the agent's ``--ca-file`` and ``--pin`` (and their
    environment variables): told nothing about the server's own CA they are refused, saying what was presented;
    told its CA file or its pin they answer; a wrong pin is refused."""
    fleet = tls_fleet
    token_file = tmp_path / "operator.token"
    token_file.write_text(fleet.token("operator"))
    token_file.chmod(0o600)
    common = ["hosts", "--server", fleet.url, "--token-file", str(token_file), "--json"]
    untrusted = fleet.datum(*common)
    assert untrusted.code == 69 and "give them to --ca-file or --pin" in untrusted.out, untrusted.out  # --json: on stdout
    by_ca = fleet.datum(*common, "--ca-file", str(fleet.ca))
    assert by_ca.code == 0 and "hosts" in json.loads(by_ca.out), by_ca.err
    pin = fleet.show()["pin"]
    by_pin = fleet.datum(*common, env={"DATUM_PIN": pin})
    assert by_pin.code == 0, by_pin.err
    wrong = fleet.datum(*common, "--pin", "sha256:" + "0" * 64)
    assert wrong.code == 69 and "sha256:" + "0" * 64 in wrong.out, wrong.out
