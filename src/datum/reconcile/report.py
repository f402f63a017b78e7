"""The drift report of contract section 5, and the list surface, as pydantic models.

The same models serve ``datum drift --json`` and the HTTP API. A field the
contract marks optional is absent, never null, where it does not apply; the
fields it always promises are always there, and ``asOf`` / ``lastRanAt`` are
null only before the first tick (there is no tick to name yet).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from datum.config import Settings
from datum.core.vocab import Direction, Health, Reason
from datum.reconcile.coverage import measure
from datum.reconcile.registry import Registry
from datum.store import Store
from datum.store.runs import load_run


class _Out(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    # Fields always present, null when unknown; every other None is left out.
    ALWAYS: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _absent_not_null(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
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

    kind: str
    direction: Direction
    id: str
    streak: int
    confirmations_needed: int = Field(alias="confirmationsNeeded")
    reason: Reason
    last_err: str | None = Field(default=None, alias="lastErr")
    desired: str | None = None
    actual: str | None = None
    failures: int | None = None
    retry_after_passes: int | None = Field(default=None, alias="retryAfterPasses")
    retry_after: datetime | None = Field(default=None, alias="retryAfter")


class CoverageEntry(_Out):
    """How many desired-state rows sit in one status, and whether the work query selects it."""

    kind: str
    status: str
    count: int
    selected: bool
    terminal: bool
    owned_by: str | None = Field(default=None, alias="ownedBy")
    oldest_age_seconds: float = Field(alias="oldestAgeSeconds")
    stranded: bool


class DriftReport(_Out):
    """Per-reconciler drift-diff dump."""

    ALWAYS = frozenset({"as_of", "last_ran_at"})

    reconciler: str
    as_of: datetime | None = Field(default=None, alias="asOf")
    last_ran_at: datetime | None = Field(default=None, alias="lastRanAt")
    health: Health
    error: str | None = None
    drift: int
    blocked: int
    items_reported: bool = Field(alias="itemsReported")
    items: list[DriftItem]
    dropped: int
    drift_cap: int = Field(alias="driftCap")
    coverage_reported: bool = Field(alias="coverageReported")
    coverage: list[CoverageEntry]
    coverage_error: str | None = Field(default=None, alias="coverageError")


class ReconcilerSummary(_Out):
    """One reconciler on the list surface."""

    ALWAYS = frozenset({"as_of", "last_ran_at"})

    name: str
    health: Health
    drift: int
    blocked: int
    as_of: datetime | None = Field(default=None, alias="asOf")
    last_ran_at: datetime | None = Field(default=None, alias="lastRanAt")
    items_reported: bool = Field(alias="itemsReported")
    coverage_reported: bool = Field(alias="coverageReported")
    stranded: int
    error: str | None = None


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
    specs = reconciler.coverage
    if specs is not None:
        try:
            coverage = [
                CoverageEntry.model_validate(row, from_attributes=True)
                for row in measure(store, specs, now)
            ]
        except Exception as exc:  # noqa: BLE001 - best effort, surfaced as coverageError
            coverage_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return DriftReport(
        reconciler=name,
        as_of=as_of,
        last_ran_at=run.get("last_ran_at"),
        # Before the first executed pass the row (if a skipped tick made one) holds
        # health `unknown` and zero counts, so the stored values stand either way.
        health=Health(run.get("health", Health.UNKNOWN)),
        error=run.get("error"),
        drift=run.get("drift", 0),
        blocked=run.get("blocked", 0),
        items_reported=reconciler.items_reported,
        items=items,
        dropped=run.get("dropped", 0),
        drift_cap=own.drift_cap,
        coverage_reported=specs is not None,
        coverage=coverage,
        coverage_error=coverage_error,
    )


def summary(report: DriftReport) -> ReconcilerSummary:
    """One reconciler's line on the list surface, from its drift report."""
    return ReconcilerSummary(
        name=report.reconciler,
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
    """The list surface: one line per registered reconciler."""
    return [summary(drift_report(registry, settings, store, name, now)) for name in registry]
