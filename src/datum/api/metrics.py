"""``/metrics``: Prometheus metrics read from the store at scrape time, so every server agrees.

A custom collector rather than counters updated in-process: with several
servers (PostgreSQL) or the CLI ticking reconcilers, only the store knows the
truth. A scrape costs one query for the run rows, two for the hosts (how many
there are; then their state, when their last pass finished, their agent's
interval, last report time and resource counts: the summary columns intake
writes, not their reports; with per-host series other than ``all``, only of
the hosts that are not converged and on time, the rest counted), two for the
hosts by group and state (the counts the store keeps, and the stale hosts'
groups: ``datum.store.hosts.group_counts``) and each reconciler's (cached)
drift report.

Series an alert reads are always there: every reason and direction of every
reconciler (0 when no item has it), every breaker direction, every coverage
row (stranded or not). ``contrib/prometheus/datum-rules.yml`` alerts on them.
Series per host are a choice (``[metrics] per_host``, ``per_host_mode``): every host's, only the
hosts that do not read ``converged`` (what the shipped alerts read), or none; the fleet-wide series
(``datum_hosts``, ``datum_fleet_*``) are always there, and so is ``datum_metrics_per_host``, which
says the mode in force so that the fleet-wide alerts fire only when the per-host ones cannot.
Series per host are bounded: ``datum_host_state`` and
``datum_host_seconds_since_last_report`` one each, ``datum_host_interval_seconds``
one for a host whose agent reports its interval, ``datum_host_resources``
one per resource state the host's last pass has (at most seven), and
``datum_host_awaiting_manual_reboot`` one while the host waits for a human's
reboot (``datum.core.handreboot``: the report is read only for the hosts
that read ``awaiting-reboot``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from datum.api.front.state import ServerState
from datum.config import MetricsSettings
from datum.core.attention import counts as need_counts
from datum.core.attention import decide
from datum.core.attention import reasons as attention_reasons
from datum.core.handreboot import BY_HAND, awaits_hand
from datum.core.memory import BackoffPolicy
from datum.core.vocab import Direction, Health, HostState, Reason, ResourceState, plugin_reasons
from datum.fleet.effective import unavailable
from datum.fleet.stale import stale
from datum.fleet.tls import Served
from datum.reconcile.attention import every
from datum.reconcile.report import DriftReport
from datum.store.hosts import FINISHED_AT, UPDATED_AT, group_counts, stale_hosts
from datum.store.hosts import hosts as hosts_table
from datum.store.runs import load_runs
from datum.store.scope import among, of_groups
from datum.store.status_counts import counts_table

_BACKING_OFF = frozenset({Reason.BACKOFF.value, Reason.APPLY_FAILED.value})


PER_HOST_MODES = ("all", "problems", "none")


def per_host_mode(settings: MetricsSettings, hosts: int) -> str:
    """The per-host series a scrape of ``hosts`` hosts carries: ``[metrics] per_host``, ``auto`` resolved."""
    if settings.per_host != "auto":
        return settings.per_host
    return "all" if hosts <= settings.per_host_limit else "problems"


def _gauge(name: str, doc: str, *labels: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _age(now: datetime, then: datetime | None) -> float | None:
    if then is None:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return max(0.0, (now - then).total_seconds())


class StoreCollector(Collector):
    """Reconciler and host metrics of one server state: of every host, or of ``groups``' hosts only (a scrape
    with a token scoped to host groups: every per-host and per-group series, and the counts, are theirs)."""

    def __init__(self, state: ServerState, groups: frozenset[str] | None = None) -> None:
        self.state = state
        self.groups = groups

    def collect(self) -> Iterator[Metric]:
        if self.state.tls is not None:
            yield self._tls(self.state.tls)
        if not self.state.ready:
            return
        yield from self._reconcilers()
        hosts: list[dict[str, Any]] = []
        yield from self._hosts(hosts)
        overdue: list[dict[str, Any]] = []
        yield from self._reboots(overdue)
        rollout: list[dict[str, Any]] = []
        yield from self._rollouts(rollout)
        yield self._needs(hosts, overdue, rollout[0] if rollout else None)

    @staticmethod
    def _tls(served: Served) -> Metric:
        """``datum_tls_cert_expiry_timestamp_seconds``: when the certificate the server presents expires
        (``cert="server"``), and the first of the others it presents (``cert="ca"``: with tls = "auto", Datum's CA)."""
        family = _gauge(
            "datum_tls_cert_expiry_timestamp_seconds",
            "When the certificate datum serve presents stops being valid (notAfter, Unix time): its own (cert=server), "
            "the first to expire of the rest of its chain (cert=ca). Reloaded on SIGHUP.",
            "cert",
        )
        family.add_metric(["server"], served.not_after.timestamp())
        if len(served.chain) > 1:
            family.add_metric(["ca"], min(c.not_after for c in served.chain[1:]).timestamp())
        return family

    def _needs(
        self, hosts: list[dict[str, Any]], overdue: list[dict[str, Any]], rollout: dict[str, Any] | None
    ) -> Metric:
        """``datum_needs_human``: the lines of *Needs a human* (``datum.core.attention``) over every host and
        the rollout in force (as ``_rollouts`` read it)."""
        registry, _store = self.state.wired()
        reports = [self.state.reports.get_sync(name).report for name in registry]
        directory = unavailable(self.state.settings.fleet.manifests)
        lines = decide(every(registry, self.state.settings, reports), hosts, overdue, rollout, directory)
        by = need_counts(lines)
        family = _gauge(
            "datum_needs_human",
            "Lines of the page's Needs a human (GET /v1/attention), by severity (look: someone has to act; check: "
            "check it is intended) and reason; every reason always present, 0 when none. Counts every host.",
            "severity", "reason",
        )
        for reason, severity in attention_reasons().items():
            family.add_metric([severity.value, reason], by[(severity.value, reason)])
        return family

    def _reconcilers(self) -> Iterator[Metric]:
        state = self.state
        registry, store = state.wired()
        now = state.clock()
        L = "reconciler"
        health = _gauge("datum_reconciler_health", "1 for the reconciler's current health rollup, 0 for the others.", L, "health")
        drift = _gauge("datum_reconciler_drift", "Items diverged on the last executed pass.", L)
        blocked = _gauge("datum_reconciler_blocked", "Items waiting on their owner (blocked_on_owner).", L)
        dropped = _gauge("datum_reconciler_dropped_items", "Items past driftCap on the last executed pass.", L)
        items = _gauge(
            "datum_reconciler_items",
            "Items of the last executed pass by reason and direction (0 when none), every diverged item "
            "including those past driftCap.",
            L, "reason", "direction",
        )
        at_cap = _gauge(
            "datum_reconciler_items_at_backoff_cap",
            "Items in backoff or apply_failed whose window has reached backoff cap_passes: parked, go and look.",
            L,
        )
        tripped = _gauge(
            "datum_reconciler_breaker_tripped",
            "1 when the direction's breaker refused to act on the last executed pass.", L, "direction",
        )
        threshold = _gauge(
            "datum_reconciler_breaker_threshold_items",
            "The direction's breaker count: more confirmed candidates than this trip it (absent: no count).",
            L, "direction",
        )
        fraction = _gauge(
            "datum_reconciler_breaker_threshold_fraction",
            "The direction's breaker fraction of the population (absent: no fraction).", L, "direction",
        )
        stranded_total = _gauge(
            "datum_reconciler_stranded_coverage_rows",
            "Coverage rows that are stranded: count > 0, not selected, not terminal, no owner.", L,
        )
        stranded = _gauge(
            "datum_reconciler_stranded_rows",
            "Desired-state rows in a stranded status (0 while the status is not stranded).", L, "kind", "status",
        )
        coverage = _gauge(
            "datum_reconciler_coverage_rows", "Desired-state rows by status.",
            L, "kind", "status", "selected", "terminal",
        )
        oldest = _gauge(
            "datum_reconciler_coverage_oldest_age_seconds", "Age of the oldest row in the status (0: none).",
            L, "kind", "status",
        )
        duration = _gauge("datum_reconciler_pass_duration_seconds", "Duration of the last executed pass.", L)
        last_ran = _gauge(
            "datum_reconciler_last_ran_timestamp_seconds", "When the last executed pass ran (Unix time).", L
        )
        since_pass = _gauge(
            "datum_reconciler_seconds_since_last_pass", "Seconds since the last executed pass (absent before one).", L
        )
        since_tick = _gauge(
            "datum_reconciler_seconds_since_last_tick",
            "Seconds since the last tick, executed or skipped (absent before one).", L,
        )
        interval = _gauge("datum_reconciler_interval_seconds", "The configured tick interval.", L)
        enabled = _gauge(
            "datum_reconciler_enabled",
            "1 when the reconciler is switched on ([reconcilers.NAME] enabled), 0 when it is off: a disabled one "
            "runs no pass, and its health stays what its last pass left.",
            L,
        )
        passes = CounterMetricFamily(
            "datum_reconciler_passes", "Ticks by outcome: executed or skipped.", labels=[L, "outcome"]
        )
        with store.connect() as conn:
            runs = load_runs(conn)
        for name in registry:
            report = state.reports.get_sync(name).report
            own = registry.settings(state.settings, name)
            run = runs.get(name) or {}
            for h in Health:
                health.add_metric([name, h.value], 1.0 if report.health == h else 0.0)
            drift.add_metric([name], report.drift)
            blocked.add_metric([name], report.blocked)
            dropped.add_metric([name], report.dropped)
            policy = BackoffPolicy(own.backoff.base_passes, own.backoff.cap_passes)
            by, trips, parked = _exact(run, report, policy)
            # The contract's reasons, and this reconciler's own (its plugin's namespace), never another's.
            own_reasons = [r for r in plugin_reasons() if r.namespace == name]
            for reason in [*Reason, *own_reasons]:
                for direction in Direction:
                    items.add_metric([name, reason.value, direction.value], by[(reason.value, direction.value)])
            at_cap.add_metric([name], parked)
            for direction in Direction:
                d = direction.value
                tripped.add_metric([name, d], 1.0 if d in trips else 0.0)
                t = getattr(own.breaker, d)
                if t is not None and t.count is not None:
                    threshold.add_metric([name, d], t.count)
                if t is not None and t.fraction is not None:
                    fraction.add_metric([name, d], t.fraction)
            stranded_total.add_metric([name], sum(1 for c in report.coverage if c.stranded))
            for c in report.coverage:
                stranded.add_metric([name, c.kind, c.status], c.count if c.stranded else 0)
                coverage.add_metric(
                    [name, c.kind, c.status, str(c.selected).lower(), str(c.terminal).lower()], c.count
                )
                oldest.add_metric([name, c.kind, c.status], c.oldest_age_seconds)
            if run.get("duration_seconds") is not None:
                duration.add_metric([name], run["duration_seconds"])
            if report.last_ran_at is not None:
                last_ran.add_metric([name], report.last_ran_at.timestamp())
            for family, at in ((since_pass, report.last_ran_at), (since_tick, report.as_of)):
                age = _age(now, at)
                if age is not None:
                    family.add_metric([name], age)
            interval.add_metric([name], own.interval.total_seconds())
            enabled.add_metric([name], 1.0 if own.enabled else 0.0)
            passes.add_metric([name, "executed"], run.get("executed_passes") or 0)
            passes.add_metric([name, "skipped"], run.get("skipped_passes") or 0)
        broken = _gauge(
            "datum_plugin_broken",
            "1 for each plugin that could not be loaded or whose routes are not served (datum reconcilers says why).",
            "plugin",
        )
        for name in sorted({*(b.name for b in registry.broken), *state.broken_routes}):
            broken.add_metric([name], 1.0)
        yield from (
            health, drift, blocked, dropped, items, at_cap, tripped, threshold, fraction, stranded_total,
            stranded, coverage, oldest, duration, last_ran, since_pass, since_tick, interval, enabled, passes, broken,
        )

    def _hosts(self, seen: list[dict[str, Any]]) -> Iterator[Metric]:
        """The host series; ``seen`` gets each host as ``datum.core.attention`` reads it (state, reason, reboot)."""
        _registry, store = self.state.wired()
        now = datetime.now(UTC)  # reports are stamped with the store's wall clock, not the app's
        t = hosts_table
        # The summary columns intake writes with each report, not the report. A row without a summary
        # (only a hand edit makes one: intake always writes it, migration 0007 filled the old rows) reads
        # its report's, in the same query; /v1/hosts has no such fallback.
        legacy = t.c.summary.is_(None)
        multiple = self.state.settings.fleet.stale_after
        # A host that is converged, reporting on time and summarized has nothing to say past its count:
        # unless every host's series are asked for, only the others are read (the scrape's cost grows
        # with the fleet's problems, not its size), the quiet ones counted in the same store.
        mine = of_groups(self.groups)
        scope = self.groups
        if scope is not None:  # how many of the groups' hosts, from the counts the database keeps by group
            total = sum(n for (group, _s), n in group_counts(store, multiple, now).items() if group in scope)
        with store.connect() as conn:
            late = stale_hosts(conn, multiple, now)
            problem = sa.or_(t.c.state != HostState.CONVERGED.value, legacy, *([late] if late is not None else []))
            if mine is None:  # how many hosts, from the counts the database keeps by state (not a count of every host)
                kept = counts_table(t.name)
                total = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(kept.c.n), 0))).scalar_one()
            mode = per_host_mode(self.state.settings.metrics, int(total))
            query = sa.select(
                t.c.host, t.c.state, UPDATED_AT,  # a time edited into nonsense reads None
                sa.case((legacy, t.c.report["counts"]), else_=t.c.summary["counts"]),
                FINISHED_AT,
                sa.case((legacy, t.c.report["intervalSeconds"].as_float()), else_=t.c.interval_seconds),
                t.c.reason,
                # The reboot only matters to a host awaiting one: the others' is not read.
                sa.case(
                    (t.c.state != HostState.AWAITING_REBOOT.value, sa.null()),
                    (legacy, t.c.report["reboot"]),
                    else_=t.c.summary["reboot"],
                ),
            )
            if mine is not None:
                query = query.where(mine)
            rows = conn.execute(query if mode == "all" else query.where(problem)).all()
        fleet = _gauge(
            "datum_hosts", "Hosts by state: of their last pass, or unknown when their agent fell silent.", "state"
        )
        per_host = _gauge(
            "datum_host_state",
            "1, with the host's state as a label: of its last pass, or unknown when its agent fell silent "
            "(as in /v1/hosts).",
            "host", "state",
        )
        since_report = _gauge("datum_host_seconds_since_last_report", "Seconds since the host's last pass was stored.", "host")
        resources = _gauge(
            "datum_host_resources", "Resources of the host's last pass by state (states it has none in are absent).",
            "host", "state",
        )
        every = _gauge(
            "datum_host_interval_seconds",
            "The interval the host's agent reports at (absent when its reports carry none: it has no schedule to "
            "miss). A host silent for more than datum_fleet_stale_after of them reads unknown.",
            "host",
        )
        by_hand = _gauge(
            "datum_host_awaiting_manual_reboot",
            "1 while the host awaits a reboot its agent will not do (reboot_policy manual or never): "
            "run datum reboot on it. Absent for the other hosts.",
            "host", "policy",
        )
        tally: Counter[str] = Counter({HostState.CONVERGED.value: int(total) - len(rows)})  # the quiet ones not read
        silent_hosts = 0
        by_hand_hosts: Counter[str] = Counter()
        for host, stored, updated, counts, finished, interval, reason, reboot in rows:
            # A host whose agent fell silent, or whose stored state is not a host state, reads unknown, as in
            # /v1/hosts and on the page (the same rule: datum.fleet.stale).
            row = {"state": stored, "finishedAt": finished, "report": {"intervalSeconds": interval}}
            read = stale(row, multiple, now)
            s = read["state"]
            s = s if s in HostState._value2member_map_ else HostState.UNKNOWN.value
            reboot = _json(reboot)
            seen.append({"host": host, "state": s, "stale": bool(read.get("stale")), "reason": read.get("reason", reason),
                         "reboot": reboot})
            tally[s] += 1
            silent_hosts += bool(read.get("stale"))
            policy = awaits_hand(s, reboot)
            if policy is not None:
                by_hand_hosts[policy] += 1
            if mode == "none" or (mode == "problems" and s == HostState.CONVERGED.value):
                continue
            per_host.add_metric([host, s], 1.0)
            age = _age(now, updated)
            if age is not None:
                since_report.add_metric([host], age)
            for rs, n in _counts(counts).items():
                resources.add_metric([host, rs], n)
            if isinstance(interval, int | float) and interval > 0:
                every.add_metric([host], float(interval))
            if policy is not None:
                by_hand.add_metric([host, policy], 1.0)
        for s in HostState:
            fleet.add_metric([s.value], tally[s.value])
        in_force = _gauge(
            "datum_metrics_per_host",
            "1 for the per-host series this scrape carries ([metrics] per_host, auto resolved): all, problems "
            "(hosts not converged) or none; 0 for the others.",
            "mode",
        )
        for m in PER_HOST_MODES:
            in_force.add_metric([m], 1.0 if m == mode else 0.0)
        fleet_stale = _gauge(
            "datum_fleet_stale_hosts", "Hosts silent for more than datum_fleet_stale_after of their intervals (they read unknown)."
        )
        fleet_stale.add_metric([], silent_hosts)
        fleet_by_hand = _gauge(
            "datum_fleet_awaiting_manual_reboot",
            "Hosts awaiting a reboot their agent will not do (reboot_policy manual or never): someone runs datum reboot.",
            "policy",
        )
        for policy_name in BY_HAND:
            fleet_by_hand.add_metric([policy_name], by_hand_hosts[policy_name])
        limit = _gauge(
            "datum_fleet_stale_after",
            "[fleet] stale_after: a host silent for more than this many of its agent's intervals reads unknown.",
        )
        limit.add_metric([], multiple)
        yield from (fleet, per_host, since_report, resources, every, by_hand, limit, in_force, fleet_stale, fleet_by_hand)
        yield self._groups(now)

    def _groups(self, now: datetime) -> Metric:
        """``datum_fleet_hosts{group,state}``: every group (nodes.yaml's, ``default``, any a host is in) by every
        state, 0 when none; from the counts the store keeps (``group_counts``), never a read of every host."""
        from datum.fleet.reboots import named_groups

        _registry, store = self.state.wired()
        settings = self.state.settings
        counts = group_counts(store, settings.fleet.stale_after, now)
        family = _gauge(
            "datum_fleet_hosts",
            "Hosts by group (nodes.yaml's group, recorded when the host reports; default when no rule gives one) "
            "and state (of their last pass, or unknown when their agent fell silent). Always present.",
            "group", "state",
        )
        for group in sorted(named_groups(settings.fleet) | {g for g, _s in counts}):
            if self.groups is not None and group not in self.groups:
                continue
            for s in HostState:
                family.add_metric([group, s.value], counts.get((group, s.value), 0))
        return family


    def _reboots(self, overdue_leases: list[dict[str, Any]]) -> Iterator[Metric]:
        """Per group of the reboot budget: hosts rebooting now, and leases past their timeout (into ``overdue_leases``)."""
        from datum.fleet.reboots import groups
        from datum.store.leases import read

        _registry, store = self.state.wired()
        fleet = self.state.settings.fleet
        leases = read(store, groups=self.groups)
        rebooting = _gauge(
            "datum_fleet_rebooting", "Hosts of the group holding a reboot lease (rebooting now).", "group"
        )
        overdue = _gauge(
            "datum_fleet_reboots_overdue",
            "Reboot leases past [fleet] reboot_timeout whose host has not reported from a new boot: go and look.",
            "group",
        )
        limit = _gauge("datum_fleet_reboot_concurrency", "[fleet] reboot_concurrency: hosts of a group rebooting at once.")
        waiting = _gauge(
            "datum_fleet_reboots_waiting",
            "Hosts of the group that asked for a reboot lease and wait (their ask still live): budget full, out of "
            "turn in reboot_order, halted or blocked.",
            "group",
        )
        unhealthy = _gauge(
            "datum_fleet_reboots_unhealthy",
            "Hosts of the group that reported from a new boot but not converged and healthy: their lease holds.",
            "group",
        )
        live, late = Counter(x.group for x in leases.rebooting), Counter(x.group for x in leases.overdue)
        asking = Counter(x.group for x in leases.waiting)
        sick = Counter(x.group for x in leases.all if x.unhealthy)
        overdue_leases.extend(x.as_json() for x in leases.overdue)
        for group in groups(fleet, leases):
            if self.groups is not None and group not in self.groups:
                continue
            rebooting.add_metric([group], live[group])
            overdue.add_metric([group], late[group])
            waiting.add_metric([group], asking[group])
            unhealthy.add_metric([group], sick[group])
        limit.add_metric([], fleet.reboot_concurrency)
        yield from (rebooting, overdue, limit, waiting, unhealthy)
        if fleet.reboot_block_query:
            from datum.fleet.promblock import refused
            from datum.fleet.reboots import block_shown

            blocked = _gauge(
                "datum_fleet_reboots_blocked",
                "1 while [fleet] reboot_block_query returns series (or Prometheus cannot be asked): no reboot lease "
                "is granted in any group.",
            )
            blocked.add_metric([], 1 if block_shown(fleet) else 0)
            refusals = CounterMetricFamily(
                "datum_fleet_reboot_grants_blocked",
                "Reboot lease asks this server refused because of [fleet] reboot_block_query, since it started.",
            )
            refusals.add_metric([], refused())
            yield from (blocked, refusals)


    def _rollouts(self, found: list[dict[str, Any]]) -> Iterator[Metric]:
        """The staged rollout in force (``datum.store.rollouts``): its state (every state always present, 1 for
        its own), its waves' hosts, and the hosts that failed on it while it is halted. One read by primary key,
        one grouped read of its plan; the row read goes into ``found`` (``_needs`` reads it)."""
        from dataclasses import asdict

        from datum.store import rollouts as stored

        _registry, store = self.state.wired()
        row = stored.latest(store) if self.state.settings.fleet.rollout is not None else None
        if row is not None and row.failed and self.groups is not None:  # the groups' hosts only
            from dataclasses import replace

            mine = among(store, [str(f["host"]) for f in row.failed], self.groups)
            row = replace(row, failed=[f for f in row.failed if f["host"] in mine])
        if row is not None:
            found.append(asdict(row))
        state = _gauge(
            "datum_rollout_state",
            "The staged rollout in force ([fleet.rollout]) is in this state (1), every state listed; all 0 without one.",
            "state",
        )
        for name in stored.STATES:
            state.add_metric([name], 1.0 if row is not None and row.state == name else 0.0)
        wave = _gauge("datum_rollout_wave", "The last wave the rollout in force released (0: the canaries).")
        hosts = _gauge(
            "datum_rollout_hosts",
            "Hosts of each wave of the rollout in force (0: the canaries): planned, and of those converged or failed "
            "on its revision (failed: or silent since a pass on it), or silent before any (not waited for), or failing "
            "with the failure a resume accepted (accepted).",
            "wave", "status",
        )
        failed = _gauge(
            "datum_rollout_failed_host",
            "While the rollout in force is halted: each host that failed on its revision (1), with its last pass's reason.",
            "host", "reason",
        )
        if row is not None:
            wave.add_metric([], row.wave)
            if row.previous is not None:
                for c in stored.wave_counts(store, row, self.state.settings.fleet.stale_after):
                    hosts.add_metric([str(c.wave), "planned"], c.hosts)
                    hosts.add_metric([str(c.wave), "converged"], c.converged)
                    hosts.add_metric([str(c.wave), "failed"], c.failed)
                    hosts.add_metric([str(c.wave), "silent"], c.silent)
                    hosts.add_metric([str(c.wave), "accepted"], c.accepted)
            if row.state == stored.HALTED:
                for f in row.failed or []:
                    failed.add_metric([str(f["host"]), str(f["reason"])[:200]], 1.0)
        behind = _gauge(
            "datum_fleet_directory_behind",
            "1 while this server's fleet directory holds a revision first seen before the rollout in force's (a "
            "lagging copy): the store refuses to roll it out, and this server serves as the rollout says.",
        )
        behind.add_metric([], 1.0 if self.state.fleet.rollouts.behind is not None else 0.0)
        yield from (state, wave, hosts, failed, behind)


