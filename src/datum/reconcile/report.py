"""The drift report of contract section 5, and the list surface, as pydantic models.

The same models serve ``datum drift --json`` and the HTTP API. A field the
contract marks optional is absent, never null, where it does not apply; the
fields it always promises are always there, and ``asOf`` / ``lastRanAt`` are
null only before the first tick (there is no tick to name yet).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
)
from pydantic.json_schema import SkipJsonSchema

from datum.config import Settings
from datum.core.attention import Reconciler
from datum.core.breaker import Threshold
from datum.core.coverage import CoverageRow
from datum.core.memory import BackoffPolicy
from datum.core.rollup import overrun
from datum.core.vocab import Direction, Health, PluginReason, Reason
from datum.reconcile.coverage import measure
from datum.reconcile.registry import Registry, declared_coverage, declared_items_reported
from datum.store import Store
from datum.store.runs import COVERAGE, ITEMS_REPORTED, load_run
from datum.wire import absent

# A reason a plugin registered under its namespace (``pg_roles.still_owns``).
PluginReasonText = Annotated[
    str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$"), AfterValidator(PluginReason)
]



def _rfc3339(description: str, alias: str) -> Any:
    return Field(alias=alias, description=description)


class _Out(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    # Fields always present, null when unknown; every other None is left out.
    ALWAYS: ClassVar[frozenset[str]] = frozenset()

    # No return annotation: the published (serialization) schema stays the model's own.
    @model_serializer(mode="wrap")
    def _absent_not_null(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):  # type: ignore[no-untyped-def]
        data = handler(self)
        out: dict[str, Any] = {}
        for name, field in type(self).model_fields.items():
            key = (field.alias or name) if info.by_alias else name
            if data.get(key) is not None:
                out[key] = data[key]
            elif name in self.ALWAYS:
                out[key] = None
        return out

    def dump(self) -> dict[str, Any]:
        """The JSON form: camelCase, optional fields absent where they do not apply."""
        return self.model_dump(mode="json", by_alias=True)


class DriftItem(_Out):
    """One diverged item and why it is not converging."""

    kind: str = Field(description="Resource kind the reconciler diffed (bucket, role, ...).")
    direction: Direction = Field(
        description="Which half of the set-diff produced the item: restore (desired, absent from the substrate), "
        "reap (in the substrate, no desired row), align (in both, values differ)."
    )
    id: str = Field(description="The item's stable identity.")
    streak: int = Field(ge=0, description="Consecutive passes this item has been diverged.")
    confirmations_needed: int = Field(
        alias="confirmationsNeeded", ge=0,
        description="The reconciler's confirmation_ticks: the streak an item needs before the framework acts on it.",
    )
    reason: Reason | PluginReasonText = Field(
        description="Why this item did not converge on this pass (`datum explain REASON`): one of the contract's "
        "reasons, or `NAMESPACE.NAME` that a plugin registered under its namespace."
    )
    last_err: str | SkipJsonSchema[None] = absent(
        "Last apply error of this item; present for reason backoff and apply_failed.", "lastErr"
    )
    desired: str | SkipJsonSchema[None] = absent("Rendering of the desired side, when the reconciler supplies one.")
    actual: str | SkipJsonSchema[None] = absent("Rendering of the actual side; direction align only.")
    failures: int | SkipJsonSchema[None] = absent(
        "Consecutive failed applies; present for reason backoff and apply_failed."
    )
    retry_after_passes: int | SkipJsonSchema[None] = absent(
        "How many more passes this item is skipped for; present for reason backoff and apply_failed.",
        "retryAfterPasses",
    )
    retry_after: datetime | SkipJsonSchema[None] = absent(
        "Estimate of when retryAfterPasses elapses (RFC 3339): the latest tick plus retryAfterPasses times the "
        "configured interval; never earlier than the real retry. Absent when unknown.",
        "retryAfter",
    )


class CoverageEntry(_Out):
    """How many desired-state rows sit in one status, and whether the work query selects it."""

    kind: str = Field(description="Resource kind (bucket, ...).")
    status: str = Field(description="The desired-state status value as stored.")
    count: int = Field(ge=0, description="How many rows sit in that status.")
    selected: bool = Field(description="Whether this reconciler's work query picks the status up.")
    terminal: bool = Field(description="Whether the status is legitimately final.")
    owned_by: str | SkipJsonSchema[None] = absent(
        "The component that drives rows in this status when it is not this reconciler; absent: nothing owns it.",
        "ownedBy",
    )
    oldest_age_seconds: float = Field(
        alias="oldestAgeSeconds", ge=0, description="Age of the oldest row in this status (0 when there is none)."
    )
    stranded: bool = Field(description="count > 0, not selected, not terminal and no ownedBy: nothing will move these rows.")


_AS_OF = "The latest tick (RFC 3339); null only before the first tick."
_LAST_RAN = "The last tick that executed: items describe that pass. Null before the first executed pass."
_HEALTH = "The reconciler's health rollup: ok, degraded, failing or unknown."
_ERROR = (
    "Why the last executed pass could not complete (health failing), or why the reconciler said it is "
    "degraded (health degraded)."
)


class DriftReport(_Out):
    """Per-reconciler drift-diff dump: which items diverged, what desired and actual were, and why."""

    ALWAYS = frozenset({"as_of", "last_ran_at"})

    reconciler: str = Field(description="The reconciler's stable name.")
    as_of: datetime | None = _rfc3339(_AS_OF, "asOf")
    last_ran_at: datetime | None = _rfc3339(_LAST_RAN, "lastRanAt")
    health: Health = Field(description=_HEALTH)
    error: str | SkipJsonSchema[None] = absent(_ERROR)
    drift: int = Field(ge=0, description="Diverged items, blocked_on_owner items excluded.")
    blocked: int = Field(ge=0, description="Items waiting on their owner (blocked_on_owner).")
    items_reported: bool = Field(
        alias="itemsReported",
        description="Whether this reconciler can report items at all; false with empty items carries no information.",
    )
    items: list[DriftItem] = Field(description="Every item diverged on the last executed pass, up to driftCap.")
    dropped: int = Field(ge=0, description="Items past driftCap, so a capped report is never mistaken for a complete one.")
    drift_cap: int = Field(alias="driftCap", ge=0, description="The per-pass cap on retained item detail.")
    coverage_reported: bool = Field(
        alias="coverageReported", description="Whether this reconciler reports work-query coverage at all."
    )
    coverage: list[CoverageEntry] = Field(description="The desired-state status histogram and what the work query selects.")
    coverage_error: str | SkipJsonSchema[None] = absent(
        "A failed coverage query, reported instead of failing the response.", "coverageError"
    )
    enabled: bool = Field(
        default=True,
        description="Whether the reconciler is switched on (`[reconcilers.NAME] enabled`). A disabled one runs no "
        "pass; its `health` is what its last pass left (`unknown` when it never ran).",
    )


class ReconcilerSummary(_Out):
    """One reconciler on the list surface."""

    ALWAYS = frozenset({"as_of", "last_ran_at"})

    name: str = Field(description="The reconciler's stable name.")
    health: Health = Field(description=_HEALTH)
    drift: int = Field(ge=0, description="Diverged items, blocked_on_owner items excluded.")
    blocked: int = Field(ge=0, description="Items waiting on their owner (blocked_on_owner).")
    as_of: datetime | None = _rfc3339(_AS_OF, "asOf")
    last_ran_at: datetime | None = _rfc3339(_LAST_RAN, "lastRanAt")
    items_reported: bool = Field(alias="itemsReported", description="Whether this reconciler can report items at all.")
    coverage_reported: bool = Field(
        alias="coverageReported", description="Whether this reconciler reports work-query coverage at all."
    )
    stranded: int = Field(ge=0, description="How many coverage rows are stranded.")
    error: str | SkipJsonSchema[None] = absent(_ERROR)
    enabled: bool = Field(
        description="Whether the reconciler is switched on (`[reconcilers.NAME] enabled`). A disabled one runs no "
        "pass; its `health` is what its last pass left (`unknown` when it never ran)."
    )


class BreakerBound(_Out):
    """One direction's circuit breaker: trip past ``count`` items, or past ``fraction`` of what exists."""

    count: int | SkipJsonSchema[None] = absent("Trip when more items than this would go this way.")
    fraction: float | SkipJsonSchema[None] = absent("Trip when more than this fraction of what exists would.")


