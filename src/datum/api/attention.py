"""What needs a human, as the server reads it: the inputs of ``datum.core.attention.decide``, gathered once.

The page's *Needs a human* (``/ui/overview``) and ``GET /v1/attention`` call
``needs`` with the same reports and the same worst hosts (the page's first
``MAX_HOSTS``, worst first); ``/metrics`` calls ``decide`` over every host.
None of them decides anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from datum.api.models import Attention, NeedLine, host_summary
from datum.config import Settings
from datum.core.attention import Need, decide
from datum.core.vocab import HostState
from datum.fleet import listing
from datum.fleet.effective import unavailable
from datum.fleet.rollouts.canaries import attention_of
from datum.reconcile.attention import every
from datum.reconcile.registry import Registry
from datum.reconcile.report import DriftReport
from datum.store import Store
from datum.store.leases import Leases
from datum.store.leases import read as read_leases
from datum.store.scope import among
from datum.web import view


@dataclass(frozen=True)
class Needs:
    """The lines, whether hosts were considered, and how many hosts needing a look are past the ones considered."""

    lines: list[Need]
    hosts: bool
    hosts_not_listed: int = 0

    def model(self) -> Attention:
        return Attention(
            needs=[NeedLine.model_validate(n.to_json()) for n in self.lines],
            hosts=self.hosts,
            hosts_not_listed=self.hosts_not_listed or None,
        )


def worst_hosts(
    store: Store, settings: Settings, now: datetime | None = None, groups: frozenset[str] | None = None
) -> listing.Page:
    """The hosts the decision considers: the page's first ``view.MAX_HOSTS``, worst first, and the fleet's counts
    (of ``groups``' hosts only, when given: a token scoped to host groups)."""
    order = [s.value for s in view.HOST_ORDER]
    return listing.worst_first(
        store, settings.fleet.stale_after, now or datetime.now(UTC), order, view.MAX_HOSTS, groups
    )


def needs(
    registry: Registry,
    settings: Settings,
    reports: list[DriftReport],
    hosts: listing.Page | None,
    leases: Leases | None = None,
    store: Store | None = None,
    groups: frozenset[str] | None = None,
) -> Needs:
    """The decision over ``reports`` and, when the viewer may read hosts, the ``hosts`` page, overdue reboots
    (of ``groups``' hosts only, when given) and a halted or paused rollout."""
    reconcilers = every(registry, settings, reports)
    directory = unavailable(settings.fleet.manifests)
    if hosts is None:
        return Needs(decide(reconcilers, fleet_directory=directory), hosts=False)
    if leases is None:
        assert store is not None
        leases = read_leases(store, groups=groups)
    rows = [host_summary(r).dump() for r in hosts.hosts]
    ro = attention_of(store, settings.fleet.rollout is not None) if store is not None else None
    if ro is not None and groups is not None and store is not None and ro.get("failed"):  # its groups' hosts only
        mine = among(store, [str(f["host"]) for f in ro["failed"]], groups)
        ro = {**ro, "failed": [f for f in ro["failed"] if f["host"] in mine]}
    lines = decide(reconcilers, rows, [x.as_json() for x in leases.overdue], ro, directory)
    listed = sum(1 for r in rows if r["state"] != HostState.CONVERGED.value)
    beyond = sum(n for s, n in hosts.counts.items() if s != HostState.CONVERGED.value) - listed
    return Needs(lines, hosts=True, hosts_not_listed=max(0, beyond))
