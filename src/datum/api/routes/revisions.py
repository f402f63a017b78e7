"""``/v1/revisions``: per revision of the fleet's manifests, how many hosts run it, converged, failed or other."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime

import anyio.to_thread
from fastapi import APIRouter, Depends, Request

from datum.api.front.authz import Action
from datum.api.front.errors import error_responses
from datum.api.front.security import needs
from datum.api.front.state import ServerState, state_of
from datum.api.models import RevisionCounts, RevisionList, WithoutRevision
from datum.api.routes.reboots import OUT
from datum.fleet.rollouts.serve import in_force
from datum.fleet.rollouts.status import Rollout, status
from datum.fleet.serving import served

router = APIRouter(prefix="/v1/revisions", tags=["fleet"])


def rollout(state: ServerState, now: datetime | None = None, *, origins: int | None = None) -> Rollout:
    """The fleet's hosts per revision as this server sees them now (blocking: names the current revision);
    ``origins``: with the hosts without a revision counted by what they are (``status`` says what it reads)."""
    _registry, store = state.wired()
    current = served(state.fleet)
    return status(store, state.settings.fleet.stale_after, now or datetime.now(UTC), current, in_force(state.fleet),
                  origins=origins)


def revision_list(found: Rollout) -> RevisionList:
    return RevisionList(
        current=found.current,
        without=found.without,
        without_by=WithoutRevision(**asdict(found.without_by)),
        revisions=[
            RevisionCounts(
                id=r.id, current=r.current, first_seen=r.first_seen, git_commit=r.git_commit, hosts=r.hosts,
                converged=r.converged, failed=r.failed, other=r.other, states=r.states,  # type: ignore[arg-type]
            )
            for r in found.revisions
        ],
    )


@router.get(
    "",
    name="list_revisions",
    response_model=RevisionList,
    summary="The fleet's manifests by revision: how many hosts run each, converged, failed or other (datum rollout status).",
    description=(
        "Cedar action `fleet:ReadHost` on `Server::\"datum\"` (what the host listing takes: these are its hosts, "
        "counted). A revision is one state of `[fleet] manifests` (its git commit, `<commit>+dirty.<hex>` for a "
        "work tree with changes, else `sha256:<hex>` of its files), recorded when a server first serves it. "
        "Per revision the hosts whose last pass ran it, by the state they read now; newest first; `current` is "
        "the one this server serves now (the previous revision while the rollout of the directory's is aborted)."
    ),
    responses=error_responses(401, 403, 503),
    **OUT,
)
async def revisions(request: Request, _p: str = Depends(needs(Action.READ_HOST))) -> RevisionList:
    found = await anyio.to_thread.run_sync(rollout, state_of(request))
    return revision_list(found)
