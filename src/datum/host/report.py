"""The pass report of one host: what each resource did and the state the host reached.

The same model is printed by ``datum apply --json``, persisted in the store,
posted by an agent to ``POST /v1/hosts/{host}/passes`` and served by
``GET /v1/hosts/{host}``. Fields that do not apply are absent, never null.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from datum.core.vocab import Action, HostState, Mode, RebootPolicy, ResourceState


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    def dump(self) -> dict[str, Any]:
        """The JSON form: camelCase, absent fields absent."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ResourceReport(_Model):
    """One resource on one pass."""

    id: str = Field(description="The resource's identity, Type[name].", max_length=1000)
    type: str = Field(max_length=100)
    name: str = Field(max_length=900)
    action: Action = Field(description="What the plan intended.")
    state: ResourceState = Field(description="What the resource reached.")
    changed: bool = False
    reason: str | None = Field(
        default=None,
        description="Why it is failed, blocked, skipped or drifted; what it found when it changed.",
    )
    error: str | None = None
    blocked_by: list[str] | None = Field(default=None, alias="blockedBy")
    diff: str | None = Field(default=None, description="What differs (observe mode, plan).")
    sensitive: bool | None = Field(
        default=None,
        description="The content diff was withheld (a file not world-readable, or sensitive: true).",
    )
    reboot_required: str | None = Field(
        default=None, alias="rebootRequired", description="Why this change needs a reboot."
    )
    duration_seconds: float = Field(default=0.0, alias="durationSeconds", ge=0)


class RebootStatus(_Model):
    """A reboot the host needs: why, and what the policy makes of it."""

    required: bool
    reason: str | None = None
    policy: RebootPolicy
    boot_id: str | None = Field(
        default=None, alias="bootId", description="The boot the need was found in."
    )
    action: str | None = Field(default=None, description="What the agent did or will do about it.")
    requested_at: datetime | None = Field(
        default=None,
        alias="requestedAt",
        description="When the agent ran the reboot command in this boot.",
    )
    markers: dict[str, int] | None = Field(
        default=None,
        description="Reboot-required marker files seen, by path, with their mtime in ns.",
    )
    kernel: str | None = Field(default=None, description="The newer kernel in /boot behind the need.")
    attempted: dict[str, str] | None = Field(
        default=None,
        description="The reboot already made for this kernel that came back to another one "
        "(kernel, requestedAt, bootId): no policy reboots for it again.",
    )


class PassReport(_Model):
    """One completed pass of the host agent."""

    host: str = Field(min_length=1, max_length=253)
    mode: Mode
    state: HostState
    reason: str | None = None
    started_at: datetime = Field(alias="startedAt")
    finished_at: datetime = Field(alias="finishedAt")
    duration_seconds: float = Field(alias="durationSeconds", ge=0)
    boot_id: str | None = Field(default=None, alias="bootId")
    manifest: str | None = None
    exit_code: int = Field(alias="exitCode", ge=0, le=255)
    incomplete: bool | None = Field(
        default=None,
        description="True when the pass was stopped (SIGTERM) before every resource was reached; "
        "those are left pending and the host state is unknown.",
    )
    counts: dict[ResourceState, int] = Field(default_factory=dict)
    reboot: RebootStatus | None = None
    pass_id: str | None = Field(
        default=None, alias="passId", max_length=64, description="The pass's id (a UUID), set by `datum agent`."
    )
    seq: int | None = Field(
        default=None, ge=0, le=2**62,
        description="The agent's per-host sequence number: a report never replaces one with a higher number.",
    )
    manifest_digest: str | None = Field(
        default=None, alias="manifestDigest", max_length=100,
        description="The digest of the effective manifest the pass ran (`sha256:...`), as the server's ETag.",
    )
    manifest_origin: str | None = Field(
        default=None, alias="manifestOrigin", max_length=500,
        description="Where `datum agent` got the manifest: `server`, or `cached: <why the server's was not fetched>`.",
    )
    interval_seconds: float | None = Field(
        default=None, alias="intervalSeconds", ge=0,
        description="The agent's interval; a host silent for a few of them reads unknown.",
    )
    resources: list[ResourceReport] = Field(default_factory=list)
