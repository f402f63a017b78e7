"""One pass over a manifest: every resource walks pending -> applying -> converged | failed.

Resources run in requirement order. A resource whose requirement failed or is
blocked is ``blocked`` and names what blocked it; a resource no provider
supports here is ``skipped``, and so is one under the read-only ``/usr`` of an
image-mode host that differs (reason ``image_mode``); in observe mode nothing
is applied and a difference is ``drifted``. After applying, the provider
observes again and the resource is ``failed`` unless that confirms the result.

Directory fsyncs a provider deferred (``File``'s atomic writes) are made before
any other resource is applied and before the pass returns: a pass's outcomes,
and the report built from them, never get ahead of what is durable.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from datum.core.vocab import Action, Mode, Reason, ResourceState
from datum.host.model import Manifest, Resource
from datum.providers.base import Change, HostContext, Provider, ProviderError
from datum.providers.fs import in_read_only_image, sync_dirs
from datum.providers.registry import provider
from datum.providers.value import Value

# (position, total, resource id, state) for a progress display.
Progress = Callable[[int, int, str, ResourceState], None]

_BAD = (ResourceState.FAILED, ResourceState.BLOCKED)


class Outcome(Value):
    """What one resource did on this pass."""

    __slots__ = (
        "resource", "action", "state", "changed", "reason", "error", "blocked_by", "diff", "sensitive",
        "reboot_required", "duration_seconds",
    )  # fmt: skip
    resource: Resource
    action: Action
    state: ResourceState
    changed: bool
    reason: str | None
    error: str | None
    blocked_by: list[str] | None
    diff: str | None
    sensitive: bool  # its diff was withheld; the report says so
    reboot_required: str | None
    duration_seconds: float

    def __init__(
        self,
        resource: Resource,
        action: Action = Action.NONE,
        state: ResourceState = ResourceState.PENDING,
        changed: bool = False,
        reason: str | None = None,
        error: str | None = None,
        blocked_by: list[str] | None = None,
        diff: str | None = None,
        sensitive: bool = False,
        reboot_required: str | None = None,
        duration_seconds: float = 0.0,
    ) -> None:
        self.resource = resource
        self.action = action
        self.state = state
        self.changed = changed
        self.reason = reason
        self.error = error
        self.blocked_by = blocked_by
        self.diff = diff
        self.sensitive = sensitive
        self.reboot_required = reboot_required
        self.duration_seconds = duration_seconds

    @property
    def id(self) -> str:
        return self.resource.id

    def as_report(self) -> dict[str, Any]:
        """The ``ResourceReport`` JSON form: absent fields absent."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": self.resource.type,
            "name": self.resource.name,
            "action": self.action.value,
            "state": self.state.value,
            "changed": self.changed,
            "durationSeconds": round(self.duration_seconds, 6),
        }
        for key, value in (
            ("reason", self.reason),
            ("error", self.error),
            ("blockedBy", self.blocked_by),
            ("diff", self.diff),
            ("sensitive", True if self.sensitive else None),
            ("rebootRequired", self.reboot_required),
        ):
            if value is not None:
                out[key] = value
        return out


def _error(exc: BaseException) -> str:
    if isinstance(exc, ProviderError):
        return str(exc)
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or type(exc).__name__}:{where}".rstrip(":")
    return f"{type(exc).__name__}: {exc}"


def run_pass(
    manifest: Manifest,
    ctx: HostContext,
    progress: Progress | None = None,
    stop: Callable[[], bool] | None = None,
) -> list[Outcome]:
    """Walk the manifest once; return every resource's outcome in the order walked.

    ``stop()`` is asked before each resource: once it is true (SIGTERM), the
    walk ends there and the resources not reached stay ``pending``.
    """
    ordered = manifest.ordered()
    if ctx.manifest is None:
        ctx.manifest = manifest  # a Directory purge keeps every path the manifest touches
    outcomes = {r.id: Outcome(r) for r in ordered}
    unsupported: dict[str, str | None] = {}
    total = len(ordered)
    try:
        for position, resource in enumerate(ordered, 1):
            if stop is not None and stop():
                break
            out = outcomes[resource.id]
            started = time.perf_counter()
            announce = partial(progress, position, total, resource.id) if progress else None
            _walk(resource, out, outcomes, unsupported, ctx, announce)
            out.duration_seconds = time.perf_counter() - started
            if progress:
                progress(position, total, resource.id, out.state)
    finally:
        sync_dirs()  # the renames of this pass are durable before anyone reads its outcomes
    return [outcomes[r.id] for r in ordered]


