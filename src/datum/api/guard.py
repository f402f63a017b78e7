"""The server's first word on every request that carries a body: who asks, how much, how fast.

An ASGI middleware outside everything else (the drift fast path included):

- a request with a body (``Content-Length`` above zero, or ``Transfer-Encoding``)
  must carry a bearer token the server knows, else ``401 UNAUTHENTICATED``
  before a byte of the body is read, and the connection is closed;
- its principal must be allowed what its route asks Cedar for (the route's
  ``needs``: ``datum.api.security.Required``; the decision depends on the
  path, never on the body), else ``403 FORBIDDEN`` the same way;
- a body longer than ``[server] max_body_bytes`` is ``413 PAYLOAD_TOO_LARGE``:
  at once when ``Content-Length`` says so, as soon as the count passes the
  bound when the body is chunked;
- the whole body must arrive within ``[server] body_timeout``, else ``408
  REQUEST_TIMEOUT`` and the connection is closed, so a client trickling its
  body a byte at a time holds no worker.

The body read here is handed to the app as one message; every answer is in
the contract's error shape and closes the connection (the rest of the body is
never read). The routes decide again after the body (memoised): a request
the guard cannot place (an unknown path, a route whose resource is not told
by its path) is refused there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import anyio
import anyio.to_thread
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from datum.api.errors import STATUS_BY_CODE, public
from datum.api.security import Required, forbidden
from datum.api.state import ServerState
from datum.core.findings import Problem


def header(scope: Scope, name: bytes) -> bytes | None:
    """The value of the request header ``name`` (lower case), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def bearer(scope: Scope) -> str | None:
    """The bearer token of the request, or None."""
    value = header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.decode("latin-1").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def reply(send: Send, problem: Problem, *, close: bool = True) -> None:
    """Answer ``problem`` in the contract's shape, straight on the ASGI channel."""
    body = json.dumps(public(problem)).encode()
    status = STATUS_BY_CODE.get(problem.code, 500)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    def __init__(self, app: ASGIApp, state: ServerState, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.state = state
        self.required = Required(routes)  # the app's routes: a request's Cedar action and resource

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = header(scope, b"content-length")
        chunked = header(scope, b"transfer-encoding") is not None
        if not chunked and (length is None or length.strip() in (b"", b"0")):
            await self.app(scope, receive, send)
            return
        who = await self._who(scope)
        problem = who if isinstance(who, Problem) else self._refused(scope, who) or self._declared(length)
        if problem is not None:
            await reply(send, problem)
            return
        body = await self._body(receive)
        if isinstance(body, Problem):
            await reply(send, body)
            return
        if body is None:  # the client left
            return
        await self.app(scope, replayed(body, receive), send)

    async def _who(self, scope: Scope) -> str | Problem:
        token = bearer(scope)
        if token is None:
            return Problem.one(
                "UNAUTHENTICATED", "this request needs an 'Authorization: Bearer <token>' header"
            )
        principal = self.state.tokens.known(token)  # in memory: no thread hop for the hot requests
        try:  # a token not cached asks the store: off the event loop
            if principal is None:
                principal = await anyio.to_thread.run_sync(self.state.tokens.principal, token)
        except Problem as problem:
            return problem
        if principal is None:
            return Problem.one("UNAUTHENTICATED", "the bearer token is not known to this server")
        return principal

    def _refused(self, scope: Scope, principal: str) -> Problem | None:
        """The route's 403, when its Cedar decision (which never depends on the body) is a refusal."""
        need = self.required(scope)
        if need is None or self.state.authorizer.allowed(principal, *need):
            return None
        return forbidden(principal, *need)

    def _declared(self, length: bytes | None) -> Problem | None:
        if length is None:
            return None
        try:
            declared = int(length)
        except ValueError:
            return Problem.one("INVALID_INPUT", "the Content-Length header is not a number")
        return self._too_large() if declared > self.limit else None

    @property
    def limit(self) -> int:
        return self.state.settings.server.max_body_bytes

    def _too_large(self) -> Problem:
        return Problem.one(
            "PAYLOAD_TOO_LARGE",
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
            "REQUEST_TIMEOUT",
            f"the request body did not arrive within {timeout:g}s ([server] body_timeout)",
        )


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
