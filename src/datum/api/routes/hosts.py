"""``/v1/hosts``: every host's persisted state, one host's last pass, and agents reporting passes.

The fleet's two hot requests (every agent, every interval) have fast answers,
registered on their routes: a pass report that validates and holds together
is stored in one worker-thread hop (``report_pass_now``, the route's own
``take``), and a manifest already composed for the fleet directory's files
as they are now is served from memory (``manifest_now``). Anything in doubt
goes to the route, for its one error path. What is taken and what is served
is the fleet server's decision (``datum.fleet.intake``, ``datum.fleet.serving``);
here it is said in HTTP: statuses, ``ETag`` and ``If-None-Match``, ``wait``,
``Datum-Wait``, ``Datum-Revision``, ``Datum-Pass``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response
from pydantic import AfterValidator, ValidationError

from datum.api.answers import host_listing, with_lease
from datum.api.front.authz import Action, scope_of
from datum.api.front.errors import error_responses
from datum.api.front.security import Asked, Later, Reply, fast, needs, path_resource, permits
from datum.api.front.state import ServerState, state_of
from datum.api.models import (
    EffectiveManifest,
    HostList,
    HostStatus,
    host_status,
    with_held_back,
)
from datum.api.routes.reboots import OUT, HostParam, host_fits
from datum.core.findings import ErrorCode, FieldError, Problem, invalid
from datum.core.vocab import HostState
from datum.fleet import intake
from datum.fleet.changes import Poll, Unchanged, current
from datum.fleet.effective import Effective, directory_of, remembered
from datum.fleet.listing import (
    CURSOR_MAX_LENGTH,
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    host_after,
)
from datum.fleet.rollouts import serve as rollouts
from datum.fleet.server import FleetServer
from datum.fleet.serving import chosen, composed, named, names, serving
from datum.fleet.stale import stale
from datum.host.report import PassReport
from datum.store.hosts import get_host, unknown_host
from datum.store.leases import read as read_leases

router = APIRouter(prefix="/v1/hosts", tags=["fleet"])

MAX_WAIT = 600  # the longest wait a request may ask, in seconds
WAIT_HEADER = "Datum-Wait"  # on a manifest answer when the request asked to wait and this server holds waits
REVISION_HEADER = "Datum-Revision"  # the fleet directory's revision the manifest was composed from


def cursor(value: str | None) -> str | None:
    """A ``cursor`` query parameter: the position it continues after (422 for a string that is not a cursor)."""
    return None if value is None else host_after(value)


def cursor_query(description: str) -> Any:
    """The ``cursor`` query parameter, with the pattern and length ``host_after`` takes, published as they are."""
    return Query(
        alias="cursor", max_length=CURSOR_MAX_LENGTH, description=description,
        json_schema_extra={"pattern": CURSOR_PATTERN},
    )


@router.get(
    "",
    name="list_hosts",
    response_model=HostList,
    summary="The fleet: a page of host summaries by name (state, reason, counts), every state's count.",
    description=(
        "Cedar action `fleet:ReadHost` on `Server::\"datum\"`. Hosts by name, `limit` per page (default "
        f"{DEFAULT_LIMIT}, at most {MAX_LIMIT}); `state=` keeps the hosts that read that state (a host whose "
        "agent fell silent reads `unknown`); `next` is the cursor of the following page, absent on the last. "
        "`counts` covers the whole fleet whatever the filter (a token scoped to host groups: those groups' hosts, "
        "in the list and the counts alike). Each host is a summary of its last pass "
        "(no report; `GET /v1/hosts/{host}` has it). A bad `state`, `limit` or `cursor` is 422 naming each."
    ),
    responses=error_responses(401, 403, 422, 503),
    **OUT,
)
def hosts(
    request: Request,
    state: HostState = Query(default=None, description="Only the hosts that read this state."),
    limit: int = Query(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Hosts per page."),
    after: Annotated[str, cursor_query("The `next` of the previous page."), AfterValidator(cursor)] = None,
    order: Literal["name", "worst"] = Query(
        default="name", description="`name`: pages by name. `worst`: the first `limit` hosts worst first as the page "
        "lists them (failed, unknown, drifted, awaiting-reboot, degraded, converged; each state's by name), one page "
        "only (`datum hosts`); with `state` (one state's hosts are by name either way) or `cursor` (a listing by name "
        "continued), the page by name."),
    principal: str = Depends(needs(Action.READ_HOST)),
) -> Response:
    server = state_of(request)
    _registry, store = server.wired()
    listing = host_listing(store, server.settings.fleet, datetime.now(UTC), state=state.value if state else None,
                           after=after, limit=limit, worst=order == "worst" and state is None and after is None,
                           groups=scope_of(principal))  # a token scoped to host groups lists their hosts only
    listing.hosts = [with_held_back(row, rollouts.held_back(server.fleet, row.host, row.revision))
                     for row in listing.hosts]
    headers = {"Link": f'<{_next_url(request, listing.next)}>; rel="next"'} if listing.next else None
    return Response(
        listing.model_dump_json(by_alias=True, exclude_none=True), media_type="application/json", headers=headers
    )


def _next_url(request: Request, cursor: str) -> str:
    return str(request.url.include_query_params(cursor=cursor))


@router.get(
    "/{host}",
    name="get_host",
    response_model=HostStatus,
    summary="One host's state, reason and last pass report.",
    description="Cedar action `fleet:ReadHost` on `Host::\"{host}\"`. 404 for a host the store never heard of.",
    responses=error_responses(401, 403, 404, 422, 503),
    **OUT,
)
def host(
    request: Request,
    host: str = HostParam,
    _p: str = Depends(needs(Action.READ_HOST, path_resource("Host", "host"))),
) -> HostStatus:
    return one_host(state_of(request), host)


def one_host(state: ServerState, host: str) -> HostStatus:
    """One host as ``GET /v1/hosts/{host}`` answers it (diffs redacted, its lease), or 404; the host's page shows it."""
    _registry, store = state.wired()
    row = get_host(store, host)
    if row is None:
        raise unknown_host(host)
    status = with_lease(host_status(stale(row, state.settings.fleet.stale_after)), read_leases(store, host))
    return with_held_back(status, rollouts.held_back(state.fleet, host, status.revision))


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
        "`Datum-Pass: duplicate` (the same pass again) or `older`. The group recorded for the host is the one "
        "nodes.yaml gives it by its name and labels (`group`, `default` when no rule gives one: `datum_fleet_hosts` "
        "on `/metrics`), never by facts: an `X-Datum-Facts` header is not read here."
    ),
    responses={
        200: {"model": HostStatus, "description": "Not stored: the same pass again or an older one (`Datum-Pass`)."},
        **error_responses(401, 403, 413, 422, 503),
    },
    **OUT,
)
def report_pass(
    request: Request,
    report: PassReport = Body(),
    host: str = HostParam,
    _p: str = Depends(needs(Action.REPORT_PASS, path_resource("Host", "host"))),
) -> Response:
    answer = take(state_of(request), host, report)
    headers = None if answer.status == 201 else {"Datum-Pass": answer.outcome}
    # a Response, so FastAPI does not validate the answer against response_model again
    return Response(answer.body, answer.status, headers, media_type="application/json")


