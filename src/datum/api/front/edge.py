"""The outermost ASGI layer: what every request meets before the front door (``datum.api.front.guard``).

- ``HEAD`` is answered wherever ``GET`` is (load balancers probe with it): the
  request is served as ``GET`` and the body dropped, headers (``Content-Length``
  included) kept.
- A trailing slash is not a different resource: ``/v1/hosts/`` is served as
  ``/v1/hosts``, with no redirect (Starlette's would name an absolute URL built
  from the ``Host`` header, wrong behind a proxy).
- An exception that escapes everything below, before a response started, is
  ``500 INTERNAL`` in the contract's shape, its detail in the log (the path
  with anything that looks like a token redacted); never uvicorn's
  plain-text answer.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from datum.api.front.errors import INTERNAL, problem_response, redacted

log = logging.getLogger("datum.api")


class Edge:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        head = scope["method"] == "HEAD"
        if head or (len(path) > 1 and path.endswith("/")):
            scope = dict(scope)
            if head:
                scope["method"] = "GET"
            if len(path) > 1 and path.endswith("/"):
                scope["path"] = path.rstrip("/") or "/"
                raw = scope.get("raw_path")
                if raw:
                    scope["raw_path"] = raw.rstrip(b"/") or b"/"
        if head:
            send = _bodiless(send)
        try:
            await self.app(scope, receive, send)
        except Exception:
            log.exception("unexpected error serving %s %s", scope["method"], redacted(scope["path"]))
            # If a response had started, this start is refused by the server and the connection dropped.
            await problem_response(INTERNAL, close=True)(scope, receive, send)


def _bodiless(send: Send) -> Send:
    """``send`` with every body dropped: the answer to a HEAD (headers, Content-Length included, kept)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return sending
