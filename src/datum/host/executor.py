"""One pass over a manifest: every resource walks pending -> applying -> converged | failed.

Resources run in requirement order. A resource whose requirement failed or is
blocked is ``blocked`` and names what blocked it; a resource no provider
supports here is ``skipped``, and so is one under the read-only ``/usr`` of an
image-mode host that differs (reason ``image_mode``); in observe mode nothing
is applied and a difference is ``drifted``. After applying, the provider
observes again and the resource is ``failed`` unless that confirms the result.
The changes of a batch (a package manager's packages, ``Provider.batch``) walked
one after the other are applied together, in one transaction (``run_pass``).

Directory fsyncs a provider deferred (``File``'s atomic writes) are made before
any other resource is applied and before the pass returns: a pass's outcomes,
and the report built from them, never get ahead of what is durable.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from datum.core.vocab import Action, Mode, Reason, ResourceState
from datum.host.model import Manifest, Resource
from datum.providers.base import Change, HostContext, Provider, ProviderError
from datum.providers.fs import in_read_only_image, sync_dirs
from datum.providers.reads import Untrusted
from datum.providers.registry import provider

if TYPE_CHECKING:
    from datum.host.compiled import HostConfig

# (position, total, resource id, state) for a progress display.
Progress = Callable[[int, int, str, ResourceState], None]

# Fault injection for the suite (never set by Datum): called with each resource after its
# observe and plan and before its apply, where an ordinary user's swap of a file for a link,
# an account added by useradd, a held lock or a kill must be survived.
between_observe_and_apply: Callable[[Resource], None] | None = None

_BAD = (ResourceState.FAILED, ResourceState.BLOCKED)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one resource did on this pass, as the executor left it: it never changes once made
    (``datum.host.verdict`` reads the pass's outcomes into the host's state and report)."""

    resource: Resource
    action: Action = Action.NONE
    state: ResourceState = ResourceState.PENDING
    changed: bool = False
    reason: str | None = None
    error: str | None = None
    blocked_by: tuple[str, ...] | None = None
    diff: str | None = None
    sensitive: bool = False  # its diff was withheld; the report says so
    reboot_required: str | None = None
    duration_seconds: float = 0.0

    @property
    def id(self) -> str:
        return self.resource.id

    def replace(self, **changes: Any) -> Outcome:
        """A copy with ``changes`` (each step of a resource's walk makes the next outcome)."""
        return replace(self, **changes)


def _error(exc: BaseException, ctx: HostContext) -> str:
    """A resource's failure in the words of its pass line; a refused link's owner named as the root
    names it (``accounts.named``), whichever step refused it."""
    if isinstance(exc, Untrusted):
        from datum.providers.accounts import named

        return named(ctx, exc)
    if isinstance(exc, ProviderError):
        return str(exc)
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or type(exc).__name__}:{where}".rstrip(":")
    return f"{type(exc).__name__}: {exc}"


@dataclass(slots=True)
class PassResult:
    """What a pass produced: the report (JSON form), its outcomes, the exit code, the reboot
    decision and warnings; the configuration and state file it ran with (for delivery); the
    signal that asked it to stop, when one came, even after its last resource (``datum agent``
    then ends its loop); and the reboot markers the state file keeps as stale after it
    (``datum.host.reboot``: the idle pass keeps no entry while there are any)."""

    report: dict[str, Any]
    outcomes: list[Outcome]
    exit_code: int
    reboot_now: bool = False
    warnings: list[str] = field(default_factory=list)
    config: HostConfig | None = None
    state_path: str | None = None
    signal: str | None = None
    stale_markers: dict[str, int] = field(default_factory=dict)


