"""``GET /v1/audit``: the audit log a page at a time (``datum.store.audit``), for admins (Cedar ``fleet:ReadAudit``).

Newest first, keyset cursors as ``/v1/events`` (``datum.fleet.history``), the same typed ``since``/``until``
and limit; ``principal`` and ``action`` exact.
"""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request, Response

from datum.api.front.authz import Action
from datum.api.front.errors import error_responses
from datum.api.front.security import needs
from datum.api.front.state import state_of
from datum.api.models import AuditList
from datum.api.routes.history import Cursor, Limit, Since, Until, paged_json
from datum.api.routes.reboots import OUT
from datum.fleet.history import DEFAULT_LIMIT, MAX_LIMIT, Window, audit_page
from datum.wire import NO_NUL

router = APIRouter(tags=["fleet"])


@router.get(
    "/v1/audit",
    name="list_audit",
    response_model=AuditList,
    summary="The audit log, newest first: every acting request, every refusal, every act of the CLI on the store.",
    description=(
        "Cedar action `fleet:ReadAudit` on `Server::\"datum\"` (granted to `admin` only: it is not in the `read` "
        "group). One row per reboot lease taken or given back, rollout pause, resume or abort, plugin write, "
        "refusal (401, 403; a pass report admitted leaves none: the pass archive keeps it), and token created or "
        "revoked, reboot lease cleared or rollout commanded by the CLI: when (the store's clock), who (principal, "
        "token id: never the token), from where, the Cedar action and resource, the outcome and status, the "
        "policies that decided. A row is chained a second or so after it is written: from then it has its `seq` "
        "and holds the hash of the one before (`datum audit verify` checks the chain). Kept `[server] audit_keep` long (default 400 days). Newest first, "
        f"`limit` per page (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}); `since`/`until` keep the rows written in "
        "that window, `principal` and `action` those that are exactly that. A bad filter is 422 naming each."
    ),
    responses=error_responses(401, 403, 422, 503),
    **OUT,
)
async def list_audit(
    request: Request,
    since: Since = None,
    until: Until = None,
    principal: str = Query(default=None, min_length=1, max_length=253, pattern=NO_NUL,
                           description="Only this principal's (`cli:<user>` for the CLI's acts)."),
    action: str = Query(default=None, min_length=1, max_length=200, pattern=NO_NUL,
                        description="Only this action's (`fleet:ManageRollout`, `token:Create`, ...)."),
    limit: Limit = DEFAULT_LIMIT,
    after: Cursor = None,
    _p: str = Depends(needs(Action.READ_AUDIT)),
) -> Response:
    _registry, store = state_of(request).wired()
    window = Window(since, until)
    found = await anyio.to_thread.run_sync(
        lambda: audit_page(store, window, principal=principal, action=action, after=after, limit=limit)
    )
    return paged_json(AuditList.model_validate({"entries": found.rows, "next": found.next}), found, request)
