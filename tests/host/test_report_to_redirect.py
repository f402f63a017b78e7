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


class _Trickle(BaseHTTPRequestHandler):
    """Answers a byte every half second, for as long as it is let."""

    stop = threading.Event()

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        import time

        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 1000:
            if self.stop.is_set():
                return
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return
            time.sleep(0.5)

    def log_message(self, *args: object) -> None:
        pass


def test_datum_apply_report_to_waits_for_the_answer_as_long_as_agent_answer_deadline_says(host):
    """Issue 40 item 7: the 60 s bound is the ``[agent] answer_deadline`` setting; ``datum apply --report-to``
    reads it (a real ``datum apply`` process against a server that trickles its answer)."""
    import time

    host.configure('[agent]\nanswer_deadline = "2s"\n')
    server, url = _serve(_Trickle)
    try:
        started = time.monotonic()
        result = host.apply(host.manifest(MANIFEST), "--report-to", url, "--token", "datum_x")
        took = time.monotonic() - started
    finally:
        _Trickle.stop.set()
        server.shutdown()
    assert result.code == 2, result.out + result.err  # the pass converged; the delivery failed, said so
    assert "gave no whole answer within 2s" in result.err, result.err
    assert took < 30  # 60 s by default


def test_the_agent_takes_a_manifest_answer_no_larger_than_agent_max_answer_bytes(host, tmp_path):
    """``[agent] max_answer_bytes``: a real ``datum agent --once`` against a server whose manifest answer is 2 MiB
    refuses it at 1 MiB, keeps none and says why; the defaults are 60 s and 16 MiB."""
    from datum.config import AgentSettings
    from datum.core.bounds import ANSWER_DEADLINE, MAX_ANSWER

    assert AgentSettings().answer_deadline.total_seconds() == ANSWER_DEADLINE == 60
    assert AgentSettings().max_answer_bytes == MAX_ANSWER == 16 * 2**20

    class Large(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b'{"resources": [], "pad": "' + b"x" * 2 * 2**20 + b'"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    token = tmp_path / "token"
    token.write_text("datum_x\n")
    host.configure(f'[host]\nstate = "{host.state}"\n[agent]\nmax_answer_bytes = 1048576\n')
    server, url = _serve(Large)
    try:
        result = host.datum("agent", "--once", "--server", url, "--token-file", str(token), "--root", str(host.root))
    finally:
        server.shutdown()
    said = result.out + result.err
    assert "more than the 1 MiB an answer may be" in said and "manifest none" in said, said


@pytest.mark.parametrize(("line", "why"), [('answer_deadline = "0s"', "answer_deadline"),
                                          ('answer_deadline = "2h"', "from 1s to 1h"),
                                          ("max_answer_bytes = 1000", "max_answer_bytes"),
                                          ("answer_timeout = 5", "answer_timeout")])
def test_agent_settings_out_of_bounds_are_refused_naming_the_setting(host, line, why):
    host.configure(f"[agent]\n{line}\n")
    result = host.apply(host.manifest(MANIFEST))
    assert result.code == 65 and why in result.err, result.err
