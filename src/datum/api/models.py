"""The HTTP schema of the hosts and buckets endpoints (the drift report's lives in ``reconcile.report``).

Fields that do not apply are absent, never null, as everywhere in the contract.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from datum.core.vocab import HostState, ResourceState
from datum.host.report import PassReport, ResourceReport


class _Out(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class HostStatus(_Out):
    """A host's persisted state: the rollup of its last pass, why when it is not converged, and the pass."""

    host: str
    state: HostState
    reason: str | None = Field(default=None, description="The resources behind a non-converged state.")
    boot_id: str | None = Field(default=None, alias="bootId")
    finished_at: datetime | None = Field(default=None, alias="finishedAt", description="When the last pass finished.")
    updated_at: datetime = Field(alias="updatedAt", description="When the server stored the last pass.")
    attention: list[ResourceReport] = Field(
        default_factory=list, description="The resources of the last pass that are not converged."
    )
    report: PassReport | None = Field(
        default=None, description="The last pass report; absent when it cannot be read (state unknown)."
    )


class Bucket(_Out):
    """One bucket's desired state."""

    name: str
    status: str = Field(description="creating, active, deleting, delete_blocked or deleted.")
    created_at: datetime | None = Field(default=None, alias="createdAt")
    updated_at: datetime | None = Field(default=None, alias="updatedAt")


class Status(_Out):
    """A probe's answer."""

    status: str


def host_status(row: dict[str, Any]) -> HostStatus:
    """The API's view of a stored host row (``store.hosts``).

    A stored report that no longer reads as a ``PassReport`` makes the host
    ``unknown`` (contract section 2), with the reason saying so.
    """
    values: dict[str, Any] = {
        "host": row["host"],
        "state": row["state"],
        "reason": row.get("reason"),
        "bootId": row.get("bootId"),
        "finishedAt": row.get("finishedAt"),
        "updatedAt": row["updatedAt"],
    }
    try:
        report = PassReport.model_validate(row.get("report") or {})
    except ValidationError as exc:
        values.update(state=HostState.UNKNOWN, reason=f"the last pass report cannot be read ({exc.error_count()} errors)")
        report = None
    if report is not None:
        values["attention"] = [r for r in report.resources if r.state != ResourceState.CONVERGED]
    return HostStatus.model_validate({**values, "report": report})