class Breaker(_Out):
    """The circuit breaker of each direction that has one (absent: that direction is not held)."""

    restore: BreakerBound | SkipJsonSchema[None] = absent("Items to create again.")
    reap: BreakerBound | SkipJsonSchema[None] = absent("Items to delete.")
    align: BreakerBound | SkipJsonSchema[None] = absent("Items to change in place.")


class Backoff(_Out):
    """How many passes a failing item sits out: ``basePasses * 2**(failures-1)``, at most ``capPasses``."""

    base_passes: int = Field(alias="basePasses", ge=1)
    cap_passes: int = Field(alias="capPasses", ge=1)


class ReconcilerPolicy(_Out):
    """What judges a reconciler's items beside its drift report: whether it is on, its backoff and its breaker.

    The drift report says what diverged; this says which of it needs a human (an item parked at the backoff
    cap, a group the breaker holds): what ``datum drift`` prints beside the report, through the store or
    through the API alike.
    """

    reconciler: str = Field(description="The reconciler's stable name.")
    enabled: bool = Field(description="Whether it is switched on (`[reconcilers.NAME] enabled`).")
    backoff: Backoff = Field(description="`[reconcilers.NAME] backoff`.")
    breaker: Breaker = Field(description="`[reconcilers.NAME] breaker`, per direction that has one.")

    def thresholds(self) -> dict[Direction, Threshold]:
        bounds = {d: getattr(self.breaker, d.value) for d in Direction}
        return {d: Threshold(count=b.count, fraction=b.fraction) for d, b in bounds.items() if b is not None}

    def backoff_policy(self) -> BackoffPolicy:
        return BackoffPolicy(self.backoff.base_passes, self.backoff.cap_passes)

    def facts(self, report: DriftReport) -> Reconciler:
        """The reconciler as the attention decision reads it (``datum.core.attention.decide``)."""
        return Reconciler(report=report.dump(), enabled=self.enabled, backoff=self.backoff_policy(),
                          breaker=self.thresholds())


