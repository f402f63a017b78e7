"""The fleet's reboot budget over HTTP: an agent takes or gives back its lease; anyone who reads hosts sees who reboots."""

from __future__ import annotations

import re

from fastapi import APIRouter, Body, Depends, Path, Query, Request

from datum.api.answers import clear_lease, lease_model, reboot_list
from datum.api.front.authz import Action, scope_of
from datum.api.front.errors import error_responses
from datum.api.front.security import needs, path_resource
from datum.api.front.state import state_of
from datum.api.models import (
    RebootLease,
    RebootLeaseAnswer,
    RebootLeaseRequest,
    Reboots,
)
from datum.wire import NO_NUL

router = APIRouter(tags=["fleet"])

# Shared with datum.api.routes.hosts (which imports from here, not the other way round).
HOST_MAX = 253
HostParam = Path(description="The host's name, as its agent reports it.", min_length=1, max_length=HOST_MAX, pattern=NO_NUL)


def host_fits(name: str) -> bool:
    """Whether ``name`` is a host ``HostParam`` takes: what a fast answer, which FastAPI does not validate,
    asks before it answers (the route answers the others with its 422)."""
    return 1 <= len(name) <= HOST_MAX and re.fullmatch(NO_NUL, name) is not None
OUT = {"response_model_by_alias": True, "response_model_exclude_none": True}


@router.post(
    "/v1/hosts/{host}/reboot-lease",
    name="take_reboot_lease",
    response_model=RebootLeaseAnswer,
    summary="An agent asks for its host's slot of its group's reboot budget before it reboots (datum agent).",
    description=(
        "Cedar action `fleet:TakeRebootLease` on `Host::\"{host}\"`. At most `[fleet] reboot_concurrency` hosts "
        "of one group (nodes.yaml `group`, by the host's name and labels, never the `facts` sent; `default` when "
        "no rule gives one) hold a lease at once; the grant is atomic across requests and servers. `granted: false` "
        "says why in `reason`: the agent must not reboot and asks again at its next pass. The same boot asking "
        "again keeps its lease. A lease ends when the host reports a pass from another boot id, when the agent "
        "gives it back (DELETE). A host whose lease passed `[fleet] reboot_timeout` before it came back halts its "
        "group: nothing more is granted in it (`halted` names it) until it reports from a new boot or an operator "
        "clears its lease (`datum reboots clear HOST`). With a `reboot_order` for the group (nodes.yaml), the free "
        "slots go to the group's waiting hosts in that order (`ahead` names those before this one); each ask holds "
        "the host's place for two of its agent's intervals (`intervalSeconds`) or `[fleet] reboot_request_ttl`. "
        "While `[fleet] reboot_block_query` returns any series, or Prometheus cannot be asked, nothing is granted "
        "in any group (`blocked` says why). A lease is freed by a report from a new boot only when it is converged "
        "and its `health` (when the agent checks one) is ok; else the lease says why (`unhealthy`)."
    ),
    responses=error_responses(401, 403, 422, 503),
    **OUT,
)
def take_lease(
    request: Request,
    body: RebootLeaseRequest = Body(),
    host: str = HostParam,
    _p: str = Depends(needs(Action.TAKE_REBOOT_LEASE, path_resource("Host", "host"))),
) -> RebootLeaseAnswer:
    from datum.core.budget import blocked, halted, turn, waiting
    from datum.fleet.reboots import ask

    state = state_of(request)
    _registry, store = state.wired()
    grant = ask(store, state.settings.fleet, host, body.boot_id, body.interval_seconds)
    return RebootLeaseAnswer(
        host=host,
        group=grant.group,
        granted=grant.granted,
        limit=grant.limit,
        rebooting=[lease_model(lease) for lease in grant.rebooting],
        reason=(
            None if grant.granted
            else halted([x.host for x in grant.halted], {x.host: x.unhealthy for x in grant.halted}) if grant.halted
            else blocked(grant.blocked) if grant.blocked is not None
            else turn(list(grant.ahead)) if grant.ahead
            else waiting(len(grant.rebooting), grant.limit)
        ),
        lease=lease_model(grant.lease) if grant.lease is not None else None,
        halted=[lease_model(x) for x in grant.halted] or None,
        ahead=list(grant.ahead) or None,
        blocked=grant.blocked,
    )


@router.delete(
    "/v1/hosts/{host}/reboot-lease",
    name="give_back_reboot_lease",
    status_code=204,
    summary="An agent gives its reboot lease back: its reboot command failed, the host is not rebooting.",
    description="Cedar action `fleet:TakeRebootLease` on `Host::\"{host}\"`. Only the lease taken in `bootId`; 204 either way.",
    responses=error_responses(401, 403, 422, 503),
)
def give_back_lease(
    request: Request,
    host: str = HostParam,
    boot_id: str = Query(alias="bootId", min_length=1, max_length=100, pattern=NO_NUL, description="The boot the lease was taken in."),
    _p: str = Depends(needs(Action.TAKE_REBOOT_LEASE, path_resource("Host", "host"))),
) -> None:
    from datum.store.leases import give_back

    _registry, store = state_of(request).wired()
    give_back(store, host, boot_id)


@router.delete(
    "/v1/reboots/{host}",
    name="clear_reboot_lease",
    response_model=RebootLease,
    summary="An operator drops a host's reboot lease so that its group's reboots go on (datum reboots clear).",
    description=(
        "Cedar action `fleet:ClearRebootLease` on `Host::\"{host}\"` (granted to `operator`). For a host that "
        "will not come back from its reboot (an overdue lease, which halts its group) or came back unhealthy and "
        "was looked at. A live lease (a host rebooting now) is kept, 409 naming it, unless `force=true`. The "
        "lease dropped; 404 when the host holds none."
    ),
    responses=error_responses(401, 403, 404, 409, 422, 503),
    **OUT,
)
def clear_reboot_lease(
    request: Request,
    host: str = HostParam,
    force: bool = Query(default=False, description="Drop a live lease too (a host that may be rebooting now)."),
    _p: str = Depends(needs(Action.CLEAR_REBOOT_LEASE, path_resource("Host", "host"))),
) -> RebootLease:
    _registry, store = state_of(request).wired()
    return clear_lease(store, host, force, forcing="force=true")


@router.get(
    "/v1/reboots",
    name="list_reboots",
    response_model=Reboots,
    summary="Who is rebooting, group by group, and leases past their timeout.",
    description="Cedar action `fleet:ReadHost` on `Server::\"datum\"`. `blocked` while `[fleet] reboot_block_query` "
    "holds every group's reboots; `waiting` per group in its reboot_order. A token scoped to host groups sees "
    "those groups and their hosts' leases only.",
    responses=error_responses(401, 403, 503),
    **OUT,
)
def reboots(request: Request, principal: str = Depends(needs(Action.READ_HOST))) -> Reboots:
    from datum.fleet.reboots import block_shown

    state = state_of(request)
    _registry, store = state.wired()
    fleet = state.settings.fleet
    # a token scoped to host groups: their hosts' leases, their groups
    return reboot_list(store, fleet, block_shown(fleet), groups=scope_of(principal))
