"""``Faulty``: a small fake Datum server on loopback that answers the agent's two requests well or badly.

It stands in for the server where a real ``datum serve`` cannot misbehave on
purpose: a body cut short, JSON nested 100,000 deep, a file name with a NUL
byte, an answer trickled a byte at a time, 20 MiB where 16 is the most. It
serves one good manifest (a ``File`` under the agent's root) and takes pass
reports, recording their ``seq``; ``manifest`` and ``passes`` name the fault
each answers with next (``ok`` for none).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIGEST = "sha256:" + "ab" * 32
MANIFEST = {"resources": [{"File[/srv/good.txt]": {"source": "good.txt"}}]}
GOOD = json.dumps(
    {"digest": DIGEST, "manifest": MANIFEST, "files": {"good.txt": base64.b64encode(b"good\n").decode()}}
).encode()


def _served(files: dict[str, str]) -> bytes:
    return json.dumps({"digest": "sha256:" + "cd" * 32, "manifest": MANIFEST, "files": files}).encode()


# Each fault's body (or what the handler does instead), for the manifest and the pass alike.
BODIES = {
    "malformed": b'{"digest": "sha256:',
    "nested": b"[" * 100_000 + b"]" * 100_000,
    "nul": _served({"good.txt": "Z29vZAo=", "a\u0000b": "eA=="}),
    "climbing": _served({"good.txt": "Z29vZAo=", "../../outside": "eA=="}),
}


class Faulty(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.manifest = "ok"
        self.passes = "ok"
        self.received: list[int] = []  # the seq of every report taken, in the order taken
        self.sent_bytes = 0  # of the last large answer, how much the agent let through
        self.delay = 0.0  # seconds the next manifest answer waits before it is sent (once)
        self.fetches = 0  # manifest requests begun
        self.tokens: list[str] = []  # the bearer token of every request, in order
        self.stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Faulty

    def log_message(self, *_args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.fetches += 1
        self.server.tokens.append(self.headers.get("Authorization", "").removeprefix("Bearer "))
        delay, self.server.delay = self.server.delay, 0.0
        time.sleep(delay)
        if self.headers.get("If-None-Match") == f'"{DIGEST}"' and self.server.manifest == "ok":
            self._answer(304, b"")
            return
        self._fault(self.server.manifest, GOOD, etag=True)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.tokens.append(self.headers.get("Authorization", "").removeprefix("Bearer "))
        fault = self.server.passes
        if fault == "ok":
            self.server.received.append(json.loads(body)["seq"])
            self._answer(201, b"{}")
            return
        self._fault(fault, b"{}", etag=False)

    def _answer(self, status: int, body: bytes, *, etag: bool = False, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if etag:
            self.send_header("ETag", f'"{DIGEST}"')
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def _fault(self, fault: str, good: bytes, *, etag: bool) -> None:
        if fault == "ok":
            self._answer(200, good, etag=etag)
        elif fault in BODIES:
            self._answer(200, BODIES[fault], etag=etag)
        elif fault == "error":
            self._answer(503, json.dumps({"issues": [{"code": "UNAVAILABLE", "message": "down for a bit"}]}).encode())
        elif fault == "truncated":  # a server restarting mid-answer: fewer bytes than it said
            self._answer(200, good[: len(good) // 2], etag=etag, length=len(good))
            self.close_connection = True
        elif fault == "hangup":  # the connection closed with no answer at all
            self.close_connection = True
        elif fault == "slow":  # headers at once, then the body a byte every 0.5 s, for as long as it is read
            self.send_response(200)
            self.send_header("Content-Length", str(len(good)))
            self.end_headers()
            self._trickle(good)
        elif fault == "slow-headers":  # the status line itself a byte at a time
            self._trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        elif fault in ("large", "huge"):  # 20 MiB undeclared, or 300 MB declared
            self._large(declared=fault == "huge")
        else:  # pragma: no cover
            raise ValueError(fault)

    def _trickle(self, data: bytes) -> None:
        self.close_connection = True
        try:
            for byte in data:
                if self.server.stopping.is_set():
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.5)
        except OSError:
            pass

    def _large(self, *, declared: bool) -> None:
        self.close_connection = True
        self.send_response(200)
        if declared:
            self.send_header("Content-Length", str(300 * 10**6))
        self.end_headers()
        chunk = b" " * 2**20
        sent = 0
        try:
            for _ in range(300 if declared else 20):
                self.wfile.write(chunk)
                sent += len(chunk)
        except OSError:
            pass
        self.server.sent_bytes = sent


@contextmanager
def faulty() -> Iterator[Faulty]:
    server = Faulty()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()


def closed_port() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"