def reconciler_policy(registry: Registry, settings: Settings, name: str) -> ReconcilerPolicy:
    """Reconciler ``name``'s policy as configured (``NOT_FOUND`` for a name not registered)."""
    own = registry.settings(settings, name).converge_config()
    backoff = own.backoff
    return ReconcilerPolicy(
        reconciler=name,
        enabled=enabled(registry, settings, name),
        backoff=Backoff(base_passes=backoff.base_passes, cap_passes=backoff.cap_passes),
        breaker=Breaker.model_validate(
            {d.value: BreakerBound(count=t.count, fraction=t.fraction) for d, t in own.breaker.items()}
        ),
    )


def enabled(registry: Registry, settings: Settings, name: str) -> bool:
    """Whether reconciler ``name`` is switched on: its settings' ``enabled`` (a plugin that did not load: as configured)."""
    if name in registry:
        return registry.settings(settings, name).enabled
    return settings.reconcilers.get(name, {}).get("enabled", True) is not False


def broken_summary(name: str, why: str, enabled: bool = True) -> ReconcilerSummary:
    """The list row of an installed reconciler plugin that did not load: nothing is known of it."""
    return ReconcilerSummary(
        name=name,
        enabled=enabled,
        health=Health.UNKNOWN,
        drift=0,
        blocked=0,
        as_of=None,
        last_ran_at=None,
        items_reported=False,
        coverage_reported=False,
        stranded=0,
        error=f"the plugin did not load: {why}",
    )


