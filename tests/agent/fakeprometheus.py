"""A fake Prometheus on loopback: ``GET /api/v1/query`` answers with the real instant-query JSON shape
(``{"status": "success", "data": {"resultType": "vector", "result": [...]}}``), the series the test sets.

A fake, not Prometheus: it evaluates nothing, it returns ``series`` whatever the query, and records each query
it was asked (``asked``). ``status`` other than 200 answers an error as Prometheus does; ``delay`` holds the
answer; ``body`` replaces the answer's bytes (a cut or oversized answer)."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FIRING = {"__name__": "ALERTS", "alertname": "HostDown", "alertstate": "firing", "severity": "page"}


class FakePrometheus(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.series: list[dict[str, str]] = []
        self.status = 200
        self.delay = 0.0
        self.body: bytes | None = None
        self.asked: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> FakePrometheus:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()

    def answer(self) -> tuple[int, bytes]:
        if self.body is not None:
            return self.status, self.body
        if self.status != 200:
            return self.status, json.dumps({"status": "error", "errorType": "internal", "error": "fake"}).encode()
        result = [{"metric": labels, "value": [time.time(), "1"]} for labels in self.series]
        return 200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


class _Handler(BaseHTTPRequestHandler):
    server: FakePrometheus

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = urllib.parse.urlsplit(self.path)
        if parts.path != "/api/v1/query":
            self.send_error(404)
            return
        self.server.asked.extend(urllib.parse.parse_qs(parts.query).get("query", []))
        if self.server.delay:
            time.sleep(self.server.delay)
        status, body = self.server.answer()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): what a real server meets too

    def log_message(self, *_args: Any) -> None:
        pass
