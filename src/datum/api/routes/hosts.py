"""``/v1/hosts``: every host's persisted state, one host's last pass, and agents reporting passes."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Body, Depends, Header, Path, Request, Response
from sqlalchemy.engine import Connection

from datum.api.authz import Action
from datum.api.errors import error_responses
from datum.api.intake import accepted
from datum.api.models import HostStatus, host_status
from datum.api.routes.reboots import with_lease
from datum.api.security import needs, path_resource
from datum.api.state import state_of
from datum.core.findings import FieldError, Problem, invalid
from datum.fleet.stale import stale
from datum.host.report import PassReport
from datum.store.history import record_host_pass
from datum.store.hosts import get_host, list_hosts, take_pass
from datum.store.leases import read as read_leases
from datum.store.leases import release_rebooted

router = APIRouter(prefix="/v1/hosts", tags=["fleet"])

HostParam = Path(description="The host's name, as its agent reports it.", min_length=1, max_length=253)
_OUT = {"response_model_by_alias": True, "response_model_exclude_none": True}


@router.get(
    "",
    response_model=list[HostStatus],
    summary="Every host the store knows: state, reason, the resources behind it, the last pass report.",
    description="Cedar action `fleet:ReadHost` on `Server::\"datum\"`.",
    responses=error_responses(401, 403, 503),
    **_OUT,
)
def hosts(request: Request, _p: str = Depends(needs(Action.READ_HOST))) -> list[HostStatus]:
    _registry, store = state_of(request).wired()
    multiple = state_of(request).settings.fleet.stale_after
    leases = read_leases(store)
    return [with_lease(host_status(stale(row, multiple)), leases) for row in list_hosts(store)]


@router.get(
    "/{host}",
    response_model=HostStatus,
    summary="One host's state, reason and last pass report.",
    description="Cedar action `fleet:ReadHost` on `Host::\"{host}\"`. 404 for a host the store never heard of.",
    responses=error_responses(401, 403, 404, 422, 503),
    **_OUT,
)
def host(
    request: Request,
    host: str = HostParam,
    _p: str = Depends(needs(Action.READ_HOST, path_resource("Host", "host"))),
) -> HostStatus:
    _registry, store = state_of(request).wired()
    row = get_host(store, host)
    if row is None:
        raise Problem.one("NOT_FOUND", f"no host named {host!r} has reported a pass")
    return with_lease(host_status(stale(row, state_of(request).settings.fleet.stale_after)), read_leases(store, host))


@router.post(
    "/{host}/passes",
    status_code=201,
    response_model=HostStatus,
    summary="An agent reports a completed pass (datum agent, datum apply --report-to URL).",
    description=(
        "Cedar action `fleet:ReportPass` on `Host::\"{host}\"`. The body is the pass report of "
        "`datum apply --json`; its `host` must be the host of the path, every number finite, and its `state` "
        "the rollup of its resources. Stored as the host's latest pass, each diff cut at `[server] max_diff_bytes` "
        "and the diff of a sensitive resource never stored. A body over `[server] max_body_bytes` is 413. "
        "A report with a `seq` lower than or equal to the stored one's is not stored: 200 with "
        "`Datum-Pass: duplicate` (the same pass again) or `older`."
    ),
    responses={
        200: {"model": HostStatus, "description": "Not stored: the same pass again or an older one (`Datum-Pass`)."},
        **error_responses(401, 403, 413, 422, 503),
    },
    **_OUT,
)
def report_pass(
    request: Request,
    report: PassReport = Body(),
    host: str = HostParam,
    _p: str = Depends(needs(Action.REPORT_PASS, path_resource("Host", "host"))),
) -> Response:
    state = state_of(request)
    _registry, store = state.wired()
    if report.host != host:
        raise invalid(
            [FieldError("host", f"the report is for host {report.host!r}, the path names {host!r}")],
            "a pass can only be reported for the host it ran on",
        )
    report, doc = accepted(report, state.settings.server.max_diff_bytes)
    keep = state.settings.server.history

    def history(conn: Connection, now: datetime) -> None:  # the page's history strip; not for a pass re-sent
        record_host_pass(conn, host, doc, now, keep)
        release_rebooted(conn, host, doc.get("bootId"))  # back from a reboot: its lease frees the group's slot

    taken = take_pass(store, host, doc, on_stored=history)
    # The report was validated once, on the way in: the answer is built from it, not read back nor
    # validated again (a Response, so FastAPI does not validate it against response_model either).
    if taken.outcome == "stored":
        status = host_status(taken.row, parsed=report)
        code, headers = 201, None
    else:  # the same pass again, or one older than the stored: kept as it was
        status = host_status(taken.row)
        code, headers = 200, {"Datum-Pass": taken.outcome}
    return Response(
        status.model_dump_json(by_alias=True, exclude_none=True), code, headers, media_type="application/json"
    )


def _matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110's weak comparison for ``If-None-Match``: ``*``, or any listed tag, ``W/`` or not."""
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def _facts(header: str | None) -> dict[str, Any]:
    if not header:
        return {}
    try:
        facts = json.loads(header)
    except ValueError as exc:
        raise invalid([FieldError("X-Datum-Facts", "not JSON")], "the facts header does not parse") from exc
    if not isinstance(facts, dict):
        raise invalid([FieldError("X-Datum-Facts", "a JSON object")], "the facts header is not an object")
    return facts


@router.get(
    "/{host}/manifest",
    summary="The host's effective manifest: its node rules' manifests composed and validated (datum agent).",
    description=(
        "Cedar action `fleet:ReadManifest` on `Host::\"{host}\"`. From `[fleet] manifests` and its `nodes.yaml`; "
        "the agent's facts come in the `X-Datum-Facts` header (JSON). `ETag` is the manifest's digest; "
        "`If-None-Match` with it is 304. 404 when no rule matches the host or no fleet is configured; "
        "422 with every finding when the composition is not valid."
    ),
    responses={200: {"content": {"application/json": {}}}, 304: {"description": "Not modified"},
               **error_responses(401, 403, 404, 422, 503)},
)
def manifest(
    request: Request,
    host: str = HostParam,
    facts: str | None = Header(default=None, alias="X-Datum-Facts", max_length=65536),
    if_none_match: str | None = Header(default=None, alias="If-None-Match"),
    _p: str = Depends(needs(Action.READ_MANIFEST, path_resource("Host", "host"))),
) -> Response:
    from datum.fleet.effective import effective

    directory = state_of(request).settings.fleet.manifests
    if directory is None:
        raise Problem.one("NOT_FOUND", "this server serves no manifests ([fleet] manifests is not set)")
    found = effective(directory, host, _facts(facts))
    etag = f'"{found.digest}"'
    if if_none_match and _matches(if_none_match, etag):
        return Response(status_code=304, headers={"ETag": etag})
    return Response(found.body, media_type="application/json", headers={"ETag": etag})
