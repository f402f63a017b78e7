"""``GET /v1/hosts/{host}/passes[/{pass}]`` and ``GET /v1/events``: every kept pass and the fleet's events.

Read from the pass archive (``datum.store.passes``, ``[server] retention`` long) a page at a time
(``datum.fleet.history``: newest finish first, keyset cursors), authorized by Cedar ``fleet:ReadHistory``.
Every filter is typed, so a bad one is 422 naming it (the front door's validation findings); a window whose
``since`` is not before its ``until`` holds nothing.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import AfterValidator, AwareDatetime, BeforeValidator

from datum.api.front.authz import Action as Cedar
from datum.api.front.authz import scope_of
from datum.api.front.errors import error_responses
from datum.api.front.security import needs, path_resource
from datum.api.front.state import state_of
from datum.api.models import EventList, PassDetail, PassList, pass_detail
from datum.api.routes.reboots import OUT, HostParam
from datum.core.findings import ErrorCode, Problem
from datum.core.vocab import Action, HostState, ResourceState, RolloutAct, RolloutState
from datum.fleet.history import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    NOT_A_CURSOR,
    PASS_CURSOR_PATTERN,
    Rows,
    Window,
    events_page,
    passes_page,
    position,
)
from datum.store.passes import After, one_pass
from datum.wire import NO_NUL

router = APIRouter(tags=["fleet"])

CURSOR_MAX_LENGTH = 39  # a sign and 18 digits, a dash, an r and 18 digits


def _after(value: str | None) -> After | None:
    return None if value is None else position(value)


def _pass_after(value: str | None) -> After | None:
    """A position in a host's passes: a rollout event's (``MICROS-rID``, the fleet's events only) is not one."""
    after = _after(value)
    if after is not None and after.rollout:
        raise ValueError(NOT_A_CURSOR)
    return after


def _cursor(validate: Any, pattern: str) -> Any:
    return Annotated[
        str,
        Query(alias="cursor", max_length=CURSOR_MAX_LENGTH, description="The `next` of the previous page.",
              json_schema_extra={"pattern": pattern}),
        AfterValidator(validate),
    ]


Cursor = _cursor(_after, CURSOR_PATTERN)  # the fleet's events
PassCursor = _cursor(_pass_after, PASS_CURSOR_PATTERN)  # a host's passes: the pattern says what it takes
# RFC 3339's date-time, as the document's `format: date-time` says: pydantic alone would also take a number
# of seconds since the epoch, which the document does not allow.
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(?:\.\d+)?(?:[Zz]|[+-]\d\d:\d\d)$")


def _rfc3339(value: Any) -> Any:
    if not isinstance(value, str) or _RFC3339.fullmatch(value) is None:
        raise ValueError("a time in RFC 3339 with its offset, such as 2026-11-01T12:00:00Z")
    return value


# What an event's ``action`` and ``state`` may be: a resource's (the plan's action, the state it reached) or a
# rollout's transition (its act, the state it entered); one list each, so a bad value is one finding.
EventAction = Literal[tuple(v.value for v in (*Action, *RolloutAct))]  # type: ignore[valid-type]
EventState = Literal[tuple(v.value for v in (*ResourceState, *RolloutState))]  # type: ignore[valid-type]

Since = Annotated[AwareDatetime, BeforeValidator(_rfc3339),
                  Query(description="Only what finished at or after this time (RFC 3339, with its offset).")]
Until = Annotated[AwareDatetime, BeforeValidator(_rfc3339),
                  Query(description="Only what finished before this time (RFC 3339, with its offset).")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Rows per page.")]
PassParam = Path(
    alias="pass", description="The pass: its `passId`, or its number in the archive (`id`).", min_length=1, max_length=64, pattern=NO_NUL
)


def paged_json(model: Any, found: Rows, request: Request) -> Response:
    """A page as JSON, its next page's URL in ``Link`` (``rel=\"next\"``) when there is one."""
    headers = None
    if found.next:
        headers = {"Link": f'<{request.url.include_query_params(cursor=found.next)}>; rel="next"'}
    return Response(model.model_dump_json(by_alias=True, exclude_none=True), media_type="application/json",
                    headers=headers)


@router.get(
    "/v1/hosts/{host}/passes",
    name="list_passes",
    response_model=PassList,
    summary="A host's kept passes, newest first: when the host ran each and when the server received it.",
    description=(
        "Cedar action `fleet:ReadHistory` on `Host::\"{host}\"`. Every delivered pass is kept `[server] retention` "
        "long (default 14 days), older ones and ones that arrived after a newer pass (`older`) included. "
        "Newest finish first (the host's clock), `limit` per page (default "
        f"{DEFAULT_LIMIT}, at most {MAX_LIMIT}); `since`/`until` keep the passes that finished in that window, "
        "`state=` those that reported that host state; `next` is the cursor of the following page, absent on "
        "the last. An empty list for a host with no pass kept (dropped by retention, or none in the window); 404 "
        "for a host that never reported. A bad filter is 422 naming each."
    ),
    responses=error_responses(401, 403, 404, 422, 503),
    **OUT,
)
async def list_passes(
    request: Request,
    host: str = HostParam,
    since: Since = None,
    until: Until = None,
    state: HostState = Query(default=None, description="Only the passes that reported this host state."),
    limit: Limit = DEFAULT_LIMIT,
    after: PassCursor = None,
    _p: str = Depends(needs(Cedar.READ_HISTORY, path_resource("Host", "host"))),
) -> Response:
    _registry, store = state_of(request).wired()
    window = Window(since, until)
    found = await anyio.to_thread.run_sync(
        lambda: passes_page(store, host, window, state=state.value if state else None, after=after, limit=limit)
    )
    return paged_json(PassList.model_validate({"passes": found.rows, "next": found.next}), found, request)


@router.get(
    "/v1/hosts/{host}/passes/{pass}",
    name="get_pass",
    response_model=PassDetail,
    summary="One kept pass of a host, its whole report (diffs of sensitive resources redacted).",
    description=(
        "Cedar action `fleet:ReadHistory` on `Host::\"{host}\"`. The pass by its `passId` or its `id`; a pass "
        "that changed nothing shares the report of the first pass that said the same, with its own ids and "
        "times. 404 for a pass not kept (never received, or dropped by `[server] retention`)."
    ),
    responses=error_responses(401, 403, 404, 422, 503),
    **OUT,
)
async def get_pass(
    request: Request,
    host: str = HostParam,
    pass_: str = PassParam,
    _p: str = Depends(needs(Cedar.READ_HISTORY, path_resource("Host", "host"))),
) -> PassDetail:
    _registry, store = state_of(request).wired()
    row = await anyio.to_thread.run_sync(one_pass, store, host, pass_)
    if row is None:
        raise Problem.one(ErrorCode.NOT_FOUND, f"no pass {pass_!r} of host {host!r} is kept")
    return pass_detail(row)


@router.get(
    "/v1/events",
    name="list_events",
    response_model=EventList,
    summary="What changed, failed, drifted or was blocked across the fleet, newest first: one row per resource.",
    description=(
        "Cedar action `fleet:ReadHistory` on `Server::\"datum\"`. One row per resource a kept pass changed, or "
        "found failed, drifted or blocked, with its host, pass, times, action, state and reason. Newest finish "
        f"first, `limit` per page (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}); `since`/`until` keep the "
        "events of passes that finished in that window; `host`, `resource` (`Type[name]`), `type`, `action` and "
        "`state` keep those that are exactly that. The rollouts' transitions (started, wave released, halted, "
        "paused, resumed, aborted, done, superseded) are events of type `rollout` among them, by when they happened, "
        "with who made each (`by`) and why; a `host` filter leaves them out. A token scoped to host groups sees its groups' hosts' events only (a "
        "transition names only its groups' hosts). A bad filter is 422 naming each."
    ),
    responses=error_responses(401, 403, 422, 503),
    **OUT,
)
async def list_events(
    request: Request,
    since: Since = None,
    until: Until = None,
    host: str = Query(default=None, min_length=1, max_length=253, pattern=NO_NUL, description="Only this host's."),
    resource: str = Query(default=None, min_length=1, max_length=1000, pattern=NO_NUL,
                          description="Only this resource's (`Type[name]`)."),
    type: str = Query(default=None, min_length=1, max_length=100, pattern=NO_NUL,
                      description="Only resources of this type (`File`, `Package`, ...), or `rollout`: only the "
                      "rollouts' transitions."),
    action: EventAction = Query(default=None, description="Only resources the plan meant to do this to, or "
                                        "rollouts' transitions of this act."),
    state: EventState = Query(default=None, description="Only resources that reached this state, "
                                                "or rollouts' transitions to this state."),
    limit: Limit = DEFAULT_LIMIT,
    after: Cursor = None,
    principal: str = Depends(needs(Cedar.READ_HISTORY)),
) -> Response:
    _registry, store = state_of(request).wired()
    window = Window(since, until)
    groups = scope_of(principal)  # a token scoped to host groups: their hosts' events only, in the query
    exact = {"host": host, "resource": resource, "type": type, "action": action, "state": state}
    found = await anyio.to_thread.run_sync(
        lambda: events_page(store, window, after=after, limit=limit, groups=groups, **exact)
    )
    return paged_json(EventList.model_validate({"events": found.rows, "next": found.next}), found, request)

