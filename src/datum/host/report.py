"""The pass report of one host: what each resource did and the state the host reached.

The same model is printed by ``datum apply --json``, persisted in the store,
posted by an agent to ``POST /v1/hosts/{host}/passes`` and served by
``GET /v1/hosts/{host}``. Fields that do not apply are absent, never null: an
optional field is typed as its value with ``absent`` as its default
(``datum.wire``), so it is None in Python when absent and an explicit
``null`` is refused, as the OpenAPI document says.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from datum.core.vocab import Action, HostState, Mode, RebootPolicy, ResourceState
from datum.wire import Text, absent

MAX_INTERVAL = timedelta.max.total_seconds()
# The times a pass may say it started and finished at: a clock outside them is wrong (a host with no RTC back at
# 1970, a typo'd date), and the server refuses the report at the field rather than sort its history by it.
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC)


def _plausible(t: datetime) -> datetime:
    if not EARLIEST <= (t if t.tzinfo else t.replace(tzinfo=UTC)) < LATEST:
        raise ValueError(
            f"{t.isoformat()} is not between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (UTC): the host's clock is "
            "wrong; set it (NTP) and its next pass reports"
        )
    return t


PassTime = Annotated[datetime, AfterValidator(_plausible)]


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
    changed: bool = Field(default=False, description="Whether the pass changed it.")
    reason: str = absent("Why it is failed, blocked, skipped or drifted; what it found when it changed.")
    error: str = absent("The error of a failed resource.")
    blocked_by: list[str] = absent("What a blocked resource waits on (resources that failed or are blocked).", "blockedBy")
    diff: str = absent("What differs (observe mode, plan).")
    sensitive: bool = absent("The content diff was withheld (a file not world-readable, or sensitive: true).")
    reboot_required: str = absent("Why this change needs a reboot.", "rebootRequired")
    duration_seconds: float = Field(default=0.0, alias="durationSeconds", ge=0)


class RebootAttempt(_Model):
    """A reboot already made for a newer kernel that came back to another one: no policy reboots for it again."""

    kernel: str = Field(description="The newer kernel the reboot was for.")
    requested_at: datetime = Field(alias="requestedAt", description="When the reboot command ran.")
    boot_id: str = Field(alias="bootId", description="The boot the reboot was requested in.")


class RebootStatus(_Model):
    """A reboot the host needs: why, and what the policy makes of it."""

    required: bool
    reason: str = absent("Why: the changes and markers behind the need.")
    policy: RebootPolicy
    boot_id: str = absent("The boot the need was found in.", "bootId")
    action: str = absent("What the agent did or will do about it.")
    requested_at: datetime = absent("When the agent ran the reboot command in this boot.", "requestedAt")
    markers: dict[str, int] = absent("Reboot-required marker files seen, by path, with their mtime in ns.")
    kernel: str = absent("The newer kernel in /boot behind the need.")
    attempted: RebootAttempt = absent(
        "The reboot already made for this kernel that came back to another one: no policy reboots for it again."
    )


class RebootHealth(_Model):
    """Back from a reboot made under a fleet's reboot lease: whether the host is healthy again (``datum agent``)."""

    ok: bool = Field(description="The health check (`[host] health_check`, `health_url`) and `post_reboot` passed.")
    detail: str = absent("What passed, or what failed and why (a hook's program and output tail).", max_length=1000)


class PassReport(_Model):
    """One completed pass of the host agent."""

    host: Text = Field(min_length=1, max_length=253, description="The host's name (no NUL: it is a key of the store).")
    mode: Mode
    state: HostState
    reason: str = absent("The resources behind a state that is not converged.")
    started_at: PassTime = Field(alias="startedAt", description="When the pass started: 1970 to 2199 (UTC).")
    finished_at: PassTime = Field(alias="finishedAt", description="When the pass finished: 1970 to 2199 (UTC).")
    duration_seconds: float = Field(alias="durationSeconds", ge=0)
    boot_id: str = absent("The boot id the pass ran under.", "bootId")
    manifest: str = absent("The manifest file the pass ran (datum apply).")
    exit_code: int = Field(alias="exitCode", ge=0, le=255)
    incomplete: bool = absent(
        "True when the pass was stopped (SIGTERM) before every resource was reached; "
        "those are left pending and the host state is unknown."
    )
    counts: dict[ResourceState, int] = Field(default_factory=dict)
    reboot: RebootStatus = absent("The reboot the host needs, when a change needs one.")
    health: RebootHealth = absent(
        "Back from a reboot under a reboot lease, with a health check or post_reboot configured: their result. "
        "Until it is ok the host is `degraded`, its reason saying why (`came back unhealthy: ...`); the server "
        "frees the host's reboot lease only on a converged report whose health is ok."
    )
    pass_id: str = absent("The pass's id (a UUID), set by `datum agent`.", "passId", max_length=64)
    seq: int = absent(
        "The agent's per-host sequence number: a report never replaces one with a higher number.", ge=0, le=2**62
    )
    manifest_digest: str = absent(
        "The digest of the effective manifest the pass ran (`sha256:...`), as the server's ETag.",
        "manifestDigest", max_length=100,
    )
    revision: str = absent(
        "The fleet directory's revision the manifest was served from (the server's `Datum-Revision`): its git "
        "commit, `<commit>+dirty.<hex>` for a work tree with changes, else `sha256:<hex>` of its files.",
        "revision", max_length=100,
    )
    manifest_origin: str = absent(
        "Where `datum agent` got the manifest: `server`, or `cached: <why the server's was not fetched>`.",
        "manifestOrigin", max_length=500,
    )
    interval_seconds: float = absent(
        "The agent's interval; a host silent for more than `[fleet] stale_after` of them reads unknown. At "
        "most the longest interval an agent can be given (`datum agent --interval`, a Python timedelta).",
        "intervalSeconds", ge=0, le=MAX_INTERVAL,
    )
    resources: list[ResourceReport] = Field(default_factory=list)