def _walk(
    resource: Resource,
    out: Outcome,
    outcomes: dict[str, Outcome],
    unsupported: dict[str, str | None],
    ctx: HostContext,
    announce: Callable[[ResourceState], Any] | None,
) -> None:
    named = resource.needs
    needs = [outcomes[n] for n in dict.fromkeys(named)] if named else []
    bad = [n for n in needs if n.state in _BAD]
    if bad:
        out.state = ResourceState.BLOCKED
        out.blocked_by = [n.id for n in bad]
        out.reason = ", ".join(f"{n.id} {n.state.value}" for n in bad)
        return
    prov = provider(resource.type)
    if resource.type not in unsupported:
        unsupported[resource.type] = prov.supported(ctx)
    if unsupported[resource.type]:
        out.state = ResourceState.SKIPPED
        out.reason = unsupported[resource.type]
        return
    try:
        want = prov.desired(resource.name, resource.spec, ctx)
        have = prov.observe(want, ctx)
        change = prov.plan(want, have)
    except Exception as exc:  # noqa: BLE001 - any provider error fails this resource, not the pass
        drifted = [n.id for n in needs if n.state is ResourceState.DRIFTED]
        if ctx.mode is Mode.OBSERVE and drifted:
            # Its requirement is not in place yet, so it cannot be observed: that is drift, not failure.
            out.state = ResourceState.DRIFTED
            out.reason = f"waits on drifted {', '.join(drifted)}: {_error(exc)}"
            return
        out.state = ResourceState.FAILED
        out.error = _error(exc)
        out.reason = out.error
        return
    refresh = [n.id for n in needs if _would_change(n, ctx) and n.id in resource.spec.subscribes] if needs else None
    if refresh and prov.refreshable and change.action is Action.NONE:
        verb = "would change" if ctx.mode is Mode.OBSERVE else "changed"
        change = prov.refresh(want, have, f"{', '.join(refresh)} {verb}")
    out.action = change.action
    out.diff = change.diff
    out.sensitive = change.sensitive
    if change.action is Action.NONE:
        out.state = ResourceState.CONVERGED
        return
    if in_read_only_image(str(ctx.root), prov.paths(resource.spec)):
        out.state = ResourceState.SKIPPED  # it changes only with a new image: reported, never written
        out.reason = Reason.IMAGE_MODE.value
        return
    if ctx.mode is Mode.OBSERVE:
        out.state = ResourceState.DRIFTED
        out.reason = change.summary
        return
    out.state = ResourceState.APPLYING
    if announce:
        announce(out.state)
    if not prov.defers_dir_sync:
        sync_dirs()  # nothing else acts (runs a command, say) while a rename is not yet durable
    _apply(prov, want, have, change, ctx, out)


def _would_change(need: Outcome, ctx: HostContext) -> bool:
    """Whether a requirement changed; in observe mode (plan), whether apply would change it."""
    if ctx.mode is Mode.OBSERVE:
        return need.state is ResourceState.DRIFTED and need.action is not Action.NONE
    return need.changed


def _apply(
    prov: Provider[Any, Any, Any],
    want: Any,
    have: Any,
    change: Change,
    ctx: HostContext,
    out: Outcome,
) -> None:
    try:
        try:
            out.reboot_required = prov.apply(want, have, change, ctx)
        finally:
            ctx.changed()
        unconfirmed = prov.verify(want, change, ctx)
    except Exception as exc:  # noqa: BLE001 - recorded as this resource's failure
        out.state = ResourceState.FAILED
        out.error = _error(exc)
        out.reason = out.error
        return
    out.changed = True
    out.reason = change.summary  # what it found (a service stopped), in enforce mode as in observe
    if unconfirmed:
        out.state = ResourceState.FAILED
        out.error = unconfirmed
        out.reason = unconfirmed
        return
    out.state = ResourceState.CONVERGED
