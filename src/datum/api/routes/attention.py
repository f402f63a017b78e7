"""``GET /v1/attention``: what needs a human, and why; the lines the page's *Needs a human* prints."""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Depends, Request, Response

from datum.api.attention import needs, worst_hosts
from datum.api.front.authz import Action, scope_of
from datum.api.front.errors import error_responses
from datum.api.front.security import may
from datum.api.front.security import needs as needs_action
from datum.api.front.state import state_of
from datum.api.models import Attention

router = APIRouter(prefix="/v1", tags=["observability"])


@router.get(
    "/attention",
    response_model=Attention,
    operation_id="getAttention",
    summary="What needs a human, and why: the lines of the page's *Needs a human*, `look` first.",
    description=(
        "Cedar action `observability:ReadSubstrate` on `Server::\"datum\"`, like the page; the lines about hosts "
        "also need `fleet:ReadHost` and are left out without it (`hosts` false). Decided once "
        "(`datum.core.attention`): the page prints these lines, `datum_needs_human` counts them by `severity` "
        "and `reason`. Hosts are the page's worst first; `hostsNotListed` counts those not converged past them."
    ),
    responses=error_responses(401, 403, 503),
)
async def attention(request: Request, principal: str = Depends(needs_action(Action.READ_SUBSTRATE))) -> Response:
    state = state_of(request)
    registry, store = state.wired()
    reports = [(await state.reports.get(name)).report for name in registry]
    readable = may(request, principal, Action.READ_HOST)
    groups = scope_of(principal)  # a token scoped to host groups: their hosts only

    def decided() -> Attention:
        hosts = worst_hosts(store, state.settings, groups=groups) if readable else None
        return needs(registry, state.settings, reports, hosts, store=store, groups=groups).model()

    answer = await anyio.to_thread.run_sync(decided)
    return Response(answer.model_dump_json(by_alias=True, exclude_none=True), media_type="application/json")
