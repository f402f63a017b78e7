"""The agent asks a server older than ``intervalSeconds`` for its reboot lease (agents upgraded first).

``OlderServer`` is a fake, and named so: a few lines on loopback standing in for a ``datum serve`` of an earlier
release, which this machine does not have. It answers the lease request as that release did: 422 in the
contract's shape naming the field it does not know, a grant without it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from datum.agent.lease import take

GRANT = {"host": "web1", "group": "web", "granted": True, "limit": 1, "rebooting": []}


@contextmanager
def older_server(asked: list[dict[str, object]], known: frozenset[str] = frozenset({"bootId", "facts"})) -> Iterator[str]:
    class OlderServer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append(body)
            unknown = sorted(set(body) - known)
            if unknown:
                status, answer = 422, {"issues": [{"code": "INVALID_INPUT", "message": "the request is not valid",
                                                   "fields": [{"field": f, "message": "unknown field"} for f in unknown]}]}
            else:
                status, answer = 200, GRANT
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), OlderServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_older_than_interval_seconds_is_asked_again_without_it():
    asked: list[dict[str, object]] = []
    with older_server(asked) as url:
        slot = take(url, "web1", "token", "boot-1", {}, interval=300.0)
    assert slot.granted, slot
    assert [sorted(a) for a in asked] == [["bootId", "facts", "intervalSeconds"], ["bootId", "facts"]]


def test_a_refusal_of_anything_else_is_no_lease_and_asked_once():
    asked: list[dict[str, object]] = []
    with older_server(asked, known=frozenset({"facts", "intervalSeconds"})) as url:  # refuses bootId
        slot = take(url, "web1", "token", "boot-1", {}, interval=300.0)
    assert not slot.granted and "422" in slot.words, slot
    assert len(asked) == 1
