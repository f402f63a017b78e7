"""When a staged rollout starts and moves on, as one server process drives it.

A server that sees a new revision (``started``, from
``datum.fleet.serving.served``) keeps its snapshot (``snapshot``) and starts
its rollout with its wave plan (``plan``), once per revision per process.
``tick`` advances or halts the rollout under way: the transitions themselves
are the store's conditional updates (``datum.store.rollouts.begin``,
``check``), so replicas deciding at once change a rollout once. It runs after
the pass of a host on the rolling revision (``after_pass``, from
``datum.fleet.intake``; at most every ``INTAKE_GAP`` seconds per process, the check loop
then woken for the end of the gap) and
every ``CHECK_EVERY`` seconds in ``datum serve``, so a soak ends without a
report. What moved is read back into this process's memory at once
(``serve.refresh``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from datum.core.findings import Problem
from datum.fleet.revision import Revision
from datum.fleet.rollouts.serve import configured, in_force, refresh
from datum.fleet.server import FleetServer
from datum.store import rollouts as stored
from datum.store.rollouts import DONE, RolloutRow
from datum.store.snapshots import keep, kept

log = logging.getLogger("datum.api")

CHECK_EVERY = 2.0  # the most seconds between two checks of the rollout under way in ``datum serve``
SOONEST = 0.02  # the least: a soak ending now is checked after this
INTAKE_GAP = 0.5  # the least time between two checks made on a pass's intake, per process


def _planner(server: FleetServer, directory: Path) -> stored.Planner:
    """Each host's (wave, group) as ``plan`` decides them, with the groups of the fleet directory's rules now."""
    from datum.fleet.effective import rules_now
    from datum.fleet.nodes import Rules, group_of
    from datum.fleet.reboots import DEFAULT_GROUP
    from datum.fleet.rollouts.plan import plan

    settings = server.settings.fleet.rollout
    assert settings is not None
    try:
        rules = rules_now(directory)  # never of a nodes.yaml half written
    except Problem:
        rules = Rules()

    def planner(revision: str, known: Mapping[str, str]) -> dict[str, tuple[int, str]]:
        # a known host's group as intake recorded it (nodes.yaml by its name and labels); a canary named by hand
        # that never reported: the same rule's
        def group(host: str) -> str:
            return known.get(host) or group_of(rules, host) or DEFAULT_GROUP

        return plan(revision, known, group, settings.canary, settings.waves)

    return planner


def started(server: FleetServer, current: Revision, directory: Path) -> None:
    """``current`` is the directory's revision now: keep its snapshot, start its rollout (once; blocking)."""
    if not configured(server) or server.rollouts.begun == current.id:
        return
    from datum.fleet.effective import held_still
    from datum.fleet.revision import still_named
    from datum.fleet.rollouts.snapshot import TooLarge, capture

    settings = server.settings.fleet.rollout
    assert settings is not None and server.store is not None
    blob = None
    if not kept(server.store, current.id):  # read before the lock: refresh() waits on it in every request
        try:
            files, blob = held_still(directory, lambda _state: capture(directory))
        except TooLarge as exc:
            log.warning("revision %s is not kept: %s", current.id, exc)
        else:
            if files != still_named(directory, current):  # the files kept are not the revision's
                log.info("revision %s moved on before its files were kept: no rollout of it", current.id)
                return
    with server.rollouts.lock:
        if server.rollouts.begun == current.id:
            return
        if blob is not None and not kept(server.store, current.id):
            keep(server.store, current.id, blob)
        try:
            row = stored.begin(
                server.store, current.id, len(settings.waves), _planner(server, directory), server.settings.fleet.stale_after,
                after=_order_in_git(server, current, directory),
            )
        except stored.Behind as exc:
            log.warning("%s", exc)  # once per revision this process sees: begun is set below
            server.rollouts.behind, row = current.id, None
        else:
            server.rollouts.behind = None
        if row is not None:
            log.info("rollout %d of revision %s: %s (from %s)", row.id, row.revision, row.state, row.previous)
            if row.previous is not None and row.state != DONE and not kept(server.store, row.previous):
                log.warning("revision %s has no snapshot: the hosts the rollout of %s holds back are answered 503 "
                            "and keep the manifest they have", row.previous, row.revision)
        server.rollouts.begun = current.id
        refresh(server)


def _order_in_git(server: FleetServer, current: Revision, directory: Path) -> str | None:
    """What git proves of the directory's commit against the one in force: ``stored.Behind`` when it is an
    ancestor (a copy that lags at a commit the store never saw: a pull that fetched and did not check out); the
    revision in force when it descends from it (the directory is ahead, whatever order the store first saw
    the two in: a lagging replica's revision that began before it must not pin it out); else None."""
    from datum.fleet.revision import ancestor_of, descends_from

    assert server.store is not None
    row = stored.latest(server.store)
    if row is None or row.revision == current.id or stored.put_back(row, current.id):
        return None
    if ancestor_of(directory, current, row.revision):
        raise stored.Behind(current.id, f"commit {current.commit} is an ancestor of revision {row.revision}", row)
    return row.revision if descends_from(directory, current, row.revision) else None


def tick(server: FleetServer) -> RolloutRow | None:
    """Advance or halt the rollout under way (blocking); the row when it moved. Never raises."""
    if not configured(server):
        return None
    settings = server.settings.fleet.rollout
    assert settings is not None and server.store is not None
    server.rollouts.checked_at = time.monotonic()
    try:
        moved = stored.check(server.store, settings.soak, settings.max_failed, server.settings.fleet.stale_after)
    except Exception:  # noqa: BLE001 - checked again at the next tick
        log.exception("checking the rollout failed")
        return None
    if moved is not None:
        log.info("rollout %d of revision %s: %s, wave %d of %d", moved.id, moved.revision, moved.state,
                 moved.wave, moved.last_wave)
    refresh(server)  # a wave completed now starts its soak: ``next_check`` reads when it ends from the row
    return moved


def next_check(server: FleetServer) -> float:
    """Seconds until ``datum serve`` checks the rollout in force again: ``CHECK_EVERY``, or sooner when its
    soak ends before that (the wave is released when the soak ends, not up to a period later). From the row
    this process last read, never a read of the store; a transition made elsewhere wakes the loop
    (``serve.announce``)."""
    row = server.rollouts.row
    settings = server.settings.fleet.rollout
    if row is None or settings is None or row.state != stored.ROLLING or row.wave_completed_at is None:
        return CHECK_EVERY
    left = (row.wave_completed_at + settings.soak - datetime.now(UTC)).total_seconds()
    return min(CHECK_EVERY, max(SOONEST, left + SOONEST))  # just after it ends: the store's clock says when


def after_pass(server: FleetServer, revision: str | None) -> None:
    """A pass was stored: check the rollout when the pass ran its revision (at most every ``INTAKE_GAP``). One
    that comes sooner has the check loop run once the gap is over: the last pass of a wave is never left for
    the loop's next period (``CHECK_EVERY``), which held each wave of a rollout with no soak up to 2 s more."""
    if revision is None or not configured(server):
        return
    row = in_force(server)
    if row is None or row.state != stored.ROLLING or row.revision != revision:
        return
    since = time.monotonic() - server.rollouts.checked_at
    if since < INTAKE_GAP:
        server.rollouts.wake_check(INTAKE_GAP - since)
        return
    tick(server)