@dataclass(frozen=True)
class Answer:
    """The HTTP answer to a reported pass: 201 stored, 200 not (``Datum-Pass: duplicate`` or ``older``)."""

    status: int
    body: bytes
    outcome: str


def take(state: ServerState, host: str, report: PassReport) -> Answer:
    """The pass taken by the fleet server (``datum.fleet.intake.take``: ``422`` naming every field at fault,
    ``503`` before the store is wired), answered with the host's status. Blocks on the store."""
    state.wired()
    received = intake.take(state.fleet, host, report)
    taken = received.taken
    if taken.outcome != "stored":  # the same pass again, or one older than the stored: kept as it was
        return Answer(200, host_status(taken.row).model_dump_json(by_alias=True, exclude_none=True).encode(), taken.outcome)
    # The report was validated once, on the way in: the answer is built from it, not read back nor
    # validated again, and its report is the text just stored, not serialized again.
    head = host_status(taken.row, parsed=received.report).model_dump_json(
        by_alias=True, exclude_none=True, exclude={"report"}
    )
    return Answer(201, f'{head[:-1]},"report":{received.text}}}'.encode(), taken.outcome)


@fast(report_pass)
async def report_pass_now(asked: Asked) -> Reply | None:
    """A JSON body that validates as a ``PassReport`` for the path's host, stored without the framework."""
    if asked.state.store is None or not (asked.header(b"content-type") or b"").startswith(b"application/json"):
        return None
    try:
        report = PassReport.model_validate_json(asked.body) if asked.body else None
    except ValidationError:
        return None
    host = asked.params["host"]
    if report is None or report.host != host:  # the route says what is wrong, its one way
        return None
    answer = await anyio.to_thread.run_sync(take, asked.state, host, report)  # 422 or 503: a Problem
    return Reply(answer.status, answer.body, [] if answer.status == 201 else [(b"datum-pass", answer.outcome.encode())])


