"""``/v1/rollouts``: the staged rollouts of the fleet's manifests, and the operator's pause, resume and abort."""

from __future__ import annotations

from typing import Literal

import anyio.to_thread
from fastapi import APIRouter, Depends, Path, Query, Request

from datum.api.front.authz import Action, scope_of
from datum.api.front.errors import error_responses
from datum.api.front.security import needs
from datum.api.front.state import ServerState, state_of
from datum.api.models import (
    WAVE_NAMES,
    FailedHost,
    RolloutCommandAnswer,
    RolloutEvent,
    RolloutList,
    RolloutStatus,
    RolloutWave,
)
from datum.api.routes.reboots import OUT
from datum.config import FleetSettings
from datum.core.vocab import COMMANDS, RolloutAct
from datum.fleet.history import rollout_event
from datum.fleet.rollouts.command import Commanded, act
from datum.store import rollouts as stored
from datum.store.engine import Store
from datum.store.rollouts import RolloutRow
from datum.store.scope import among
from datum.wire import NO_NUL

router = APIRouter(prefix="/v1/rollouts", tags=["fleet"])


def rollout_status(
    store: Store, fleet: FleetSettings, row: RolloutRow, waves: bool, moves: list[stored.Transition] | None = None,
    groups: frozenset[str] | None = None,
) -> RolloutStatus:
    """One rollout as the API says it, with its transitions (``moves``: read here when not given); with its
    waves' counts and hosts when ``waves`` (one grouped read, then one range per wave). The hosts it names
    are ``groups``' only, when given (a token scoped to host groups); its waves' counts are the fleet's."""
    if moves is None:
        moves = stored.transitions(store, [row.id])[row.id]
    last = {t.act: t.at for t in moves}  # the latest of each act
    settings = fleet.rollout
    soak_ends = None
    if row.wave_completed_at is not None and row.state == stored.ROLLING and settings is not None:
        soak_ends = row.wave_completed_at + settings.soak
    out = RolloutStatus(
        id=row.id, revision=row.revision, previous=row.previous, state=row.state, wave=row.wave,
        last_wave=row.last_wave, started_at=row.started_at, wave_started_at=row.wave_started_at,
        wave_completed_at=row.wave_completed_at, soak_ends_at=soak_ends, by=row.by, reason=row.reason,
        failed=_failed(store, row, groups),
        halted_at=last.get(RolloutAct.HALTED), paused_at=last.get(RolloutAct.PAUSED),
        aborted_at=last.get(RolloutAct.ABORTED),
        transitions=[RolloutEvent.model_validate(rollout_event(t, store, groups)) for t in moves],
    )
    if waves and row.previous is not None:  # the first revision ever had no waves
        counted = {c.wave: c for c in stored.wave_counts(store, row, fleet.stale_after)}
        names = stored.wave_names(store, row.id, row.last_wave, WAVE_NAMES)
        if groups is not None:  # the groups' hosts only
            mine = among(store, [h for listed in names.values() for h in listed], groups)
            names = {w: [h for h in listed if h in mine] for w, listed in names.items()}
        out.waves = [
            RolloutWave(wave=w, released=w <= row.wave and row.state != stored.ABORTED,
                        hosts=c.hosts if c else 0, converged=c.converged if c else 0, failed=c.failed if c else 0,
                        silent=c.silent if c else 0, accepted=c.accepted if c else 0, names=names.get(w, []))
            for w in range(row.last_wave + 1)
            for c in [counted.get(w)]
        ]
    return out


def _failed(store: Store, row: RolloutRow, groups: frozenset[str] | None) -> list[FailedHost] | None:
    if not row.failed:
        return None
    mine = among(store, [str(f["host"]) for f in row.failed], groups)
    return [FailedHost(host=f["host"], reason=f["reason"]) for f in row.failed if f["host"] in mine] or None


def rollout_list(
    store: Store, fleet: FleetSettings, limit: int = 10, groups: frozenset[str] | None = None
) -> RolloutList:
    """The rollout in force with its waves, then older ones (``GET /v1/rollouts``, ``datum rollout status``); the
    hosts named are ``groups``' only, when given."""
    rows = stored.recent(store, limit)
    moves = stored.transitions(store, [r.id for r in rows])
    return RolloutList(
        configured=fleet.rollout is not None,
        rollouts=[rollout_status(store, fleet, r, i == 0, moves[r.id], groups) for i, r in enumerate(rows)],
    )


@router.get(
    "",
    name="list_rollouts",
    response_model=RolloutList,
    summary="The staged rollouts of the fleet's manifests, the one in force first (datum rollout status).",
    description=(
        "Cedar action `fleet:ReadHost` on `Server::\"datum\"`. The rollout in force (the newest) with its waves "
        "(hosts planned, converged and failed on its revision), then up to nine older ones. A halted rollout "
        "names the hosts that failed on it and why (a token scoped to host groups: its groups' hosts only; the "
        "waves' counts are the fleet's)."
    ),
    responses=error_responses(401, 403, 503),
    **OUT,
)
async def list_rollouts(request: Request, principal: str = Depends(needs(Action.READ_HOST))) -> RolloutList:
    state = state_of(request)
    _registry, store = state.wired()
    return await anyio.to_thread.run_sync(rollout_list, store, state.settings.fleet, 10, scope_of(principal))


Command = Literal[tuple(COMMANDS)]  # type: ignore[valid-type]  # the path's words: COMMANDS' keys, in their order


def answered(store: Store, fleet: FleetSettings, done: Commanded) -> RolloutCommandAnswer:
    """A command's answer (``datum.fleet.rollouts.command.act``'s) as the API says it: the route's, and
    ``datum rollout pause|resume|abort``'s on the store."""
    return RolloutCommandAnswer(rollout=rollout_status(store, fleet, done.row, True), hosts_returned=done.returned)


def _act_here(state: ServerState, action: str, who: str, reason: str | None) -> RolloutCommandAnswer:
    _registry, store = state.wired()
    fleet = state.settings.fleet
    return answered(store, fleet, act(store, fleet, action, who, reason, server=state.fleet))


@router.post(
    "/current/{action}",
    name="manage_rollout",
    response_model=RolloutCommandAnswer,
    summary="Pause, resume or abort the rollout in force (datum rollout pause|resume|abort).",
    description=(
        "Cedar action `fleet:ManageRollout` on `Server::\"datum\"` (granted to `operator`). `pause`: no further "
        "wave is released (a rolling rollout). `resume`: a paused or halted one rolls again; resuming a halted one "
        "accepts the failures it names in `failed` (those hosts count neither failed nor waited for, `accepted` in its "
        "waves; a host that fails after the list was made, or after the resume, counts). `abort`: everyone is served the previous revision again; "
        "`hostsReturned` names the hosts that ran the aborted one. 404 with no rollout, 409 when its state "
        "does not allow the command. `reason` is kept with the transition (`transitions`, `GET /v1/events`)."
    ),
    responses=error_responses(401, 403, 404, 409, 422, 503),
    **OUT,
)
async def manage_rollout(
    request: Request,
    action: Command = Path(description="pause, resume or abort."),
    reason: str = Query(default=None, min_length=1, max_length=1000, pattern=NO_NUL,
                               description="Why, in the operator's words: kept with the transition."),
    principal: str = Depends(needs(Action.MANAGE_ROLLOUT)),
) -> RolloutCommandAnswer:
    return await anyio.to_thread.run_sync(_act_here, state_of(request), action, principal, reason)