def _retry_after(passes: int | None, anchor: datetime | None, interval: timedelta | None) -> datetime | None:
    if passes is None or anchor is None or interval is None:
        return None
    return anchor + passes * interval


def drift_report(
    registry: Registry, settings: Settings, store: Store, name: str, now: datetime
) -> DriftReport:
    """Assemble the drift report of ``name`` from the stored last pass and a live coverage query."""
    reconciler, own = registry.build(settings, name, store)
    with store.connect() as conn:
        run = load_run(conn, name)
    run = run or {}
    as_of = run.get("as_of")
    items = []
    for raw in run.get("items") or []:
        retry = _retry_after(raw.get("retry_after_passes"), as_of, own.interval)
        items.append(DriftItem.model_validate({**raw, "retry_after": retry}))
    coverage: list[CoverageEntry] = []
    coverage_error = None
    metrics = run.get("metrics") if isinstance(run.get("metrics"), dict) else {}
    specs = declared_coverage(reconciler)
    reported = metrics.get(COVERAGE) if specs is None else None
    if reported is not None:
        coverage = [CoverageEntry.model_validate(CoverageRow(**row), from_attributes=True) for row in reported]
    if specs is not None:
        try:
            coverage = [
                CoverageEntry.model_validate(row, from_attributes=True)
                for row in measure(store, specs, now)
            ]
        except Exception as exc:  # noqa: BLE001 - best effort, surfaced as coverageError
            coverage_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    hung = overrun(run.get("running_since"), now, own.interval, own.overrun_after)
    return DriftReport(
        reconciler=name,
        as_of=as_of,
        last_ran_at=run.get("last_ran_at"),
        # Before the first executed pass the row (if a skipped tick made one) holds
        # health `unknown` and zero counts, so the stored values stand either way.
        health=Health.FAILING if hung else Health(run.get("health", Health.UNKNOWN)),
        error=hung or run.get("error"),
        drift=run.get("drift", 0),
        blocked=run.get("blocked", 0),
        items_reported=_items_reported(declared_items_reported(reconciler), metrics),
        items=items,
        dropped=run.get("dropped", 0),
        drift_cap=own.drift_cap,
        coverage_reported=specs is not None or reported is not None,
        coverage=coverage,
        coverage_error=coverage_error,
        enabled=enabled(registry, settings, name),
    )


def _items_reported(declared: bool | None, metrics: dict[str, Any]) -> bool:
    """Declared by the reconciler, else whether its last completed pass reported items."""
    if declared is not None:
        return declared
    return bool(metrics.get(ITEMS_REPORTED, False))


def summary(report: DriftReport, *, enabled: bool) -> ReconcilerSummary:
    """One reconciler's line on the list surface, from its drift report and whether it is switched on."""
    return ReconcilerSummary(
        name=report.reconciler,
        enabled=enabled,
        health=report.health,
        drift=report.drift,
        blocked=report.blocked,
        as_of=report.as_of,
        last_ran_at=report.last_ran_at,
        items_reported=report.items_reported,
        coverage_reported=report.coverage_reported,
        stranded=sum(1 for c in report.coverage if c.stranded),
        error=report.error,
    )


def summaries(registry: Registry, settings: Settings, store: Store, now: datetime) -> list[ReconcilerSummary]:
    """The list surface: one line per registered reconciler, then one per plugin that did not load."""
    rows = [
        summary(drift_report(registry, settings, store, name, now), enabled=enabled(registry, settings, name))
        for name in registry
    ]
    return rows + [broken_summary(b.name, b.error, enabled(registry, settings, b.name)) for b in registry.broken]
