"""``/v1/observability/admin/reconcilers``: the list surface and the per-item drift report.

The drift report has a fast answer (``drift_now``): through FastAPI's routing
and dependency injection a cached answer costs several times the CPU, which
under 100 concurrent pollers on two cores puts the tail past the target
(docs/performance.md).
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, Path, Request, Response

from datum.api.front.authz import Action
from datum.api.front.errors import error_responses
from datum.api.front.security import Asked, Reply, fast, needs, path_resource
from datum.api.front.state import state_of
from datum.reconcile.report import (
    DriftReport,
    ReconcilerPolicy,
    ReconcilerSummary,
    broken_summary,
    enabled,
    reconciler_policy,
    summary,
)

router = APIRouter(prefix="/v1/observability/admin", tags=["observability"])

NameParam = Path(description="The reconciler's stable name (e.g. buckets).", max_length=100)


@router.get(
    "/reconcilers",
    response_model=list[ReconcilerSummary],
    response_model_by_alias=True,
    response_model_exclude_none=True,
    summary="Every reconciler with health, drift, blocked and stranded coverage rows.",
    description=(
        "Cedar action `observability:ReadSubstrate` on `Server::\"datum\"`. 503 before the registry is wired. "
        "A reconciler plugin that is installed and did not load is listed too, `health` `unknown` with "
        "`error` saying why: absent from the list would read as not installed. `enabled` false: switched off "
        "(`[reconcilers.NAME] enabled = false`): no pass runs; its health stays what its last pass left."
    ),
    responses=error_responses(401, 403, 503),
)
async def list_reconcilers(
    request: Request, _p: str = Depends(needs(Action.READ_SUBSTRATE))
) -> Response:
    state = state_of(request)
    registry, _store = state.wired()
    on = {name: enabled(registry, state.settings, name) for name in [*registry, *(b.name for b in registry.broken)]}
    rows = [summary((await state.reports.get(name)).report, enabled=on[name]).dump() for name in registry]
    rows += [broken_summary(b.name, b.error, on[b.name]).dump() for b in registry.broken]
    return Response(json.dumps(rows), media_type="application/json")


@router.get(
    "/reconcilers/{name}/drift",
    name="get_drift_report",
    response_model=DriftReport,
    response_model_by_alias=True,
    response_model_exclude_none=True,
    summary="Per-item drift diff: which items diverged and why they are not converging.",
    description=(
        "Cedar action `observability:ReadSubstrate` on `Reconciler::\"{name}\"`. `items` describe the "
        "pass of `lastRanAt`; a skipped pass moves `asOf` only. Read `itemsReported` before concluding "
        "anything from an empty `items`, and `coverageReported` before reading `coverage`. "
        "503 before the registry is wired; 404 for an unknown reconciler name."
    ),
    responses=error_responses(401, 403, 404, 422, 503),
)
async def drift(
    request: Request,
    name: str = NameParam,
    _p: str = Depends(needs(Action.READ_SUBSTRATE, path_resource("Reconciler", "name"))),
) -> Response:
    state = state_of(request)
    state.known(name)
    # The cached body is the model's own JSON form: serialized once, not per request.
    return Response((await state.reports.get(name)).body, media_type="application/json")


@router.get(
    "/reconcilers/{name}/policy",
    name="get_reconciler_policy",
    response_model=ReconcilerPolicy,
    response_model_by_alias=True,
    response_model_exclude_none=True,
    summary="What judges a reconciler's drift items: whether it is on, its backoff and its breaker (datum drift).",
    description=(
        "Cedar action `observability:ReadSubstrate` on `Reconciler::\"{name}\"`, as its drift report. Which items "
        "need a human (one parked at the backoff cap, a group the breaker holds) is read from the report with "
        "these. 503 before the registry is wired; 404 for an unknown reconciler name."
    ),
    responses=error_responses(401, 403, 404, 422, 503),
)
async def policy(
    request: Request,
    name: str = NameParam,
    _p: str = Depends(needs(Action.READ_SUBSTRATE, path_resource("Reconciler", "name"))),
) -> ReconcilerPolicy:
    state = state_of(request)
    return reconciler_policy(state.known(name), state.settings, name)


@fast(drift)
async def drift_now(asked: Asked) -> Reply | None:
    """A cached report, without the framework: dashboards and scrapers poll this (a stale one starts its refresh).

    No report yet, an unknown name, a registry not wired: the route, which computes or says why.
    """
    state = asked.state
    name = asked.params["name"]
    if state.registry is None or name not in state.registry:
        return None
    entry = state.reports.current(name)
    return None if entry is None else Reply(200, entry.body)