FACTS_HEADER = "X-Datum-Facts"
# How the header is published: a JSON object, serialized (an OpenAPI parameter with `content`), as `facts_of` takes it.
FACTS_PARAMETER = {
    "name": FACTS_HEADER,
    "in": "header",
    "required": False,
    "description": "The agent's facts, a JSON object (`datum agent` sends them): its own claims, which nodes.yaml "
    "rules on `facts` match to add manifests (never vars, a group or a sensitive resource). Absent: no facts. "
    "Anything but a JSON object is 422.",
    "content": {"application/json": {"schema": {"type": "object"}}},
}


def facts_of(header: str | bytes | None) -> dict[str, Any]:
    """The facts an ``X-Datum-Facts`` header carries: none when it is absent, else a JSON object or ``422``.

    The route and its fast answer both read the header here (the fast answer leaves a 422 to the route).
    """
    if header is None:
        return {}
    try:
        facts = json.loads(header)
    except ValueError as exc:
        raise invalid([FieldError(FACTS_HEADER, "not JSON")], "the facts header does not parse") from exc
    if not isinstance(facts, dict):
        raise invalid([FieldError(FACTS_HEADER, "a JSON object")], "the facts header is not an object")
    return facts


REVISION_HEADERS = {
    REVISION_HEADER: {"description": "The fleet directory's revision the manifest was composed from.",
                      "schema": {"type": "string", "maxLength": 100}},
}


