"""``/v1/buckets``: desired state of the buckets example reconciler over HTTP."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Request, Response

from datum.api.authz import Action
from datum.api.errors import error_responses
from datum.api.models import Bucket
from datum.api.security import needs, path_resource
from datum.api.state import state_of
from datum.core.findings import Problem
from datum.reconcilers import buckets
from datum.store import Store

router = APIRouter(prefix="/v1/buckets", tags=["buckets"])

NameParam = Path(
    description="3-63 of a-z, 0-9 and '-', starting and ending with a letter or digit.",
    pattern=buckets._SAFE_NAME.pattern,  # the one rule, published in the schema
    max_length=63,
)
_OUT = {"response_model_by_alias": True, "response_model_exclude_none": True}


@router.get(
    "",
    response_model=list[Bucket],
    summary="Every bucket and its status.",
    description="Cedar action `buckets:Read` on `Server::\"datum\"`.",
    responses=error_responses(401, 403, 503),
    **_OUT,
)
def list_buckets(request: Request, _p: str = Depends(needs(Action.BUCKETS_READ))) -> list[Bucket]:
    _registry, store = state_of(request).wired()
    return [Bucket.model_validate(row) for row in buckets.rows(store)]


@router.put(
    "/{name}",
    response_model=Bucket,
    status_code=201,
    summary="Ask for a bucket to exist (201 when asked now, 200 when it already was).",
    description=(
        "Cedar action `buckets:Write` on `Bucket::\"{name}\"`. 409 CONFLICT while the bucket is being deleted."
    ),
    responses={200: {"model": Bucket, "description": "The bucket was already asked for."}, **error_responses(401, 403, 409, 422, 503)},
    **_OUT,
)
def put_bucket(
    request: Request,
    response: Response,
    name: str = NameParam,
    _p: str = Depends(needs(Action.BUCKETS_WRITE, path_resource("Bucket", "name"))),
) -> Bucket:
    state = state_of(request)
    _registry, store = state.wired()
    try:
        status = buckets.create(store, name)
    except Problem as problem:
        current = _status(store, name)
        if problem.code != "CONFLICT" or current not in (buckets.CREATING, buckets.ACTIVE):
            raise
        response.status_code = 200
        status = current
    state.reports.invalidate()
    return Bucket(name=name, status=status)


@router.delete(
    "/{name}",
    response_model=Bucket,
    status_code=202,
    summary="Ask for a bucket to be deleted; the reconciler deletes it once it is empty.",
    description="Cedar action `buckets:Write` on `Bucket::\"{name}\"`. 404 for a bucket that does not exist.",
    responses=error_responses(401, 403, 404, 422, 503),
    **_OUT,
)
def delete_bucket(
    request: Request,
    name: str = NameParam,
    _p: str = Depends(needs(Action.BUCKETS_WRITE, path_resource("Bucket", "name"))),
) -> Bucket:
    state = state_of(request)
    _registry, store = state.wired()
    status = buckets.delete(store, name)
    state.reports.invalidate()
    return Bucket(name=name, status=status)


def _status(store: Store, name: str) -> str | None:
    for row in buckets.rows(store):
        if row["name"] == name:
            return str(row["status"])
    return None
