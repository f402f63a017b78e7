"""Rollups: resource states to a host state, pass outcomes to a reconciler health."""

from __future__ import annotations

from collections.abc import Iterable

from datum.core.vocab import Health, HostState, ResourceState


def host_state(
    states: Iterable[ResourceState] | None,
    *,
    awaiting_reboot: bool = False,
) -> HostState:
    """The host state of the contract: the first rule that matches.

    ``states`` is None when no pass has completed or its report cannot be read.
    """
    if states is None:
        return HostState.UNKNOWN
    seen = set(states)
    if ResourceState.FAILED in seen or ResourceState.BLOCKED in seen:
        return HostState.FAILED
    if ResourceState.DRIFTED in seen:
        return HostState.DRIFTED
    if awaiting_reboot:
        return HostState.AWAITING_REBOOT
    if ResourceState.SKIPPED in seen:
        return HostState.DEGRADED
    unfinished = {ResourceState.PENDING, ResourceState.APPLYING}
    if seen & unfinished:
        return HostState.UNKNOWN
    return HostState.CONVERGED


def reconciler_health(*, executed: bool, completed: bool, degrading: bool) -> Health:
    """A reconciler's health from its last executed pass.

    ``executed``: a pass has executed at all. ``completed``: it could read
    desired and actual state and finish. ``degrading``: an item is in backoff or
    apply_failed, a breaker tripped, or items wait on suppressed_unconfigured.
    """
    if not executed:
        return Health.UNKNOWN
    if not completed:
        return Health.FAILING
    return Health.DEGRADED if degrading else Health.OK