@router.get(
    "/{host}/manifest",
    name="get_manifest",
    summary="The host's effective manifest: its node rules' manifests composed and validated (datum agent).",
    description=(
        "Cedar action `fleet:ReadManifest` on `Host::\"{host}\"`. From `[fleet] manifests` and its `nodes.yaml`; "
        "the agent's facts come in the `X-Datum-Facts` header (JSON). `ETag` is the manifest's digest; "
        "`If-None-Match` with it is 304. With `wait=N` and `If-None-Match`, a long poll: the answer comes as soon "
        "as the host's effective manifest differs (200), else 304 after N seconds; a server that holds waits says "
        f"`{WAIT_HEADER}: N` on either. `{REVISION_HEADER}` on either names the fleet directory's revision the "
        "manifest was composed from (its git commit, `<commit>+dirty.<hex>`, or `sha256:<hex>`): the agent "
        "reports it as its pass's `revision`. 404 when no rule matches the host or no fleet is configured; "
        "422 with every finding when the composition is not valid."
    ),
    responses={200: {"model": EffectiveManifest, "headers": REVISION_HEADERS},
               304: {"description": "Not modified", "headers": REVISION_HEADERS},
               **error_responses(401, 403, 404, 422, 503)},
    openapi_extra={"parameters": [FACTS_PARAMETER]},
)
async def manifest(
    request: Request,
    host: str = HostParam,
    # published as FACTS_PARAMETER; bounded by the request's headers (64 KiB, else 431) like every header
    facts: str = Header(default=None, alias=FACTS_HEADER, include_in_schema=False),
    if_none_match: str = Header(default=None, alias="If-None-Match", description="An `ETag` it answered: 304 when still the same."),
    wait: int = Query(
        default=None, ge=0, le=MAX_WAIT,
        description="Seconds to hold the answer while the manifest still matches `If-None-Match` (a long poll).",
    ),
    principal: str = Depends(needs(Action.READ_MANIFEST, path_resource("Host", "host"))),
) -> Response:
    state = state_of(request)
    directory = state.settings.fleet.manifests
    if directory is None:
        raise Problem.one(ErrorCode.NOT_FOUND, "this server serves no manifests ([fleet] manifests is not set)")
    told = facts_of(facts)
    fleet = state.fleet
    labels = fleet.labels.remembered(host)  # given at enrollment: the server's say, read once per request
    if labels is None:
        labels = await anyio.to_thread.run_sync(fleet.labels.of, host)
    if rollouts.configured(fleet):  # which revision this host is served: the rollout's decision
        # what it cannot be served counts in its wave when the host's own agent asked (one who may report its
        # passes, and could report a failed one as well): never on another caller's word, or facts
        its_own = permits(state, principal, Action.REPORT_PASS, ("Host", host))
        found = await chosen(fleet, directory, host, told, its_own, _unchanged(if_none_match), wait, labels)
    else:
        found = await composed(fleet, directory, host, told, _unchanged(if_none_match), wait, labels)
    reply = _reply(found.effective, if_none_match, wait if fleet.changes is not None else None, found.revision)
    headers = {k.decode(): v.decode() for k, v in reply.headers}
    if reply.status == 304:
        return Response(status_code=304, headers=headers)
    return Response(reply.body, media_type="application/json", headers=headers)


@fast(manifest, query=("wait",))
async def manifest_now(asked: Asked) -> Reply | Later | None:
    """The manifest already composed for the directory's files as they are now (a ``stat`` per file, no read);
    with ``wait``, the long poll (``datum.fleet.changes``), composing in a worker thread when it must: held
    by the front door as one ``_Held`` between its looks.

    A first request without ``wait``, an edited directory, facts that do not parse, a ``wait`` that is not
    one, a composition that fails: the route, which composes in a worker thread and says what is wrong.
    """
    directory = asked.state.settings.fleet.manifests
    if directory is None or not host_fits(asked.params["host"]):
        return None
    fleet = asked.state.fleet
    staged = rollouts.configured(fleet)  # which revision: the route's decision, but in one case plain
    if staged and "wait" in asked.query:  # a long poll asks the rollout again on every change: the route's wait
        return None
    try:
        facts = facts_of(asked.header(b"x-datum-facts"))
        wait = wait_of(asked.query.get("wait"))
    except (Problem, ValueError):
        return None
    labels = fleet.labels.remembered(asked.params["host"])
    if labels is None:  # not read lately: the route reads them, in a worker thread
        return None
    resolved = directory_of(directory)
    header = asked.header(b"if-none-match")
    wanted = None if header is None else header.decode("latin-1")
    if wait is None or fleet.changes is None:
        found = remembered(resolved, asked.params["host"], facts, labels)
        if found is None:
            return None
        now = await serving(fleet, resolved)  # the revision of the signature ``remembered`` just took
        if staged and (now is None or not rollouts.settled_on(fleet, now.id)):
            return None  # a rollout under way (or not read lately): the route asks which revision, in a thread
        if not names(resolved, found, now):
            return None  # an edit between the two looks: the route names and composes again
        return _reply(found, wanted, None, None if now is None else now.id)
    # the route's own answer, run here: a wait is held once, never again by the route after it
    held = _Held(fleet, directory, asked.params["host"], facts, labels, wanted, wait)
    if wanted is None or not wait:
        return await held.answer(None)  # nothing to wait for: composed and named
    return await held.look()


