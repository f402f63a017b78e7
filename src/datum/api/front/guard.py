"""The front door: every HTTP request is admitted here, once, before FastAPI sees it.

An ASGI layer inside ``datum.api.front.edge`` and outside the framework. It finds
the route that will serve the request (by method and path, as FastAPI routes
it: the first route that matches both) and, when the route ``needs`` a Cedar
action:

- resolves the bearer token to a principal (``datum.api.front.security.principal``),
  else ``401 UNAUTHENTICATED``;
- asks Cedar for the route's action on the resource its path names
  (``datum.api.front.security.decide``, memoised), else ``403 FORBIDDEN``;
- leaves both in the ASGI scope (``security.Admission``), where the route's
  ``needs`` dependency and its fast answer read them: nothing is decided twice.

A route that proves its caller itself (``security.own_proof``: a host enrolling, or asking for a session) needs
no action; an acting request to it that names one for the audit log has its row left pending as an admitted
act's (``datum.api.front.audit``), the route saying whom it proved.

A decision never depends on the body, and comes before it: a request that
carries one (``Content-Length`` above zero, or ``Transfer-Encoding``) is
refused before a byte of it is read, and must present a known token whatever
its path (but on a route that proves its caller itself, ``security.own_proof``:
a host enrolling). Then:

- a body longer than ``[server] max_body_bytes`` is ``413 PAYLOAD_TOO_LARGE``:
  at once when ``Content-Length`` says so, as soon as the count passes the
  bound when the body is chunked;
- the whole body must arrive within ``[server] body_timeout``, else ``408
  REQUEST_TIMEOUT``, so a client trickling its body a byte at a time holds no
  worker.

A refusal before the body closes the connection (the rest is never read). The
body read here is handed on as one message. A route that registered a fast
answer (``security.fast``) is offered an admitted request without a query
string (or with only the query parameters it reads, each once) first: what
it answers goes out without FastAPI's routing and dependencies; when it
answers None the request goes on to the route. A fast answer that waits (a
long poll) answers a ``security.Later``: the guard awaits its future in its
own coroutine and asks it again, so a held request keeps no coroutine of the
answer's. Every refusal is written by
``datum.api.front.errors.written``.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
from fastapi import Request
from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from datum.api.front.audit import ACTING, Recording, admitted, audited, facts
from datum.api.front.errors import problem_response
from datum.api.front.gate import READS
from datum.api.front.security import (
    ADMISSION,
    FACTS,
    Admission,
    Asked,
    FastAnswer,
    Later,
    Need,
    Reply,
    cedar_uid,
    decide,
    decided,
    decision,
    fast_of,
    fast_query,
    header,
    need_of,
    own_action,
    principal,
    proves_itself,
    told,
)
from datum.api.front.state import ServerState
from datum.core.findings import ErrorCode, Problem
from datum.store.audit import PENDING, Entry, Pending


@dataclass(frozen=True, slots=True)
class Served:
    """A route as the guard sees it: what it matches, what it needs, its fast answer."""

    methods: set[str] | None
    path: re.Pattern[str] | None  # the route's own path_regex: what its matches asks first
    matches: Callable[[Scope], tuple[Match, Scope]]
    need: Need | None
    answer: FastAnswer | None
    query: frozenset[str] = frozenset()  # the query parameters ``answer`` reads
    own_proof: bool = False  # the route proves its caller itself (security.own_proof): a body without a token
    status: int = 200  # what it answers when it does what it is asked (an acting route's audit row says it)
    own_action: str | None = None  # the audit log's action of an own_proof route's acting request


def served(routes: Sequence[BaseRoute]) -> list[Served]:
    """The app's routes as FastAPI routes them (``iter_route_contexts``, what its OpenAPI document walks)."""
    return [
        Served(
            route.methods,
            getattr(route, "path_regex", None),
            route.matches,
            need_of(getattr(route, "dependant", None)),
            fast_of(route.endpoint),
            fast_query(route.endpoint),
            proves_itself(getattr(route, "endpoint", None)),
            getattr(route, "status_code", None) or 200,
            own_action(getattr(route, "endpoint", None)),
        )
        for route in iter_route_contexts(routes)
    ]