def _exact(
    run: dict[str, Any], report: DriftReport, policy: BackoffPolicy
) -> tuple[Counter[tuple[str, str]], set[str], int]:
    """The last executed pass's items by (reason, direction), its tripped directions, its items at the backoff cap.

    From the run row's ``metrics`` (every diverged item, written with the pass);
    a row written before migration 0005 has none until its next pass, and reads
    the retained items meanwhile.
    """
    stored = run.get("metrics")
    if not isinstance(stored, dict):
        by = Counter((i.reason.value, i.direction.value) for i in report.items)
        parked = sum(
            1
            for i in report.items
            if i.reason.value in _BACKING_OFF and i.failures and policy.at_cap(i.failures)
        )
        return by, {d for r, d in by if r == Reason.CIRCUIT_BREAKER.value}, parked
    exact: Counter[tuple[str, str]] = Counter()
    items = stored.get("items")
    for reason, per in items.items() if isinstance(items, dict) else ():
        for direction, n in per.items() if isinstance(per, dict) else ():
            if isinstance(n, int) and not isinstance(n, bool):
                exact[(str(reason), str(direction))] += n
    tripped = stored.get("tripped")
    parked = stored.get("atBackoffCap")
    return (
        exact,
        {str(d) for d in tripped} if isinstance(tripped, list) else set(),
        parked if isinstance(parked, int) and not isinstance(parked, bool) else 0,
    )


def _json(raw: Any) -> Any:
    """A JSON value a query returned: parsed already, or text (a dialect that hands it back as text)."""
    if isinstance(raw, str | bytes):
        try:
            return json.loads(raw)
        except ValueError:
            return None
    return raw


def _counts(raw: Any) -> dict[str, float]:
    """A report's ``counts`` as numbers per resource state; anything unreadable is left out."""
    if not isinstance(raw, dict):
        return {}
    return {
        k: float(v)
        for k, v in raw.items()
        if k in ResourceState._value2member_map_ and isinstance(v, int | float) and not isinstance(v, bool) and v > 0
    }


def metrics_registry(state: ServerState, groups: frozenset[str] | None = None) -> CollectorRegistry:
    """A registry of its own per app, so two apps in one process (tests) never collide; of ``groups``' hosts only
    when given (made for each scrape of a token scoped to host groups)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(state, groups))
    registry.register(state.fleet.intake.received)  # the process's own (datum.fleet.counters)
    registry.register(state.fleet.intake.seconds)
    return registry