class _Held(Poll, Later):
    """The manifest's long poll, as the front door holds it between two looks (``Later``): the request's
    few values and the poll (``datum.fleet.changes.Poll``: a future in the watch's set and a timer), in one
    object. ``look()`` composes (or finds) what the host is served now and answers, or waits; the route's
    ``composed`` does the same in a coroutine."""

    __slots__ = ("fleet", "directory", "name", "facts", "labels", "wanted", "wait")

    def __init__(
        self, fleet: FleetServer, directory: Path, host: str, facts: dict[str, Any], labels: Mapping[str, str],
        wanted: str | None, wait: int,
    ) -> None:
        assert fleet.changes is not None
        super().__init__(fleet.changes, wait)
        self.fleet = fleet
        self.directory = directory
        self.name = host
        self.facts = facts
        self.labels = labels
        self.wanted = wanted
        self.wait = wait

    async def look(self) -> Reply | Later | None:
        self.watch()  # before looking: a change while looking is not missed
        try:
            found = await current(directory_of(self.directory), self.name, self.facts, self.labels)
        except Problem:
            self.leave()
            return None  # the route says what is wrong, its one way
        except BaseException:
            self.leave()
            raise
        if self.wanted is not None and self.parks(found, matches(self.wanted, etag_of(found))):
            return self
        return await self.answer(found)

    async def again(self) -> Reply | Later | None:
        expired = self.woken()
        return await (self.look() if expired is None else self.answer(expired))

    async def answer(self, found: Effective | None) -> Reply | None:
        """``found`` (None: composed now) named by its revision (``datum.fleet.serving.named``), as a reply."""
        try:
            if found is None:
                found = await current(directory_of(self.directory), self.name, self.facts, self.labels)
            served = await named(self.fleet, self.directory, self.name, self.facts, found, self.labels)
        except Problem:
            return None  # the route says what is wrong, its one way
        return _reply(served.effective, self.wanted, self.wait, served.revision)


def etag_of(found: Effective) -> str:
    return f'"{found.digest}"'


def matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110's weak comparison for ``If-None-Match``: ``*``, or any listed tag, ``W/`` or not."""
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def _unchanged(if_none_match: str | None) -> Unchanged | None:
    """What an ``If-None-Match`` says the agent has: a manifest whose ``ETag`` it lists (None: it says nothing,
    and no wait is held)."""
    if not if_none_match:
        return None
    return lambda found: matches(if_none_match, etag_of(found))


def wait_of(text: str | None) -> int | None:
    """The ``wait`` query parameter: whole seconds from 0 to ``MAX_WAIT``, or None when absent; a
    ValueError for anything else (the route says so, 422)."""
    if text is None:
        return None
    if not text.isdigit() or int(text) > MAX_WAIT:
        raise ValueError(text)
    return int(text)


def _reply(found: Effective, wanted: str | None, wait: int | None, revision: str | None) -> Reply:
    """200 with the manifest, or 304 when ``wanted`` (an ``If-None-Match``) matches it; ``Datum-Wait`` when the
    request asked to wait and this server holds waits; ``Datum-Revision`` on either (the fleet directory's
    revision, ``datum.fleet.serving``)."""
    etag = etag_of(found)
    headers = [(b"etag", etag.encode())]
    if revision is not None:
        headers.append((REVISION_HEADER.lower().encode(), revision.encode()))
    if wait is not None:
        headers.append((WAIT_HEADER.lower().encode(), str(wait).encode()))
    if wanted is not None and matches(wanted, etag):
        return Reply(304, headers=headers)
    return Reply(200, found.body, headers)
