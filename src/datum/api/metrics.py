"""``/metrics``: Prometheus metrics read from the store at scrape time, so every server agrees.

A custom collector rather than counters updated in-process: with several
servers (PostgreSQL) or the CLI ticking reconcilers, only the store knows the
truth. A scrape costs one query for the run rows, one grouped query for host
states and each reconciler's (cached) drift report.
"""

from __future__ import annotations

from collections.abc import Iterator

import sqlalchemy as sa
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from datum.api.state import ServerState
from datum.core.vocab import Health, HostState, Reason
from datum.store.hosts import hosts as hosts_table
from datum.store.runs import load_runs


class StoreCollector(Collector):
    """Reconciler and host metrics of one server state."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        state = self.state
        if not state.ready:
            return
        registry, store = state.wired()
        health = GaugeMetricFamily(
            "datum_reconciler_health", "1 for the reconciler's current health rollup, 0 for the others.",
            labels=["reconciler", "health"],
        )
        drift = GaugeMetricFamily("datum_reconciler_drift", "Items diverged on the last executed pass.", labels=["reconciler"])
        blocked = GaugeMetricFamily(
            "datum_reconciler_blocked", "Items waiting on their owner (blocked_on_owner).", labels=["reconciler"]
        )
        dropped = GaugeMetricFamily(
            "datum_reconciler_dropped_items", "Items past driftCap on the last executed pass.", labels=["reconciler"]
        )
        items = GaugeMetricFamily(
            "datum_reconciler_items", "Diverged items on the last executed pass, by reason.", labels=["reconciler", "reason"]
        )
        stranded = GaugeMetricFamily(
            "datum_reconciler_stranded_coverage_rows",
            "Coverage rows that are stranded: count > 0, not selected, not terminal, no owner.",
            labels=["reconciler"],
        )
        coverage = GaugeMetricFamily(
            "datum_reconciler_coverage_rows", "Desired-state rows by status.", labels=["reconciler", "kind", "status", "selected"]
        )
        duration = GaugeMetricFamily(
            "datum_reconciler_pass_duration_seconds", "Duration of the last executed pass.", labels=["reconciler"]
        )
        last_ran = GaugeMetricFamily(
            "datum_reconciler_last_ran_timestamp_seconds", "When the last executed pass ran (Unix time).", labels=["reconciler"]
        )
        passes = CounterMetricFamily(
            "datum_reconciler_passes", "Ticks by outcome: executed or skipped.", labels=["reconciler", "outcome"]
        )
        with store.connect() as conn:
            runs = load_runs(conn)
            host_counts = dict(
                conn.execute(sa.select(hosts_table.c.state, sa.func.count()).group_by(hosts_table.c.state)).all()
            )
        for name in registry:
            report = state.reports.get_sync(name).report
            run = runs.get(name) or {}
            for h in Health:
                health.add_metric([name, h.value], 1.0 if report.health == h else 0.0)
            drift.add_metric([name], report.drift)
            blocked.add_metric([name], report.blocked)
            dropped.add_metric([name], report.dropped)
            reasons = run.get("reasons") or {}
            for reason in Reason:
                if reason.value in reasons:
                    items.add_metric([name, reason.value], reasons[reason.value])
            stranded.add_metric([name], sum(1 for c in report.coverage if c.stranded))
            for c in report.coverage:
                coverage.add_metric([name, c.kind, c.status, str(c.selected).lower()], c.count)
            if run.get("duration_seconds") is not None:
                duration.add_metric([name], run["duration_seconds"])
            if report.last_ran_at is not None:
                last_ran.add_metric([name], report.last_ran_at.timestamp())
            passes.add_metric([name, "executed"], run.get("executed_passes") or 0)
            passes.add_metric([name, "skipped"], run.get("skipped_passes") or 0)
        yield from (health, drift, blocked, dropped, items, stranded, coverage, duration, last_ran, passes)
        states = GaugeMetricFamily("datum_hosts", "Hosts by the state of their last pass.", labels=["state"])
        # A stored state that is not a host state reads unknown, as in /v1/hosts.
        odd = sum(n for k, n in host_counts.items() if k not in HostState._value2member_map_)
        for s in HostState:
            states.add_metric([s.value], host_counts.get(s.value, 0) + (odd if s is HostState.UNKNOWN else 0))
        yield states


def metrics_registry(state: ServerState) -> CollectorRegistry:
    """A registry of its own per app, so two apps in one process (tests) never collide."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(state))
    return registry
