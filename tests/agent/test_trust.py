"""What a pin proves (``datum.trust``), against a real TLS server on loopback presenting chains made here.

A CA's certificate is public: a server presenting it beside a certificate another CA issued, or one made out
to other names, is refused by a client pinning that CA. The rules of what is checked where are in
``datum.trust``'s docstring; ``tests/agent/test_agent_tls.py`` runs them between real ``datum`` processes.
"""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from datum.bounded import Unusable, request
from datum.config import Settings
from datum.fleet.tls import prepared
from datum.trust import Untrustworthy, parse_pin, trust


def _made(home: Path, *names: str) -> tuple[bytes, bytes, bytes, str]:
    """(the server certificate, its key, its CA's certificate, the CA's pin) as tls = "auto" makes them."""
    served = prepared(Settings.model_validate({"home": str(home), "server": {"tls": "auto", "tls_names": list(names)}}))
    assert served is not None and served.ca_file is not None
    chain = served.cert_file.read_bytes()
    leaf = chain[: chain.index(b"-----END CERTIFICATE-----\n") + 26]
    return leaf, served.key_file.read_bytes(), served.ca_file.read_bytes(), served.pin


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_args: object) -> None:
        pass


@contextmanager
def serving(tmp_path: Path, chain: bytes, key: bytes) -> Iterator[str]:
    """An HTTPS server on 127.0.0.1 presenting ``chain`` (PEM, its own first); its URL."""
    (tmp_path / "chain.pem").write_bytes(chain)
    (tmp_path / "key.pem").write_bytes(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "chain.pem", tmp_path / "key.pem")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_pin_of_a_ca_presented_beside_a_certificate_another_ca_issued_is_refused(tmp_path: Path):
    _leaf, _key, ca, pin = _made(tmp_path / "pinned", "127.0.0.1")
    other_leaf, other_key, _other_ca, _other_pin = _made(tmp_path / "other", "127.0.0.1")
    with serving(tmp_path, other_leaf + ca, other_key) as url:  # the pinned CA's public certificate, appended
        with pytest.raises(Unusable) as refused:
            request("GET", url, {}, trust=trust(None, pin), limit=100)
    said = str(refused.value)
    assert "is not trusted" in said and "is not one the pinned CA (CN=Datum CA" in said and "issued for 127.0.0.1" in said


def test_a_pin_of_a_ca_that_issued_the_certificate_for_other_names_is_refused(tmp_path: Path):
    leaf, key, ca, pin = _made(tmp_path / "ca", "datum.example.com")
    with serving(tmp_path, leaf + ca, key) as url:
        with pytest.raises(Unusable) as refused:
            request("GET", url, {}, trust=trust(None, pin), limit=100)
        assert "issued for 127.0.0.1" in str(refused.value)
        # the server's own key pinned: the handshake proved the server holds it, whatever names it carries
        from cryptography import x509

        from datum.trust import pin_of

        leaf_pin = pin_of(x509.load_pem_x509_certificate(leaf))
        assert request("GET", url, {}, trust=trust(None, leaf_pin), limit=100).body == b"ok"


def test_ca_file_pin_or_both_trust_the_server_the_ca_issued(tmp_path: Path):
    leaf, key, ca, pin = _made(tmp_path / "ca", "127.0.0.1")
    (tmp_path / "ca.pem").write_bytes(ca)
    with serving(tmp_path, leaf + ca, key) as url:
        for given in (trust(str(tmp_path / "ca.pem"), None), trust(None, pin), trust(str(tmp_path / "ca.pem"), pin)):
            assert request("GET", url, {}, trust=given, limit=100).body == b"ok"
        with pytest.raises(Unusable, match="self-signed certificate in certificate chain"):
            request("GET", url, {}, limit=100)  # the system's CAs: not this one
        # the CA file verifies the chain, and the pin must be in it as well
        with pytest.raises(Unusable, match="expected sha256:1111"):
            request("GET", url, {}, trust=trust(str(tmp_path / "ca.pem"), "sha256:" + "1" * 64), limit=100)
        # another CA's file: refused, naming what was expected and what the server presents
        _leaf, _key, other_ca, _pin = _made(tmp_path / "other", "127.0.0.1")
        (tmp_path / "other.pem").write_bytes(other_ca)
        with pytest.raises(Unusable) as refused:
            request("GET", url, {}, trust=trust(str(tmp_path / "other.pem"), None), limit=100)
        from cryptography import x509

        from datum.trust import pin_of

        said = str(refused.value)
        assert f"expected a certificate issued by a CA in {tmp_path / 'other.pem'} for 127.0.0.1" in said
        assert f"presented {pin_of(x509.load_pem_x509_certificate(leaf))} (CN=127.0.0.1), {pin} (CN=Datum CA " in said


def test_a_pin_for_a_plain_http_url_sends_nothing():
    import socket

    with socket.socket() as listening:  # a server that would take the request, were it sent
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        listening.settimeout(0.5)
        url = f"http://127.0.0.1:{listening.getsockname()[1]}/"
        with pytest.raises(Unusable, match="is plain HTTP: --ca-file and --pin trust an https:// server only"):
            request("GET", url, {}, trust=trust(None, "sha256:" + "a" * 64))
        with pytest.raises(TimeoutError):
            listening.accept()  # no connection was made


def test_pins_and_ca_files_are_read_at_once_and_said_wrong_exactly(tmp_path: Path):
    upper = "SHA256:" + "AB" * 32
    with pytest.raises(ValueError, match="is not a pin"):
        parse_pin(upper)  # the prefix is as printed
    assert parse_pin("sha256:" + "AB" * 32) == "sha256:" + "ab" * 32
    for wrong in ("sha256:abc", "abc", "sha256//" + "a" * 43 + "="):
        with pytest.raises(Untrustworthy) as bad:
            trust(None, wrong)
        assert bad.value.option == "--pin"
    with pytest.raises(Untrustworthy, match="does not exist") as missing:
        trust(str(tmp_path / "nope.pem"), None)
    assert missing.value.option == "--ca-file"
    (tmp_path / "empty.pem").write_text("not a certificate\n")
    with pytest.raises(Untrustworthy, match="holds no PEM certificate"):
        trust(str(tmp_path / "empty.pem"), None)
