"""``--report-to`` never sends the token to another origin: a redirect is a failed delivery, said so."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

MANIFEST = "resources:\n  - File[/etc/motd]:\n      content: 'hi\\n'\n"


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[HTTPServer, str]:
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def servers(request) -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    """A server that redirects every request, with status ``request.param``, to a second one that records."""
    seen: list[tuple[str, str, str]] = []

    class Other(BaseHTTPRequestHandler):
        def _record(self) -> None:
            seen.append((self.command, self.path, self.headers.get("Authorization", "")))
            self.send_response(201)
            self.end_headers()

        do_GET = do_POST = _record  # noqa: N815 - the stdlib's names

        def log_message(self, *args: object) -> None:
            pass

    other, other_url = _serve(Other)

    class Redirector(BaseHTTPRequestHandler):
        def _redirect(self) -> None:
            self.send_response(request.param)
            self.send_header("Location", f"{other_url}/stolen{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _redirect  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    first, first_url = _serve(Redirector)
    yield first_url, seen
    first.shutdown()
    other.shutdown()


@pytest.mark.parametrize("servers", [301, 302, 303, 307, 308], indirect=True)
def test_a_redirect_is_not_followed_and_the_delivery_fails(host, servers):
    url, seen = servers
    result = host.apply(host.manifest(MANIFEST), "--report-to", url, "--token", "s3cret")
    assert result.code == 2, result.out + result.err  # a failed delivery is not a failed pass
    assert seen == []  # the other origin never heard of the pass, nor of the token
    assert "warning: the pass report was not delivered" in result.err
    assert "a redirect to" in result.err and "not followed" in result.err
    assert "s3cret" not in result.out + result.err


def test_a_trickled_answer_is_cut_at_the_deadline():
    """Issue 40: ``--report-to`` had urllib's per-read timeout only, so a server sending a byte
    every half second held ``datum apply`` for as long as it kept sending; the whole answer is
    bounded now, as the agent's are (``datum.bounded``)."""
    import time

    from datum.host.remote import post_report

    stop = threading.Event()

    class Trickle(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 100:
                if stop.is_set():
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.5)

        def log_message(self, *args: object) -> None:
            pass

    server, url = _serve(Trickle)
    try:
        started = time.monotonic()
        why = post_report(url, "web1", {"host": "web1"}, "datum_x", deadline=1.0)
        took = time.monotonic() - started
    finally:
        stop.set()
        server.shutdown()
    assert why is not None and "gave no whole answer within 1s" in why
    assert took < 10
