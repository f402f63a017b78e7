"""Authenticating a request's bearer token and authorizing its action: 401, then 403.

Routes declare what they need with ``Depends(needs(action, resource))``; the
resource may depend on the path (``Reconciler::"buckets"``, ``Host::"web1"``).
``Required`` tells the request guard what a request's route needs, so a
refusal (403) is decided before a body is read. The token itself is never
logged and never echoed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import anyio
from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import iter_route_contexts
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from datum.api.authz import SERVER, Action, Resource
from datum.api.state import state_of
from datum.core.findings import Problem

bearer = HTTPBearer(auto_error=False, description="A token from `datum token create --principal NAME`.")

ResourceOf = Callable[[Request], Resource]


def _server(_request: Request) -> Resource:
    return SERVER


def path_resource(kind: str, param: str) -> ResourceOf:
    """The resource ``kind::"<path parameter param>"``."""

    def resource(request: Request) -> Resource:
        return (kind, str(request.path_params.get(param, "")))

    return resource


def _presented(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Problem.one("UNAUTHENTICATED", "this request needs an 'Authorization: Bearer <token>' header")
    return credentials.credentials


def _known(request: Request, principal: str | None) -> str:
    if principal is None:
        raise Problem.one("UNAUTHENTICATED", "the bearer token is not known to this server")
    request.state.principal = principal
    return principal


def principal_of(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str:
    """The principal behind the request's bearer token, or ``401 UNAUTHENTICATED`` (may ask the store)."""
    return _known(request, state_of(request).tokens.principal(_presented(credentials)))


async def resolve(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str:
    """``principal_of`` for the event loop: a token not known in memory is looked up in a worker thread."""
    token = _presented(credentials)
    book = state_of(request).tokens
    principal = book.known(token)
    if principal is None:
        principal = await anyio.to_thread.run_sync(book.principal, token)
    return _known(request, principal)


def authenticate(request: Request) -> str:
    """``principal_of`` from the raw ``Authorization`` header, outside FastAPI's dependencies."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    credentials = (
        HTTPAuthorizationCredentials(scheme=scheme, credentials=token.strip())
        if scheme and token.strip()
        else None
    )
    return principal_of(request, credentials)


def cedar_uid(kind: str, eid: str) -> str:
    """An entity id as Cedar writes it: ``Server::"datum"`` (the id a Cedar string literal)."""
    return f"{kind}::{json.dumps(eid, ensure_ascii=False)}"


def forbidden(principal: str, action: Action | str, resource: Resource) -> Problem:
    """``403 FORBIDDEN`` naming ``action``, the entities written as Cedar writes them."""
    return Problem.one(
        "FORBIDDEN",
        f"{cedar_uid('Principal', principal)} may not {cedar_uid('Action', str(action))} "
        f"on {cedar_uid(*resource)}",
        action=str(action),
    )


def decide(request: Request, principal: str, action: Action | str, resource: Resource) -> None:
    """``403 FORBIDDEN`` naming ``action`` unless the policies permit it."""
    if not state_of(request).authorizer.allowed(principal, action, resource):
        raise forbidden(principal, action, resource)


def needs(action: Action | str, resource: ResourceOf = _server) -> Callable[..., str]:
    """A dependency that authenticates the request and authorizes ``action``; returns the principal.

    It is ``async`` so a cached read never pays a thread hop: the decision is
    memoised and a known token is an in-memory lookup; a token that is not
    known yet is looked up in the store off the event loop.
    """

    async def dependency(
        request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
    ) -> str:
        principal = await resolve(request, credentials)
        decide(request, principal, action, resource(request))
        return principal

    _NEEDS[dependency] = (action, resource)
    return dependency


# What each ``needs`` dependency asks Cedar for: read by ``Required``, before a body is read.
Need = tuple[Action | str, ResourceOf]
_NEEDS: dict[Callable[..., Any], Need] = {}


class Required:
    """What the route that serves a request asks Cedar for (its ``needs``), told from the method and path alone.

    For the request guard, which decides before it reads a body. A decision
    never depends on the body: a ``ResourceOf`` is handed the request before
    its body is read (path parameters, headers, query), and one that cannot
    say (it raises) leaves the decision to the route, after the body. The
    routes are walked as FastAPI routes them (``iter_route_contexts``, what its
    OpenAPI document walks), once, at the first request: the first that
    matches the method and path serves it.
    """

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        self._routes = routes
        self._walked: list[tuple[set[str] | None, Callable[[Scope], tuple[Match, Scope]], Need | None]] | None = None

    def __call__(self, scope: Scope) -> tuple[Action | str, Resource] | None:
        """The action and resource of the request ``scope``; None for a path no route serves, or one without ``needs``."""
        if self._walked is None:
            self._walked = [
                (route.methods, route.matches, _need(getattr(route, "dependant", None)))
                for route in iter_route_contexts(self._routes)
            ]
        method = scope["method"]
        for methods, matches, need in self._walked:
            if methods is not None and method not in methods:
                continue  # Starlette's routing goes on past a route of another method, too
            match, child = matches(scope)
            if match is not Match.FULL:
                continue
            if need is None:
                return None
            try:
                return need[0], need[1](Request({**scope, **child}))
            except Exception:  # noqa: BLE001 - the route decides after the body, its one way
                return None
        return None


def _need(dependant: object) -> Need | None:
    """The ``needs`` of a route's dependencies, at any depth."""
    if not isinstance(dependant, Dependant):
        return None
    for sub in dependant.dependencies:
        need = _NEEDS.get(sub.call) if sub.call is not None else None
        if need is None:
            need = _need(sub)
        if need is not None:
            return need
    return None


def may(request: Request, principal: str, action: Action | str, resource: Resource = SERVER) -> bool:
    """Whether ``principal`` may take ``action``: for parts of a page, which leave out what is refused."""
    return state_of(request).authorizer.allowed(principal, action, resource)
