"""Rollups: resource states to a host state, pass outcomes to a reconciler health."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from datum.core.humanize import age
from datum.core.vocab import ROLLUP, Health, HostState, ResourceState


def called_for(
    states: Iterable[ResourceState], *, awaiting_reboot: bool = False, unhealthy: bool = False
) -> list[HostState]:
    """Every host state a pass's resource ``states`` call for, first rule first (``datum.core.vocab.ROLLUP``): the
    first is the host's state (``host_state``), each one's ``exit_bit`` is in the pass's exit code
    (``datum.host.verdict``), and ``datum explain`` reads a pasted line's resource words with it
    (``datum.core.phrases``). ``awaiting_reboot`` calls for ``awaiting-reboot``, ``unhealthy`` for ``degraded``;
    ``converged`` is called for by nothing: it is what is left."""
    seen = set(states)
    flagged = {HostState.AWAITING_REBOOT: awaiting_reboot, HostState.DEGRADED: unhealthy}
    return [s for s, behind, _bit in ROLLUP if seen & behind or flagged.get(s, False)]


def host_state(
    states: Iterable[ResourceState] | None,
    *,
    awaiting_reboot: bool = False,
    unhealthy: bool = False,
) -> HostState:
    """The host state of the contract: the first rule that matches (``called_for``).

    ``states`` is None when no pass has completed or its report cannot be read. ``unhealthy``: the host is back
    from a reboot made under a fleet's lease and its health check (or ``post_reboot``) has not passed (the
    report's ``health``, ``datum.core.budget.unhealthy``): ``degraded``, as a host that skipped resources is,
    from the first check that fails until one passes.
    """
    if states is None:
        return HostState.UNKNOWN
    called = called_for(states, awaiting_reboot=awaiting_reboot, unhealthy=unhealthy)
    return called[0] if called else HostState.CONVERGED


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


def overrun(running_since: datetime | None, now: datetime, interval: timedelta, after: timedelta) -> str | None:
    """Why a reconciler reads ``failing`` while its pass has run past ``after`` (hung, or its process
    gone mid-pass), or None. ``running_since``: when the unfinished pass claimed the reconciler."""
    if running_since is None or now - running_since <= after:
        return None
    return (
        f"a pass has been running for {age((now - running_since).total_seconds())} "
        f"(interval {age(interval.total_seconds())}, pass_timeout {age(after.total_seconds())}): "
        "hung, or its process stopped mid-pass"
    )
