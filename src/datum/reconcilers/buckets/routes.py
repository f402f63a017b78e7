"""``/v1/buckets``: desired state of the buckets example reconciler over HTTP (mounted under the plugin's prefix)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from datum.reconcilers.buckets import reconciler as buckets
from datum.sdk import ErrorCode, Problem, Store
from datum.sdk.http import Out, absent, changed, error_responses, needs, path_resource, store_of

router = APIRouter(tags=["buckets"])

READ = "buckets:Read"
WRITE = "buckets:Write"

NameParam = Path(
    description="3-63 of a-z, 0-9 and '-', starting and ending with a letter or digit.",
    pattern=buckets._SAFE_NAME.pattern,  # the one rule, published in the schema
    max_length=63,
)
_OUT = {"response_model_by_alias": True, "response_model_exclude_none": True}


class Bucket(Out):
    """One bucket's desired state."""

    name: str
    status: Literal["creating", "active", "deleting", "delete_blocked", "deleted"] = Field(
        description="Where the bucket stands; deleted is terminal."
    )
    created_at: datetime | SkipJsonSchema[None] = absent("When it was first asked for.", "createdAt")
    updated_at: datetime | SkipJsonSchema[None] = absent("When its status last changed.", "updatedAt")


@router.get(
    "",
    response_model=list[Bucket],
    summary="Every bucket and its status.",
    description="Cedar action `buckets:Read` on `Server::\"datum\"`.",
    responses=error_responses(401, 403, 503),
    **_OUT,
)
def list_buckets(request: Request, _p: str = Depends(needs(READ))) -> list[Bucket]:
    return [Bucket.model_validate(row) for row in buckets.rows(store_of(request))]


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
    _p: str = Depends(needs(WRITE, path_resource("Bucket", "name"))),
) -> Bucket:
    store = store_of(request)
    try:
        status = buckets.create(store, name)
    except Problem as problem:
        current = _status(store, name)
        if problem.code != ErrorCode.CONFLICT or current not in (buckets.CREATING, buckets.ACTIVE):
            raise
        response.status_code = 200
        status = current
    changed(request)
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
    _p: str = Depends(needs(WRITE, path_resource("Bucket", "name"))),
) -> Bucket:
    status = buckets.delete(store_of(request), name)
    changed(request)
    return Bucket(name=name, status=status)


def _status(store: Store, name: str) -> str | None:
    return buckets.desired.status(store, name)