def run_pass(
    manifest: Manifest,
    ctx: HostContext,
    progress: Progress | None = None,
    stop: Callable[[], bool] | None = None,
    changing: Callable[[], None] | None = None,
) -> list[Outcome]:
    """Walk the manifest once; return every resource's outcome in the order walked.

    ``stop()`` is asked before each resource: once it is true (SIGTERM), the
    walk ends there and the resources not reached stay ``pending``. ``changing()``
    is called before each change is applied (the pass lock makes its record
    durable on the first: ``datum.host.lock.Lease.mark_changing``).

    A change whose provider names a batch (``Provider.batch``: a package manager's
    transaction) waits, planned, for the next resource of its type that changes: the
    changes of one batch walked one after the other are applied together, before any
    resource of another type is even observed, so nothing else sees the host between
    them. A stop drops a batch not yet applied: its resources stay ``pending``.
    """
    ordered = manifest.ordered()
    if ctx.manifest is None:
        ctx.manifest = manifest  # a Directory purge keeps every path the manifest touches
    done: dict[str, Outcome] = {}
    unsupported: dict[str, str | None] = {}
    total = len(ordered)
    waiting: list[_Planned] = []  # the batch planned and not applied yet

    def settle() -> None:
        for held, out in zip(waiting, _act(waiting, ctx, progress, changing), strict=True):
            done[out.id] = out
            if progress:
                progress(held.position, held.total, out.id, out.state)
        waiting.clear()

    try:
        for position, resource in enumerate(ordered, 1):
            if stop is not None and stop():
                for held in waiting:
                    done[held.planned.id] = Outcome(held.planned.resource)  # never applied: not reached
                waiting.clear()
                break
            if waiting and resource.type != waiting[0].planned.resource.type:
                settle()  # another type observes the host only once the batch is applied
            started = time.perf_counter()
            walked = _walk(resource, done, unsupported, ctx)
            took = time.perf_counter() - started
            if isinstance(walked, _Planned):
                walked = replace(walked, position=position, total=total, took=took)
                if waiting and walked.batch != waiting[0].batch:
                    settle()  # a change of no batch, or of another, waits for none
                if walked.batch is not None:
                    waiting.append(walked)
                    done[resource.id] = walked.planned  # pending: what needs it waits with it
                    if progress:
                        progress(position, total, resource.id, walked.planned.state)
                    continue
                out = _act([walked], ctx, progress, changing)[0]
            else:
                out = walked.replace(duration_seconds=took)
            done[resource.id] = out
            if progress:
                progress(position, total, resource.id, out.state)
        if waiting:
            settle()
    finally:
        sync_dirs()  # the renames of this pass are durable before anyone reads its outcomes
    return [done.get(r.id) or Outcome(r) for r in ordered]


@dataclass(frozen=True, slots=True)
class _Planned:
    """A change planned in enforce mode and not applied yet: what applying it needs, the batch it may
    join (``Provider.batch``), where it was walked and how long its planning took."""

    prov: Provider[Any, Any, Any]
    want: Any
    have: Any
    change: Change
    planned: Outcome
    batch: str | None
    position: int = 0
    total: int = 0
    took: float = 0.0


def _walk(
    resource: Resource,
    done: dict[str, Outcome],
    unsupported: dict[str, str | None],
    ctx: HostContext,
) -> Outcome | _Planned:
    """What ``resource`` does on this pass, given the outcomes ``done`` before it: its outcome, or the
    change to apply (``_act``)."""
    named = resource.needs
    needs = [done[n] for n in dict.fromkeys(named)] if named else []
    bad = [n for n in needs if n.state in _BAD]
    if bad:
        return Outcome(
            resource,
            state=ResourceState.BLOCKED,
            blocked_by=tuple(n.id for n in bad),
            reason=", ".join(f"{n.id} {n.state.value}" for n in bad),
        )
    prov = provider(resource.type)
    if resource.type not in unsupported:
        unsupported[resource.type] = prov.supported(ctx)
    if unsupported[resource.type]:
        return Outcome(resource, state=ResourceState.SKIPPED, reason=unsupported[resource.type])
    try:
        want = prov.desired(resource.name, resource.spec, ctx)
        have = prov.observe(want, ctx)
        change = prov.plan(want, have)
    except Exception as exc:  # noqa: BLE001 - any provider error fails this resource, not the pass
        drifted = [n.id for n in needs if n.state is ResourceState.DRIFTED]
        if ctx.mode is Mode.OBSERVE and drifted:
            # Its requirement is not in place yet, so it cannot be observed: that is drift, not failure.
            why = f"waits on drifted {', '.join(drifted)}: {_error(exc, ctx)}"
            return Outcome(resource, state=ResourceState.DRIFTED, reason=why)
        return _failed(resource, _error(exc, ctx))
    refresh = [n.id for n in needs if _would_change(n, ctx) and n.id in resource.spec.subscribes] if needs else None
    if refresh and prov.refreshable and change.action is Action.NONE:
        verb = "would change" if ctx.mode is Mode.OBSERVE else "changed"
        change = prov.refresh(want, have, f"{', '.join(refresh)} {verb}")
    planned = Outcome(resource, action=change.action, diff=change.diff, sensitive=change.sensitive)
    if change.action is Action.NONE:
        return planned.replace(state=ResourceState.CONVERGED)
    if in_read_only_image(str(ctx.root), prov.paths(resource.spec)):
        # It changes only with a new image: reported, never written nor failed.
        return planned.replace(state=ResourceState.SKIPPED, reason=Reason.IMAGE_MODE.value)
    if ctx.mode is Mode.OBSERVE:
        return planned.replace(state=ResourceState.DRIFTED, reason=change.summary)
    return _Planned(prov, want, have, change, planned, prov.batch(want))