class RequestGuard:
    def __init__(self, app: ASGIApp, state: ServerState, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.state = state
        self._routes = routes
        self._served: list[Served] | None = None  # walked at the first request: plugins mount theirs first
        self.audit = Recording(state)

    def route(self, scope: Scope) -> tuple[Served, Scope] | None:
        """The route that serves ``scope`` and its match (path parameters), or None for a path none serves."""
        if self._served is None:
            self._served = served(self._routes)
        method = scope["method"]
        path = None if scope.get("root_path") else scope["path"]  # under a root path, Starlette matches the rest
        for route in self._served:
            if route.methods is not None and method not in route.methods:
                continue  # Starlette's routing goes on past a route of another method, too
            if path is not None and route.path is not None and route.path.match(path) is None:
                continue  # what route.matches would say, without the scope it builds
            match, child = route.matches(scope)
            if match is Match.FULL:
                return route, child
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = header(scope, b"content-length")
        chunked = header(scope, b"transfer-encoding") is not None
        has_body = chunked or (length is not None and length.strip() not in (b"", b"0"))
        found = self.route(scope)
        try:
            admission = await self._admit(scope, found, has_body)
        except Problem as problem:  # the body, if any, is never read: the connection closes
            refused: Entry | None = scope.get(FACTS)  # a 401 or a 403: one audit row
            await problem_response(problem, close=has_body)(
                scope, receive, send if refused is None else self.audit.sending(send, refused, None)
            )
            return
        entry: Entry | None = scope.get(FACTS)  # an admitted request's, or an acting one that proves its caller
        acting = entry is not None and audited(scope["method"], entry.action, self.state.settings.server.audit_reports)
        reset = None
        if entry is not None and (acting or admission is None or admission.allowed is None):
            # An audited act, or a request its route decides: its audit row is written in its change's
            # transaction (datum.store.audit.PENDING) or with its answer (a refusal's).
            pending = None
            if acting:
                assert found is not None
                entry.status = found[0].status
                pending = Pending(entry)
            send = self.audit.sending(send, entry, pending)
            reset = PENDING.set(pending)
        # The admitted request: its body read (bounded in size and time), then its fast answer or its route,
        # here in this one coroutine: a long poll a fast answer holds waits under it, and each coroutine more
        # in the chain would be a frame held for the whole wait (docs/performance.md).
        try:
            if has_body:
                try:
                    self._declared(length)
                except Problem as problem:  # the body is never read: the connection closes
                    await problem_response(problem, close=True)(scope, receive, send)
                    return
                read = await self._body(receive)
                if isinstance(read, Problem):
                    await problem_response(read, close=True)(scope, receive, send)
                    return
                if read is None:  # the client left
                    return
                receive = replayed(read, receive)
            else:
                read = b""
            if found is not None and found[0].answer is not None and admission is not None and admission.allowed:
                query = offered(scope.get("query_string") or b"", found[0].query)
                if query is not None:
                    try:  # the answer's coroutine is awaited where it is made: nothing holds it once it is done
                        reply = await found[0].answer(Asked(self.state, scope, found[1].get("path_params", {}), read, query))
                        while isinstance(reply, Later):  # a long poll: only it is held while it waits
                            try:
                                if reply.ready is not None:
                                    await reply.ready
                            except BaseException:
                                reply.leave()
                                raise
                            reply = await reply.again()
                    except Problem as problem:  # e.g. a report that does not hold together (422), a store fault
                        await problem_response(problem)(scope, receive, send)
                        return
                    if reply is not None:
                        await _send(send, reply)
                        return
            if admission is None or admission.allowed is None or admission.allowed[0] not in READS:
                await self.app(scope, receive, send)
                return
            # A person's read that goes to its route (a fast answer needs no thread and no connection): one of
            # [server] read_slots, or shed (datum.api.front.gate).
            try:
                await self.state.reads.acquire()
            except Problem as shed:
                retry = str(shed.findings[0].details["retryAfter"])
                await problem_response(shed, {"Retry-After": retry})(scope, receive, send)
                return
            try:
                await self.app(scope, receive, send)
            finally:
                self.state.reads.release()
        finally:
            if reset is not None:
                PENDING.reset(reset)

    async def _admit(self, scope: Scope, found: tuple[Served, Scope] | None, has_body: bool) -> Admission | None:
        """The request's principal and decision, left in the scope; None when its route needs none."""
        need = found[0].need if found is not None else None
        if need is None and found is not None and found[0].own_action is not None and scope["method"] in ACTING:
            facts(scope).action = found[0].own_action  # an act like any other: its route fills in whom it proved
            return None
        if need is None:
            if has_body and not (found is not None and found[0].own_proof):  # a body is read only for a known
                # token, whatever will answer it, but by a route that proves its caller itself
                facts(scope)  # refused: one audit row
                await principal(self.state, scope)
                scope.pop(FACTS)
            return None
        entry = facts(scope)
        entry.action = str(need[0])  # a 401's row says what was asked
        assert found is not None
        try:  # handed the request before its body: path parameters, headers, query
            resource = need[1](Request({**scope, **found[1]}))
        except Exception:  # noqa: BLE001 - a resource not told before the body: the route decides, its one way
            resource = None
        else:
            entry.resource = cedar_uid(*resource)
        who = await principal(self.state, scope)
        admitted(scope, entry, who)
        if resource is None:
            admission = Admission(who, None)
        else:
            await told(self.state, who, resource)
            cedar = decision(self.state, who, need[0], resource)
            decided(entry, need[0], resource, cedar)
            if not cedar.allowed:
                decide(self.state, who, need[0], resource)  # the refusal, worded in one place
            admission = Admission(who, (str(need[0]), resource), cedar.policies)
        scope[ADMISSION] = admission
        return admission

    def _declared(self, length: bytes | None) -> None:
        if length is None:
            return
        try:
            declared = int(length)
        except ValueError:
            raise Problem.one(ErrorCode.INVALID_INPUT, "the Content-Length header is not a number") from None
        if declared > self.limit:
            raise self._too_large()

    @property
    def limit(self) -> int:
        return self.state.settings.server.max_body_bytes

    def _too_large(self) -> Problem:
        return Problem.one(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"the request body is larger than this server accepts ({self.limit} bytes, [server] max_body_bytes)",
            details={"maxBodyBytes": self.limit},
        )

    async def _body(self, receive: Receive) -> bytes | Problem | None:
        timeout = self.state.settings.server.body_timeout.total_seconds()
        chunks: list[bytes] = []
        size = 0
        with anyio.move_on_after(timeout) as scope:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.limit:
                    return self._too_large()
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        assert scope.cancelled_caught
        return Problem.one(
            ErrorCode.REQUEST_TIMEOUT,
            f"the request body did not arrive within {timeout:g}s ([server] body_timeout)",
        )


def offered(query_string: bytes, reads: frozenset[str]) -> dict[str, str] | None:
    """The query parameters of a request a fast answer may see (each of ``reads``, once), or None when
    there is any other (or one twice): the route's own parsing answers those."""
    if not query_string:
        return {}
    if not reads:
        return None
    try:
        pairs = urllib.parse.parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return None
    query = dict(pairs)
    return query if len(query) == len(pairs) and query.keys() <= reads else None


_JSON = (b"content-type", b"application/json")


async def _send(send: Send, reply: Reply) -> None:
    """A fast answer on the ASGI channel: a JSON body with its length, or a bodiless 304."""
    headers = reply.headers if reply.status == 304 else [_JSON, (b"content-length", str(len(reply.body)).encode()), *reply.headers]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


def replayed(body: bytes, receive: Receive) -> Receive:
    """``receive`` that gives ``body`` (read already) first, as one message."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: only the client leaving

    return replay
