"""Who asks and what they may do: the one place a token becomes a principal and Cedar is asked.

- ``principal(state, scope)`` resolves the request's bearer token (``401
  UNAUTHENTICATED`` when there is none or it is not known): in memory for a
  known token, in a worker thread when the store must be asked.
- ``decide(state, principal, action, resource)`` asks Cedar (memoised by
  ``datum.api.front.authz.Authorizer``) and raises ``403 FORBIDDEN`` naming the
  action on a refusal.

The request guard (``datum.api.front.guard``) calls both once per request, before a
body is read, and leaves what it found in the ASGI scope (``Admission``);
a route's ``needs`` dependency and its fast answer read it from there.

Routes declare what they need with ``Depends(needs(action, resource))``; the
resource may depend on the path (``Reconciler::"buckets"``, ``Host::"web1"``),
never on the body. A route may also register a fast answer (``fast``): what
it answers without FastAPI when nothing is in doubt, under the route's own
action and resource. The token itself is never logged and never echoed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from starlette.types import Scope

from datum.api.front.authz import SERVER, Action, Decision, Resource, who
from datum.api.front.state import ServerState, state_of
from datum.core.findings import ErrorCode, Problem
from datum.store.audit import Entry, cedar_uid

# Only for the OpenAPI document's security scheme: the token is read by ``principal``.
bearer = HTTPBearer(auto_error=False, description="A token from `datum token create --principal NAME`.")

ResourceOf = Callable[[Request], Resource]
# What a route asks Cedar for: the action, and the resource from the request's path.
Need = tuple[Action | str, ResourceOf]
# The (action, resource) the guard asked Cedar about for a request, and was allowed.
Decided = tuple[str, Resource]

ADMISSION = "datum.admission"  # the ASGI scope's key for what the guard found
FACTS = "datum.audit"  # the ASGI scope's key for the request's audit row (datum.api.front.audit)


@dataclass(frozen=True, slots=True)
class Admission:
    """What the front door found for a request: its principal, and the (action, resource) Cedar allowed.

    ``allowed`` is None when the guard could not tell the resource before the
    body (a plugin's resource that raises): the route decides then.
    """

    principal: str
    allowed: Decided | None
    policies: tuple[str, ...] = ()  # the @id of the policies that allowed it


def header(scope: Scope, name: bytes) -> bytes | None:
    """The value of the request header ``name`` (lower case), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def presented(scope: Scope) -> str | None:
    """The bearer token of the request, or None."""
    value = header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.decode("latin-1").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def principal(state: ServerState, scope: Scope) -> str:
    """The principal behind the request's bearer token, or ``401 UNAUTHENTICATED``.

    A token known in memory costs no thread hop; one not known yet is looked
    up in the store off the event loop (a store fault is its ``503``).
    """
    token = presented(scope)
    if token is None:
        raise Problem.one(ErrorCode.UNAUTHENTICATED, "this request needs an 'Authorization: Bearer <token>' header")
    found = state.tokens.known(token)
    if found is None:
        found = await anyio.to_thread.run_sync(state.tokens.principal, token)
    if found is None:
        raise Problem.one(ErrorCode.UNAUTHENTICATED, "the bearer token is not known to this server")
    return found


def group_of(state: ServerState, principal: str, resource: Resource) -> str | None:
    """The recorded group of the ``Host`` a decision for ``principal`` is on, when the decision needs it."""
    if not state.authorizer.needs_group(principal, resource):
        return None
    return state.host_groups.of(resource[1])


async def told(state: ServerState, principal: str, resource: Resource) -> None:
    """Have the group ``decide`` will ask remembered, asking the store off the event loop when it is not."""
    if state.authorizer.needs_group(principal, resource) and not state.host_groups.remembered(resource[1])[0]:
        await anyio.to_thread.run_sync(state.host_groups.of, resource[1])


def decision(state: ServerState, principal: str, action: Action | str, resource: Resource) -> Decision:
    """Cedar's decision (``datum.api.front.authz.Authorizer.decision``, memoised), told the host's recorded group
    when it needs it: the one place a request's decision is made."""
    return state.authorizer.decision(principal, action, resource, group_of(state, principal, resource))


def permits(state: ServerState, principal: str, action: Action | str, resource: Resource) -> bool:
    """Whether the policies permit ``principal`` ``action`` on ``resource``."""
    return decision(state, principal, action, resource).allowed


# What a 403 adds for an agent token bound to no host: it speaks for no host.
UNBOUND_AGENT = (
    "an agent token speaks for one host: make one bound to it with "
    "datum token create --principal agent --host NAME"
)


def decide(state: ServerState, principal: str, action: Action | str, resource: Resource) -> Decision:
    """``403 FORBIDDEN`` naming ``action`` (entities written as Cedar writes them) unless the policies permit it;
    the decision when they do."""
    found = decision(state, principal, action, resource)
    if found.allowed:
        return found
    said = who(principal)
    message = (
        f"{cedar_uid('Principal', principal)} may not {cedar_uid('Action', str(action))} on {cedar_uid(*resource)}"
    )
    if found.policies:  # a forbid refused it
        message += f" (forbidden by policy {', '.join(found.policies)})"
    if said.name == "agent" and said.host is None and said.groups is None and resource[0] == "Host":
        message += f": {UNBOUND_AGENT}"
    raise Problem.one(ErrorCode.FORBIDDEN, message, action=str(action))


def decided(entry: Entry | None, action: Action | str, resource: Resource, found: Decision) -> None:
    """The request's audit row (when it has one) says what Cedar was asked and which policies decided (none:
    no policy permits it)."""
    if entry is not None:
        entry.action, entry.resource = str(action), cedar_uid(*resource)
        entry.policy = ",".join(found.policies) or None


def _server(_request: Request) -> Resource:
    return SERVER


def path_resource(kind: str, param: str) -> ResourceOf:
    """The resource ``kind::"<path parameter param>"``."""

    def resource(request: Request) -> Resource:
        return (kind, str(request.path_params.get(param, "")))

    return resource


_NEEDS: dict[Callable[..., Any], Need] = {}


def needs(action: Action | str, resource: ResourceOf = _server) -> Callable[..., Awaitable[str]]:
    """A dependency that declares the route's Cedar ``action`` and ``resource``; returns the principal.

    The guard has resolved the principal and decided before the route runs
    (``Admission`` in the scope); the dependency only reads that. What the
    guard left undecided (a resource it could not tell before the body, or
    an app called without its front) is decided here, by the same functions.
    """

    async def dependency(request: Request, _token: object = Depends(bearer)) -> str:
        state = state_of(request)
        admission: Admission | None = request.scope.get(ADMISSION)
        who = admission.principal if admission is not None else await principal(state, request.scope)
        asked = (str(action), resource(request))
        if admission is None or admission.allowed != asked:
            await told(state, who, asked[1])
            decided(request.scope.get(FACTS), *asked, decision(state, who, *asked))
            decide(state, who, *asked)
        return who

    _NEEDS[dependency] = (action, resource)
    return dependency


def need_of(dependant: object) -> Need | None:
    """The ``needs`` of a route's dependencies (``route.dependant``), at any depth."""
    for sub in getattr(dependant, "dependencies", ()):
        found = _NEEDS.get(sub.call) if sub.call is not None else None
        if found is None:
            found = need_of(sub)
        if found is not None:
            return found
    return None


def may(request: Request, principal: str, action: Action | str, resource: Resource = SERVER) -> bool:
    """Whether ``principal`` may take ``action`` (``decide``'s answer): for parts of a page, which leave out
    what is refused."""
    try:
        decide(state_of(request), principal, action, resource)
    except Problem:
        return False
    return True


# -- routes that prove their caller themselves -----------------------------------------------------

_OWN_PROOF: dict[Callable[..., Any], str | None] = {}


def own_proof(endpoint: Callable[..., Any], action: str | None = None) -> Callable[..., Any]:
    """Mark a route that needs no bearer token because it proves its caller itself (a host enrolling shows a
    join token and signs with its key, ``datum.api.routes.enroll``): the guard reads its body without a
    known token, within the same bounds (``[server] max_body_bytes``, ``body_timeout``). ``action``: what an
    acting request to it is in the audit log (``datum.store.audit.ENROLL``): the guard leaves its row pending as
    for an act Cedar admitted, and the route fills in the principal it proved (``datum.store.audit.fill``)."""
    _OWN_PROOF[endpoint] = action
    return endpoint


def proves_itself(endpoint: object) -> bool:
    return callable(endpoint) and endpoint in _OWN_PROOF


def own_action(endpoint: object) -> str | None:
    """The audit log's action of a route that proves its caller itself (``own_proof``), else None."""
    return _OWN_PROOF.get(endpoint) if callable(endpoint) else None


# -- fast answers ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Asked:
    """A request as a fast answer sees it: admitted for its route's action and resource, body read."""

    state: ServerState
    scope: Scope
    params: dict[str, Any]  # the route's path parameters, as its path converts them
    body: bytes
    query: dict[str, str] = field(default_factory=dict)  # the query parameters its ``fast`` names, each once

    def header(self, name: bytes) -> bytes | None:
        return header(self.scope, name)


@dataclass(frozen=True, slots=True)
class Reply:
    """A fast answer: a status, a JSON body (or none, for a 304) and extra headers."""

    status: int
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


class Later:
    """A fast answer not ready yet: a long poll between two looks (``datum.api.routes.hosts``).

    The guard awaits ``ready`` (a future) in its own coroutine, then asks
    ``again()``: a ``Reply``, None (the route answers), or itself again to wait
    once more. Meanwhile the request holds this object and what it names, and
    no coroutine of the answer's: each would be a frame held for the whole wait
    (docs/performance.md, "Held polls over TLS"). ``leave()`` lets go what it
    holds when the guard stops waiting otherwise (its task cancelled).
    """

    __slots__ = ()
    ready: asyncio.Future[Any] | None  # None: nothing to wait for, ask again at once

    async def again(self) -> Reply | Later | None:
        raise NotImplementedError

    def leave(self) -> None:
        raise NotImplementedError


FastAnswer = Callable[[Asked], Awaitable[Reply | Later | None]]
_FAST: dict[Callable[..., Any], FastAnswer] = {}
_QUERY: dict[Callable[..., Any], frozenset[str]] = {}


def fast(endpoint: Callable[..., Any], query: tuple[str, ...] = ()) -> Callable[[FastAnswer], FastAnswer]:
    """Register a fast answer on the route whose endpoint is ``endpoint``.

    The guard calls it, for a request without a query string (or whose query
    parameters are among ``query``, each once: ``Asked.query``), only once the
    request is admitted under that route's ``needs`` (the principal known,
    Cedar's decision Allow for the route's action and resource). It answers a
    ``Reply`` when everything is known and good, a ``Later`` when it waits
    (a long poll), or None to let the route
    answer (and say what is wrong, its one way). It runs on the event loop:
    anything that blocks goes to a worker thread.
    """

    def register(answer: FastAnswer) -> FastAnswer:
        _FAST[endpoint] = answer
        _QUERY[endpoint] = frozenset(query)
        return answer

    return register


def fast_of(endpoint: object) -> FastAnswer | None:
    """The fast answer registered on ``endpoint``'s route, if any."""
    return _FAST.get(endpoint) if callable(endpoint) else None


def fast_query(endpoint: object) -> frozenset[str]:
    """The query parameters the fast answer on ``endpoint``'s route reads (none: it sees no query string)."""
    return _QUERY.get(endpoint, frozenset()) if callable(endpoint) else frozenset()


def fast_answers() -> dict[Callable[..., Any], FastAnswer]:
    """Every registered fast answer by its route's endpoint (for the test that each is on a served route)."""
    return dict(_FAST)