def _act(
    planned: list[_Planned], ctx: HostContext, progress: Progress | None, changing: Callable[[], None] | None
) -> list[Outcome]:
    """Apply one change, or one batch's changes together, and confirm each: their outcomes."""
    if progress:
        for p in planned:
            progress(p.position, p.total, p.planned.id, ResourceState.APPLYING)
    if changing:
        changing()
    first = planned[0]
    if not first.prov.defers_dir_sync:
        sync_dirs()  # nothing else acts (runs a command, say) while a rename is not yet durable
    if between_observe_and_apply is not None:
        for p in planned:
            between_observe_and_apply(p.planned.resource)
    started = time.perf_counter()
    if len(planned) == 1:
        outs = [_apply(first.prov, first.want, first.have, first.change, ctx, first.planned)]
    else:
        outs = _apply_together(planned, ctx)
    each = (time.perf_counter() - started) / len(planned)  # one transaction's time, shared
    return [out.replace(duration_seconds=p.took + each) for p, out in zip(planned, outs, strict=True)]


def _failed(resource: Resource, error: str) -> Outcome:
    return Outcome(resource, state=ResourceState.FAILED, error=error, reason=error)


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
    planned: Outcome,
) -> Outcome:
    """Apply ``change`` and confirm it: ``planned`` converged, or failed saying why."""
    reboot_required = None
    try:
        try:
            reboot_required = prov.apply(want, have, change, ctx)
        finally:
            ctx.changed()
        unconfirmed = prov.verify(want, change, ctx)
    except Exception as exc:  # noqa: BLE001 - recorded as this resource's failure
        why = _error(exc, ctx)
        return planned.replace(state=ResourceState.FAILED, error=why, reason=why, reboot_required=reboot_required)
    # What it found (a service stopped), in enforce mode as in observe mode.
    applied = planned.replace(changed=True, reboot_required=reboot_required, reason=change.summary)
    if unconfirmed:
        return applied.replace(state=ResourceState.FAILED, error=unconfirmed, reason=unconfirmed)
    return applied.replace(state=ResourceState.CONVERGED)


def _apply_together(planned: list[_Planned], ctx: HostContext) -> list[Outcome]:
    """Apply one batch's changes at once (``Provider.apply_together``) and confirm each: a failure of
    the whole (one transaction) fails every one of them with its words; a failure of one, that one."""
    prov = planned[0].prov
    try:
        try:
            results = prov.apply_together([(p.want, p.have, p.change) for p in planned], ctx)
        finally:
            ctx.changed()
    except Exception as exc:  # noqa: BLE001 - recorded as each resource's failure
        why = _error(exc, ctx)
        return [p.planned.replace(state=ResourceState.FAILED, error=why, reason=why) for p in planned]
    outs = []
    for p, result in zip(planned, results, strict=True):
        if isinstance(result, Exception):
            why = _error(result, ctx)
            outs.append(p.planned.replace(state=ResourceState.FAILED, error=why, reason=why))
            continue
        try:
            unconfirmed = prov.verify(p.want, p.change, ctx)
        except Exception as exc:  # noqa: BLE001
            why = _error(exc, ctx)
            outs.append(p.planned.replace(state=ResourceState.FAILED, error=why, reason=why, reboot_required=result))
            continue
        applied = p.planned.replace(changed=True, reboot_required=result, reason=p.change.summary)
        if unconfirmed:
            applied = applied.replace(state=ResourceState.FAILED, error=unconfirmed, reason=unconfirmed)
        outs.append(applied if unconfirmed else applied.replace(state=ResourceState.CONVERGED))
    return outs
