"""What the attention decision (``datum.core.attention``) reads of the registered reconcilers.

The pure core takes a drift report's JSON and the policy that judges its items;
this fills both in from the registry and the configuration, so every caller (the
server's page, API and metrics; the CLI's ``datum drift``, ``datum status``) hands
the decision the same facts.
"""

from __future__ import annotations

from collections.abc import Iterable

from datum.config import Settings
from datum.core.attention import Reconciler
from datum.reconcile.registry import Registry
from datum.reconcile.report import DriftReport, enabled, reconciler_policy


def facts(registry: Registry, settings: Settings, report: DriftReport) -> Reconciler:
    """One registered reconciler as the decision reads it: its report, whether it is on, its backoff and breaker
    (``ReconcilerPolicy``: what ``datum drift`` reads through the API too)."""
    return reconciler_policy(registry, settings, report.reconciler).facts(report)


def broken(registry: Registry, settings: Settings) -> list[Reconciler]:
    """The reconciler plugins that did not load, as the decision reads them."""
    return [
        Reconciler(report={"reconciler": b.name}, enabled=enabled(registry, settings, b.name), broken=b.error)
        for b in registry.broken
    ]


def every(registry: Registry, settings: Settings, reports: Iterable[DriftReport]) -> list[Reconciler]:
    """``reports`` (one per registered reconciler), then the plugins that did not load."""
    return [*(facts(registry, settings, r) for r in reports), *broken(registry, settings)]
