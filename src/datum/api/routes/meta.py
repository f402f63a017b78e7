"""Probes and metrics: ``/healthz`` (the process lives), ``/readyz`` (it can serve), ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from datum.api.front.authz import Action, scope_of
from datum.api.front.errors import error_responses
from datum.api.front.security import needs
from datum.api.front.state import state_of
from datum.api.metrics import metrics_registry
from datum.api.models import ApiRoot, Endpoint, Status

router = APIRouter(tags=["meta"])


@router.get("/healthz", name="get_health", response_model=Status, summary="The process is alive. No token needed.")
async def healthz() -> Status:
    return Status(status="ok")


@router.get(
    "/readyz",
    name="get_readiness",
    response_model=Status,
    summary="The registry is wired and the store answers (and, for SQLite, its file is still there). No token needed.",
    responses=error_responses(503),
)
def readyz(request: Request) -> Status:
    _registry, store = state_of(request).wired()
    store.ping()  # 503 naming the store and why: it does not answer, or its file was deleted under us
    return Status(status="ready")


@router.get(
    "/v1",
    name="get_api_root",
    response_model=ApiRoot,
    summary="This API's endpoints, and where they are documented. No token needed.",
)
async def api_root(request: Request) -> ApiRoot:
    document = request.app.openapi()
    endpoints = [
        Endpoint(method=method.upper(), path=path, operation_id=operation["operationId"], summary=operation.get("summary", ""))
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]
    return ApiRoot(endpoints=endpoints, openapi=request.app.openapi_url or "/openapi.json", docs="/docs")


@router.get(
    "/metrics",
    name="get_metrics",
    response_class=Response,
    summary="Prometheus metrics, read from the store at scrape time.",
    description="Cedar action `observability:ReadSubstrate` on `Server::\"datum\"`. A token scoped to host groups "
    "reads those groups' hosts only, in every per-host and per-group series and in the counts.",
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format."}, **error_responses(401, 403)},
)
def metrics(request: Request, principal: str = Depends(needs(Action.READ_SUBSTRATE))) -> Response:
    groups = scope_of(principal)
    registry = request.app.state.metrics if groups is None else metrics_registry(state_of(request), groups)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
