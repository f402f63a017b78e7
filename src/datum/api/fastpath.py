"""The hot requests, answered without the framework: a fresh drift report, and an agent's pass report.

Dashboards and scrapers poll ``GET .../reconcilers/{name}/drift``; through
FastAPI's routing and dependency injection a cached answer still costs ~0.6 ms
of CPU, which under 100 concurrent pollers on two cores puts the tail past
50 ms. This ASGI middleware serves the request itself only when every answer
is already known and good: the token resolves to a principal, Cedar's
(memoised) decision is Allow, the registry is wired, the name is registered
and a report is cached (a stale one starts its refresh, as through the
route). The token must be known without asking the store (configured, or
cached from an earlier request): nothing here blocks the event loop.
Anything else (no token, a refusal, no report yet, an unknown name) falls
through to the routes, so every error still has exactly one code path and
one shape.

``ReportFastPath`` does the same for ``POST /v1/hosts/{host}/passes``, the
fleet's hot write (every agent, every interval): a known token that Cedar lets
report for the host, and a body that validates as a ``PassReport`` and holds
together, is stored in one worker-thread hop (``datum.api.passes.take``, the
route's own code) without FastAPI's routing and dependencies. A body that
does not validate, a refusal or an unknown token goes to the route with the
body replayed, for its one error path; a store fault is answered in the
contract's shape (503).

``ManifestFastPath`` answers ``GET /v1/hosts/{host}/manifest`` (every agent,
every interval) when the effective manifest is already composed for the fleet
directory's files as they are now (``datum.fleet.effective.remembered``: a
``stat`` per file, no read, so an edit is seen by the next request), the token
is known and Cedar lets it read the host's manifest; a matching
``If-None-Match`` is a bodiless 304. A first request, an edited directory,
facts that do not parse: the route, which composes in a worker thread.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import anyio.to_thread
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from datum.api.authz import Action, host, reconciler
from datum.api.errors import problem_response
from datum.api.guard import bearer, header, replayed
from datum.api.passes import take
from datum.api.state import ServerState
from datum.core.findings import Problem
from datum.fleet.effective import Effective, remembered
from datum.host.report import PassReport

_DRIFT = re.compile(r"/v1/observability/admin/reconcilers/([^/]{1,100})/drift")
_PASSES = re.compile(r"/v1/hosts/([^/]{1,253})/passes")
_MANIFEST = re.compile(r"/v1/hosts/([^/]{1,253})/manifest")
_HEADERS = [(b"content-type", b"application/json")]


async def _send_json(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [*_HEADERS, (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class DriftFastPath:
    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("query_string"):
            match = _DRIFT.fullmatch(scope["path"])
            body = self._known_answer(scope, match.group(1)) if match else None
            if body is not None:
                await _send_json(send, 200, body)
                return
        await self.app(scope, receive, send)

    def _known_answer(self, scope: Scope, name: str) -> bytes | None:
        state = self.state
        if state.registry is None or name not in state.registry:
            return None
        entry = state.reports.current(name)
        if entry is None:
            return None
        token = bearer(scope)
        # Only a token known without the store: this runs on the event loop.
        principal = state.tokens.known(token) if token else None
        if principal is None or not state.authorizer.allowed(principal, Action.READ_SUBSTRATE, reconciler(name)):
            return None
        return entry.body


class ReportFastPath:
    """``POST /v1/hosts/{host}/passes`` without the framework, when nothing about it is in doubt."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = None
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("query_string"):
            match = _PASSES.fullmatch(scope["path"])
        if match is None or not self._allowed(scope, match.group(1)):
            await self.app(scope, receive, send)
            return
        message = await receive()  # RequestGuard (outside) has read the whole body, within its limits
        body = message.get("body", b"") if message["type"] == "http.request" else b""
        try:
            report = PassReport.model_validate_json(body) if body else None
        except ValidationError:
            report = None
        if report is None or report.host != match.group(1):  # the route says what is wrong, its one way
            await self.app(scope, replayed(body, receive), send)
            return
        try:
            answer = await anyio.to_thread.run_sync(take, self.state, match.group(1), report)
        except Problem as problem:  # a report that does not hold together (422), a store fault (503)
            await problem_response(problem)(scope, receive, send)
            return
        extra = None if answer.status == 201 else [(b"datum-pass", answer.outcome.encode())]
        await _send_json(send, answer.status, answer.body, extra)

    def _allowed(self, scope: Scope, name: str) -> bool:
        state = self.state
        if state.store is None or not (header(scope, b"content-type") or b"").startswith(b"application/json"):
            return False
        token = bearer(scope)
        # Only a token known without the store: this runs on the event loop.
        principal = state.tokens.known(token) if token else None
        return principal is not None and state.authorizer.allowed(principal, Action.REPORT_PASS, host(name))



class ManifestFastPath:
    """``GET /v1/hosts/{host}/manifest`` without the framework, when the manifest is composed already."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("query_string"):
            match = _MANIFEST.fullmatch(scope["path"])
            found = self._known_answer(scope, match.group(1)) if match else None
            if found is not None:
                etag = f'"{found.digest}"'.encode()
                wanted = header(scope, b"if-none-match")
                if wanted is not None and matches(wanted.decode("latin-1"), etag.decode()):
                    await send({"type": "http.response.start", "status": 304, "headers": [(b"etag", etag)]})
                    await send({"type": "http.response.body", "body": b""})
                else:
                    await _send_json(send, 200, found.body, [(b"etag", etag)])
                return
        await self.app(scope, receive, send)

    def _known_answer(self, scope: Scope, name: str) -> Effective | None:
        state = self.state
        directory = state.settings.fleet.manifests
        token = bearer(scope)
        # Only a token known without the store: this runs on the event loop.
        principal = state.tokens.known(token) if token else None
        if directory is None or principal is None:
            return None
        if not state.authorizer.allowed(principal, Action.READ_MANIFEST, host(name)):
            return None
        raw = header(scope, b"x-datum-facts")
        try:
            facts = json.loads(raw) if raw else {}
        except ValueError:
            return None
        if not isinstance(facts, dict):
            return None
        return remembered(_resolved(str(directory)), name, facts)


@cache
def _resolved(directory: str) -> Path:
    """The fleet directory, resolved once per process (the route resolves it on every request)."""
    return Path(directory).resolve()


def matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110's weak comparison for ``If-None-Match``: ``*``, or any listed tag, ``W/`` or not."""
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags
