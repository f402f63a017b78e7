"""The HTTP schema of the hosts endpoints (the drift report's lives in ``reconcile.report``; a plugin's in its routes).

Fields that do not apply are absent, never null, as everywhere in the contract.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import SkipJsonSchema

from datum.core import hostreasons
from datum.core.attention import Severity
from datum.core.hostsummary import count_states
from datum.core.needwords import held_back
from datum.core.vocab import (
    Action,
    AuditOutcome,
    Direction,
    HostState,
    ResourceState,
    RolloutAct,
    RolloutState,
)
from datum.fleet.intake import redacted
from datum.fleet.listing import Page
from datum.host.report import PassReport, RebootStatus, ResourceReport
from datum.reconcile.report import absent
from datum.wire import Text


class Out(BaseModel):
    """A response body: camelCase by alias, fields that do not apply left out."""

    model_config = ConfigDict(populate_by_name=True)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class HeldBack(Out):
    """The rollout in force keeps the host on the previous revision until its wave is released."""

    rollout: int = Field(description="The rollout's id (`GET /v1/rollouts`).")
    revision: str = Field(description="The revision rolling out, which the host does not get yet.")
    previous: str = Field(description="The revision the host is served meanwhile, and converges to.")
    wave: int = Field(description="The host's wave (the last for a host the rollout did not plan).")
    released: int = Field(description="The last wave released so far (0: the canaries).")

    @property
    def said(self) -> str:
        """The words every surface shows (``datum hosts``, the host's page)."""
        return held_back(self.wave, self.rollout, self.released)


class RebootLease(Out):
    """A host rebooting: it holds one of its group's reboot slots (``[fleet] reboot_concurrency``)."""

    host: str
    group: str = Field(description="The host's group, from nodes.yaml (`default` when no rule gives one).")
    boot_id: str = Field(alias="bootId", description="The boot the lease was taken in; a report from another releases it.")
    since: datetime = Field(description="When the lease was granted.")
    expires_at: datetime = Field(
        alias="expiresAt", description="When the slot frees itself if the host has not reported from a new boot."
    )
    unhealthy: str | SkipJsonSchema[None] = absent(
        "The host reported from a new boot, but not converged and healthy (its health check or post_reboot "
        "failed): why. The lease holds; past `expiresAt` it halts the group as unhealthy."
    )


class RebootLeaseRequest(BaseModel):
    """An agent asking for its host's reboot slot (``datum agent``, before it runs the reboot command)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    boot_id: Text = Field(alias="bootId", min_length=1, max_length=100, description="The boot the host asks from.")
    facts: dict[str, Any] = Field(
        default_factory=dict,
        description="The host's facts, as in `X-Datum-Facts`: its own claims, not read (its group is the one "
        "nodes.yaml gives it by its name and labels).",
    )
    interval_seconds: float = absent(
        "The agent's interval: its ask holds its place in the group's reboot_order for two of them "
        "(unless `[fleet] reboot_request_ttl` says otherwise).",
        "intervalSeconds", gt=0, le=365 * 86400,
    )


class RebootLeaseAnswer(Out):
    """Whether the host may reboot now, and who of its group is rebooting."""

    host: str
    group: str
    granted: bool = Field(description="True: the host holds a slot and may reboot. False: it must not, and asks again.")
    limit: int = Field(description="`[fleet] reboot_concurrency`: hosts of one group rebooting at once.")
    rebooting: list[RebootLease] = Field(description="The group's live leases, the host's own included when granted.")
    reason: str | SkipJsonSchema[None] = absent(
        "Why not, when not granted: `waiting for the group's reboot budget (2/2 rebooting)`."
    )
    lease: RebootLease | SkipJsonSchema[None] = absent("The host's lease, when granted.")
    halted: list[RebootLease] | SkipJsonSchema[None] = absent(
        "When not granted because the group is halted: the leases past `[fleet] reboot_timeout` whose hosts have "
        "not come back (until they report from a new boot, or an operator clears them)."
    )
    ahead: list[str] | SkipJsonSchema[None] = absent(
        "When not granted because it is not the host's turn: the hosts before it in its group's reboot_order "
        "(nodes.yaml) that asked and wait."
    )
    blocked: str | SkipJsonSchema[None] = absent(
        "When not granted because `[fleet] reboot_block_query` returns series (or Prometheus cannot be asked): "
        "the query and what it returned."
    )


class RebootGroup(Out):
    """One group of the reboot budget."""

    group: str
    rebooting: list[RebootLease] = Field(description="Hosts holding a slot now, oldest first.")
    overdue: list[RebootLease] = Field(
        description="Leases past `[fleet] reboot_timeout` whose host has not reported from a new boot: "
        "the host may not have come back, and the group's reboots are halted until it does or an operator clears "
        "its lease (`datum reboots clear HOST`)."
    )
    waiting: list[str] = Field(
        default_factory=list,
        description="Hosts that asked for a lease and wait (their ask still live), in the group's reboot_order.",
    )


class Reboots(Out):
    """Who is rebooting, group by group."""

    limit: int = Field(description="`[fleet] reboot_concurrency`.")
    timeout_seconds: float = Field(alias="timeoutSeconds", description="`[fleet] reboot_timeout`.")
    blocked: str | SkipJsonSchema[None] = absent(
        "While `[fleet] reboot_block_query` returns series (or Prometheus cannot be asked): no lease is granted in "
        "any group, and this says the query and what it returned."
    )
    groups: list[RebootGroup]


class HostSummary(Out):
    """A host as the listing shows it: the state it reads, why, and a summary of its last pass."""

    host: str
    state: HostState = Field(description="The rollup of its last pass; `unknown` when its agent fell silent.")
    reason: str | SkipJsonSchema[None] = absent("The resources behind a non-converged state.")
    boot_id: str | SkipJsonSchema[None] = absent("The boot id the last pass ran under.", "bootId")
    finished_at: datetime | SkipJsonSchema[None] = absent("When the last pass finished.", "finishedAt")
    updated_at: datetime | SkipJsonSchema[None] = absent(
        "When the server stored the last pass; absent when the stored time cannot be read (edited by hand).",
        "updatedAt",
    )
    stale: bool = Field(
        default=False,
        description="The agent fell silent: its last report is older than `[fleet] stale_after` of its "
        "intervals, so the host reads `unknown` whatever the pass said.",
    )
    pass_id: str | SkipJsonSchema[None] = absent("The last pass's id (datum agent).", "passId")
    seq: int | SkipJsonSchema[None] = absent("The last pass's per-host sequence number (datum agent).")
    manifest_digest: str | SkipJsonSchema[None] = absent("The digest of the manifest the last pass ran.", "manifestDigest")
    revision: str | SkipJsonSchema[None] = absent(
        "The fleet directory's revision the last pass ran (its report's `revision`; `GET /v1/revisions`)."
    )
    counts: dict[str, int] = Field(default_factory=dict, description="The last pass's resources by state.")
    attention: list[ResourceReport] = Field(
        default_factory=list,
        description="The resources of the last pass that are not converged (in the listing: without their "
        "diffs, at most 20; `GET /v1/hosts/{host}` has them all).",
    )
    attention_total: int | SkipJsonSchema[None] = absent(
        "How many resources are not converged, when the listing shows fewer.", "attentionTotal"
    )
    rebooting: RebootLease | SkipJsonSchema[None] = absent(
        "The reboot lease the host holds while it reboots; absent when it holds none."
    )
    held_back: HeldBack | SkipJsonSchema[None] = absent(
        "While a staged rollout is under way: the host's last pass ran the previous revision and its wave is "
        "not released, so it is served the previous revision (`datum explain held_back`); absent otherwise.",
        "heldBack",
    )
    reboot: RebootStatus | SkipJsonSchema[None] = absent(
        "The last pass's `reboot` (the report's, without `markers`): the reboot the host needs, its `policy` "
        "and what the agent did about it; absent when the last pass recorded none."
    )


class HostStatus(HostSummary):
    """A host's persisted state: the rollup of its last pass, why when it is not converged, and the pass."""

    report: PassReport | SkipJsonSchema[None] = absent(
        "The last pass report; absent when it cannot be read (state unknown)."
    )


class HostList(Out):
    """``GET /v1/hosts``: one page of host summaries by name, and the whole fleet's counts."""

    hosts: list[HostSummary] = Field(description="This page's hosts, by name.")
    counts: dict[HostState, int] = Field(
        description="Every host of the fleet by the state it reads (stale ones `unknown`), whatever the filter."
    )
    total: int = Field(description="How many hosts the fleet has.")
    next: str | SkipJsonSchema[None] = absent(
        "The cursor of the next page (`?cursor=`, with the same filter); absent on the last page."
    )


class NeedLine(Out):
    """One line of *Needs a human* (``datum.core.attention``): what, about which reconciler or host, and what to do."""

    severity: Severity = Field(
        description="`look`: it will not clear by itself, someone has to act (the page's red *go and look*); "
        "`check`: it may be intended, check that it is."
    )
    reason: str = Field(
        description="What kind of thing it is: `backoff_cap`, `host_failed`, `manual_reboot`, `stranded`, a drift "
        "reason whose explanation says go and look (`circuit_breaker`, ...), ... (`datum_needs_human`'s label)."
    )
    reconciler: str | SkipJsonSchema[None] = absent("The reconciler it is about, when it is about one.")
    host: str | SkipJsonSchema[None] = absent("The host it is about, when it is about one.")
    ids: list[str] | SkipJsonSchema[None] = absent(
        "The items it names (`kind/id`, as in the drift report), or the coverage row (`kind/status`)."
    )
    direction: Direction | SkipJsonSchema[None] = absent("The direction of the items it names.")
    text: str = Field(description="The line as the page prints it.")
    detail: str | SkipJsonSchema[None] = absent("Why: the last error, the host's reason, ...")
    do: str = Field(description="What to do about it.")


class Attention(Out):
    """``GET /v1/attention``: what needs a human, decided once (the page's *Needs a human* renders this)."""

    needs: list[NeedLine] = Field(description="Every line, `look` first, then in the order a human reads them.")
    hosts: bool = Field(
        description="Whether hosts were considered: false when the token may not read them (`fleet:ReadHost`)."
    )
    hosts_not_listed: int | SkipJsonSchema[None] = absent(
        "Hosts that are not converged beyond the worst hosts considered (the page's first "
        "hosts, worst first): `GET /v1/hosts?state=...` lists them. Absent when none.",
        "hostsNotListed",
    )


class Status(Out):
    """A probe's answer."""

    status: str


class Endpoint(Out):
    """One operation of the API."""

    method: str = Field(description="GET, PUT, POST or DELETE; HEAD is answered wherever GET is.")
    path: str = Field(description="The path, with its parameters in braces: /v1/hosts/{host}.")
    operation_id: str = Field(alias="operationId", description="The operation's id in the OpenAPI document: getHost.")
    summary: str = Field(description="What it answers.")


class ApiRoot(Out):
    """``GET /v1``: what this API answers, and where it is documented."""

    endpoints: list[Endpoint]
    openapi: str = Field(description="The OpenAPI document.")
    docs: str = Field(description="The same, browsable (Swagger UI, served by Datum itself).")


def _unreadable_why(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "(document)"
    more = f" and {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
    return hostreasons.unreadable("the last pass report", f"{where}: {first.get('msg', 'invalid')}{more}")


def host_status(row: dict[str, Any], parsed: PassReport | None = None) -> HostStatus:
    """The API's view of a stored host row (``store.hosts``).

    ``parsed`` is the row's report already validated (report intake, which just
    wrote it): it is used as it is rather than read into a ``PassReport`` again.

    A stored report that is not JSON, or no longer reads as a ``PassReport``,
    makes the host ``unknown`` (contract section 2), with the reason saying why;
    so does a stored state that is not a host state. One bad row never fails a list.
    """
    values = _common(row)
    report: PassReport | None = None
    if row.get("unreadable"):
        values.update(state=HostState.UNKNOWN, reason=hostreasons.unreadable("the last pass report", row["unreadable"]))
    elif parsed is not None:
        report = parsed
    else:
        try:
            report = PassReport.model_validate(row.get("report") or {})
        except ValidationError as exc:
            values.update(state=HostState.UNKNOWN, reason=_unreadable_why(exc))
    if values["state"] not in HostState._value2member_map_:
        values.update(state=HostState.UNKNOWN, reason=hostreasons.not_a_state(values["state"]))
    if report is not None:
        report = redacted(report)
        values["attention"] = [r for r in report.resources if r.state != ResourceState.CONVERGED]
        values["manifestDigest"] = report.manifest_digest
        values["revision"] = report.revision  # as the listing says it (the summary's)
        values["counts"] = count_states([{"state": r.state.value} for r in report.resources])
        if report.reboot is not None:
            values["reboot"] = report.reboot.model_copy(update={"markers": None})
    return _validated(HostStatus, {**values, "report": report})


def _common(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "host": row["host"],
        "state": row["state"],
        "reason": row.get("reason"),
        "bootId": row.get("bootId"),
        "finishedAt": row.get("finishedAt"),
        "updatedAt": row["updatedAt"],
        "stale": bool(row.get("stale")),
        "passId": row.get("passId"),
        "seq": row.get("seq"),
    }


def _validated(model: type[_H], values: dict[str, Any]) -> _H:
    """``model`` of ``values``; a stored value that is not what it should be makes the host ``unknown``."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:  # e.g. a stored boot id or time that is not one
        values.update(state=HostState.UNKNOWN, reason=_unreadable_why(exc), bootId=None, finishedAt=None)
        kept = {k: v for k, v in values.items() if k in _ALWAYS_VALID}
        return model.model_validate({**kept, "attention": [], "report": None})


_ALWAYS_VALID = ("host", "state", "reason", "updatedAt", "stale")
_H = TypeVar("_H", bound=HostSummary)


def with_held_back(status: _H, found: Any) -> _H:
    """``status`` saying the rollout in force holds it back (a ``datum.store.rollouts.HeldBack``), when it does."""
    if found is None:
        return status
    return status.model_copy(update={"held_back": HeldBack(
        rollout=found.rollout, revision=found.revision, previous=found.previous, wave=found.wave,
        released=found.released,
    )})


def host_summary(row: dict[str, Any]) -> HostSummary:
    """The listing's view of a host row of ``store.hosts.host_page`` (its summary, not its report)."""
    values = _common(row)
    if values["state"] not in HostState._value2member_map_:  # pragma: no cover - host_page maps it to unknown
        values.update(state=HostState.UNKNOWN)
    summary = row.get("summary") or {}
    values["counts"] = summary.get("counts") or {}
    values["attention"] = summary.get("attention") or []
    values["attentionTotal"] = summary.get("attentionTotal")
    values["manifestDigest"] = summary.get("manifestDigest")
    values["revision"] = summary.get("revision")
    values["reboot"] = summary.get("reboot")
    if row.get("unreadable"):
        values.update(state=HostState.UNKNOWN, reason=hostreasons.unreadable("the summary of the last pass", row["unreadable"]))
    elif row.get("reported") not in HostState._value2member_map_ and not row.get("stale"):
        values["reason"] = hostreasons.not_a_state(row.get("reported"))
    return _validated(HostSummary, values)


def host_list(found: Page) -> HostList:
    """The API's view of a page of the host listing (``datum.fleet.listing.page``)."""
    return HostList(
        hosts=[host_summary(row) for row in found.hosts],
        counts=found.counts,  # type: ignore[arg-type]
        total=sum(found.counts.values()),
        next=found.next,
    )


# The pass archive (issue 23): a host's passes and the fleet's events (datum.fleet.history).

class PassSummary(Out):
    """One delivered pass of a host, as the archive keeps it: its times, state and counts (no report)."""

    id: int = Field(description="The pass's number in the archive (`GET /v1/hosts/{host}/passes/{id}` takes it).")
    host: str
    pass_id: str | SkipJsonSchema[None] = absent("The pass's id (datum agent); the path takes it too.", "passId")
    seq: int | SkipJsonSchema[None] = absent("The agent's per-host sequence number of the pass.")
    state: HostState = Field(description="The host state the pass reported.")
    reason: str | SkipJsonSchema[None] = absent("The resources behind a state that is not converged.")
    completed: bool = Field(description="False for a pass stopped before every resource was reached.")
    counts: dict[str, int] = Field(description="The pass's resources by state.")
    attention: int = Field(description="How many of its resources were not converged.")
    started_at: datetime | SkipJsonSchema[None] = absent("When the host started the pass (its clock).", "startedAt")
    finished_at: datetime = Field(alias="finishedAt", description="When the host finished the pass (its clock).")
    duration_seconds: float | SkipJsonSchema[None] = absent("How long the pass took, as the host measured it.", "durationSeconds")
    received_at: datetime = Field(alias="receivedAt", description="When the server received the pass (its clock).")
    digest: str | SkipJsonSchema[None] = absent(
        "The digest of what the pass reported apart from its ids and times: passes that found the same share it, "
        "and their report is kept once."
    )
    older: bool = Field(
        description="The pass reached the server after a newer one of the host (a lower `seq`): kept here, "
        "never the host's state."
    )


class PassDetail(PassSummary):
    """One pass with its whole report (diffs of sensitive resources redacted, as `GET /v1/hosts/{host}`)."""

    report: PassReport | SkipJsonSchema[None] = absent(
        "The pass's report: the kept report of its digest with the pass's own ids and times (a resource's "
        "`durationSeconds` is the kept copy's); absent when it is not kept (`unreadable` says why)."
    )
    unreadable: str | SkipJsonSchema[None] = absent("Why `report` is absent.")


class PassList(Out):
    """``GET /v1/hosts/{host}/passes``: one page of a host's passes, newest finish first."""

    passes: list[PassSummary]
    next: str | SkipJsonSchema[None] = absent(
        "The cursor of the next page (`?cursor=`, with the same filters); absent on the last page."
    )


class PassEvent(Out):
    """A resource a pass changed, or found failed, drifted or blocked."""

    id: int = Field(description="The event's number in the archive.")
    host: str
    pass_: str = Field(alias="pass", description="The pass: its `passId`, else its number in the archive.")
    finished_at: datetime = Field(alias="finishedAt", description="When the host finished the pass (its clock).")
    received_at: datetime = Field(alias="receivedAt", description="When the server received the pass.")
    resource: str = Field(description="The resource's identity, Type[name].")
    type: str
    action: Action = Field(description="What the plan intended for the resource.")
    state: ResourceState = Field(description="What the resource reached.")
    changed: bool = Field(description="Whether the pass changed it.")
    reason: str | SkipJsonSchema[None] = absent("Why it is failed, blocked or drifted (a failure's error with it).")


class RolloutEvent(Out):
    """A transition of a staged rollout (``datum explain`` each act's state): who made it, when, why."""

    id: int = Field(description="The transition's number (rollout events are numbered apart from pass events).")
    type: Literal["rollout"]
    at: datetime = Field(description="When it happened (the store's clock).")
    rollout: int
    resource: str = Field(description="`Rollout[N]`: the `resource` filter takes it.")
    revision: str = Field(description="The revision the rollout rolls out.")
    action: RolloutAct = Field(description="started, released (the next wave), halted, paused, resumed, aborted, done "
                               "or superseded.")
    state: RolloutState = Field(description="The rollout's state after it.")
    wave: int = Field(description="The last wave released after it (0: the canaries).")
    by: str = Field(description="Who: the principal that asked, or `server` for what the server decided.")
    reason: str | SkipJsonSchema[None] = absent("Why: a halt's count of failed hosts, a wave's soak, an operator's words.")
    hosts: list[str] | SkipJsonSchema[None] = absent(
        "The hosts it named: a halt's failed hosts, a resume's accepted ones, an abort's hosts sent back."
    )


class EventList(Out):
    """``GET /v1/events``: one page of the fleet's events, newest first: resources of kept passes (by their
    finish) and the rollouts' transitions (type `rollout`, by when they happened)."""

    events: list[PassEvent | RolloutEvent]
    next: str | SkipJsonSchema[None] = absent(
        "The cursor of the next page (`?cursor=`, with the same filters); absent on the last page."
    )


class AuditEntry(Out):
    """One row of the audit log: an acting request, a refusal, or an act of the CLI on the store."""

    seq: int | SkipJsonSchema[None] = absent("The row's place in the chain, from 1, no gap; absent until the row is "
                                             "chained, a second or so after it is written.")
    at: datetime = Field(description="When it was written, by the store's clock.")
    principal: str | SkipJsonSchema[None] = absent("Who: the token's principal (`cli:<user>` for the CLI); absent "
                                                   "for a request with no known token.")
    token_id: str | SkipJsonSchema[None] = absent("The token's id, as `datum token list` names it (never the token).",
                                                  "tokenId")
    source: str | SkipJsonSchema[None] = absent("The client's address; the machine's name for the CLI.")
    action: str | SkipJsonSchema[None] = absent("The Cedar action asked (`token:Create`, `token:Revoke` and "
                                                "`fleet:ClearRebootLease` for the CLI's acts on the store).")
    resource: str | SkipJsonSchema[None] = absent('The resource, as Cedar writes it: `Host::"web1"`.')
    request: str | SkipJsonSchema[None] = absent("The method and path (what looks like a token redacted), or the "
                                                 "CLI's command.")
    outcome: AuditOutcome = Field(description="How it ended: `allowed` (done, whatever the route answered), " + ", ".join(
        f"`{o}` ({o.status})" for o in AuditOutcome if o.refusal) + "; `datum explain OUTCOME`.")
    status: int | SkipJsonSchema[None] = absent("The HTTP answer's status; absent for the CLI.")
    policy: str | SkipJsonSchema[None] = absent("The ids of the Cedar policies that decided, comma-separated; absent "
                                                "when none permits it (a deny) and for the CLI.")
    detail: str | SkipJsonSchema[None] = absent("More about the act (the principal of a token created).")
    prev: str | SkipJsonSchema[None] = absent("The hash of the row before it (64 zeros before the first); absent "
                                              "until the row is chained.")
    hash: str | SkipJsonSchema[None] = absent("SHA-256 over the row's fields and `prev` (`datum audit verify` checks "
                                              "it); absent until the row is chained.")


class AuditList(Out):
    """``GET /v1/audit``: one page of the audit log, newest first."""

    entries: list[AuditEntry]
    next: str | SkipJsonSchema[None] = absent(
        "The cursor of the next page (`?cursor=`, with the same filters); absent on the last page."
    )


def pass_detail(row: dict[str, Any]) -> PassDetail:
    """The API's view of one archived pass (``store.passes.one_pass``): its report read and redacted. A kept
    report that no longer reads as a ``PassReport`` is absent, with why."""
    values = {k: v for k, v in row.items() if k not in ("report", "events")}
    report = row.get("report")
    if report is not None:
        try:
            values["report"] = kept_report(report)
        except ValidationError as exc:
            values["unreadable"] = _unreadable_why(exc).replace("the last pass report", "the report of this pass")
    return PassDetail.model_validate(values)


def kept_report(raw: Any) -> PassReport:
    """A kept report as the API serves it: read as a ``PassReport`` (a ValidationError when it no longer
    reads as one) and redacted. The pass detail and the host page both take it from here."""
    return redacted(PassReport.model_validate(raw))


def kept_reports_served(raw: dict[str, Any]) -> dict[str, PassReport | None]:
    """``kept_report`` of each kept report by digest; one that does not read is None."""
    out: dict[str, PassReport | None] = {}
    for digest, report in raw.items():
        try:
            out[digest] = kept_report(report) if isinstance(report, dict) else None
        except ValidationError:
            out[digest] = None
    return out


class RevisionCounts(Out):
    """One revision of the fleet's manifests and the hosts whose last pass ran it."""

    id: str = Field(description="The revision: its git commit, `<commit>+dirty.<hex>`, or `sha256:<hex>` of its files.")
    current: bool = Field(description="The revision this server serves now.")
    first_seen: datetime | SkipJsonSchema[None] = absent(
        "When a server first served it (the store's clock); absent for a revision only a host's report names.",
        "firstSeen",
    )
    git_commit: str | SkipJsonSchema[None] = absent("Its git commit, when the directory is a git work tree.", "gitCommit")
    hosts: int = Field(description="Hosts whose last pass ran it.")
    converged: int = Field(description="Of those, the ones that read converged.")
    failed: int = Field(description="Of those, the ones that read failed.")
    other: int = Field(description="Of those, the rest (drifted, blocked, unknown: a silent host reads unknown).")
    states: dict[HostState, int] = Field(description="Those hosts by the state they read.")


class WithoutRevision(Out):
    """The hosts whose last pass names no revision, by what their report says of its manifest's origin."""

    apply: int = Field(description="Reported with datum apply --report-to: a manifest of its own, no revision of the fleet.")
    cached: int = Field(description="Ran the manifest its agent kept: the server was not reached.")
    older: int = Field(description="Served by the server with no revision: an agent older than revisions.")


class RevisionList(Out):
    """``GET /v1/revisions``: per revision of the fleet's manifests, how many hosts run it and how they fare."""

    current: str | SkipJsonSchema[None] = absent(
        "The revision this server serves now; absent when it serves no manifests ([fleet] manifests)."
    )
    revisions: list[RevisionCounts] = Field(
        description="Newest first (by first seen; those no server recorded last), the current one always listed."
    )
    without: int = Field(description="Hosts whose last pass names no revision (withoutBy says what they are).")
    without_by: WithoutRevision = Field(description="The same hosts by what they are.", alias="withoutBy")


class ManifestDocument(Out):
    """A manifest as a host is served it: its node rules' manifests composed, includes expanded, validated."""

    resources: list[dict[str, Any]] = Field(
        description="One-key objects, `Type[name]: {attributes}`, as the manifest's JSON Schema says (docs/host.md)."
    )


class EffectiveManifest(Out):
    """``GET /v1/hosts/{host}/manifest``: what ``datum agent`` applies, and what it needs beside it."""

    host: str
    digest: str = Field(description="`sha256:` of the manifest and its files: the answer's `ETag`.")
    manifests: list[str] = Field(description="The manifests its nodes.yaml rules named, in order.")
    manifest: ManifestDocument
    files: dict[str, str] = Field(
        description="Each file a resource's `template` or `source` names (and what a template loads), by its path "
        "in the fleet directory: its bytes in base64."
    )


WAVE_NAMES = 1000  # hosts a wave names in GET /v1/rollouts


class RolloutWave(Out):
    """One wave of a staged rollout: 0 the canaries, then ``[fleet.rollout] waves`` in order."""

    wave: int = Field(description="0: the canaries; 1..: the waves.")
    released: bool = Field(description="Whether its hosts are served the new revision.")
    hosts: int = Field(description="Hosts planned in it when the rollout started (hosts heard of later wait for the last).")
    converged: int = Field(description="Of those, the ones whose last pass converged on the new revision.")
    failed: int = Field(
        description="Of those, the ones whose last pass failed on the new revision, or that fell silent since a pass "
        "on it (no report for [fleet] stale_after of their intervals): both count toward max_failed."
    )
    silent: int = Field(
        default=0,
        description="Of those, the ones silent since before any pass on the new revision: not waited for (they take "
        "it when they come back); a wave whose released hosts are all silent does not complete.",
    )
    accepted: int = Field(
        default=0,
        description="Of those, the ones failing (or silent since a pass) on the new revision with the pass whose "
        "failure a resume of the halted rollout accepted: counted neither failed nor waited for until their next pass.",
    )
    names: list[str] = Field(
        default_factory=list,
        description=f"Its hosts by name (the first {WAVE_NAMES} when it has more: `hosts` counts them all).",
    )


class FailedHost(Out):
    host: str
    reason: str = Field(description="Its last pass's reason.")


class RolloutStatus(Out):
    """A staged rollout of a revision of the fleet's manifests (``[fleet.rollout]``)."""

    id: int
    revision: str = Field(description="The revision it rolls out.")
    previous: str | SkipJsonSchema[None] = absent("The stable revision it rolls from (the last done).")
    state: RolloutState = Field(description="rolling, paused, halted, aborted, done or superseded (datum explain STATE).")
    wave: int = Field(description="The last released wave (0: the canaries).")
    last_wave: int = Field(alias="lastWave", description="The wave that releases every host.")
    started_at: datetime = Field(alias="startedAt")
    wave_started_at: datetime = Field(alias="waveStartedAt", description="When the current wave was released.")
    wave_completed_at: datetime | SkipJsonSchema[None] = absent(
        "When every released host had converged on it: the soak runs from here.", "waveCompletedAt"
    )
    soak_ends_at: datetime | SkipJsonSchema[None] = absent("When the next wave is released if all stay well.", "soakEndsAt")
    by: str | SkipJsonSchema[None] = absent("Who paused, resumed or aborted it last.")
    reason: str | SkipJsonSchema[None] = absent("Why it halted, or what superseded it.")
    failed: list[FailedHost] | SkipJsonSchema[None] = absent(
        "A halted rollout: the released hosts failing on its revision (as its last check found them), with why; "
        "a resume accepts these."
    )
    halted_at: datetime | SkipJsonSchema[None] = absent("When it last halted.", "haltedAt")
    paused_at: datetime | SkipJsonSchema[None] = absent("When it was last paused.", "pausedAt")
    aborted_at: datetime | SkipJsonSchema[None] = absent("When it was aborted.", "abortedAt")
    transitions: list[RolloutEvent] = Field(
        default_factory=list, description="Every transition it made, oldest first (as `GET /v1/events` lists them)."
    )
    waves: list[RolloutWave] = Field(default_factory=list, description="Its waves (the rollout in force only).")


class RolloutList(Out):
    """``GET /v1/rollouts``: the rollout in force first, then older ones."""

    configured: bool = Field(description="Whether [fleet.rollout] is configured on this server.")
    rollouts: list[RolloutStatus]


class RolloutCommandAnswer(Out):
    """What ``POST /v1/rollouts/current/{pause,resume,abort}`` did."""

    rollout: RolloutStatus
    hosts_returned: list[str] | SkipJsonSchema[None] = absent(
        "Abort: the hosts whose last pass ran the aborted revision; they are served the previous one again.",
        "hostsReturned",
    )
