"""Staged rollouts in the server: which revision each host is served, and when a rollout moves on.

One decision, ``revision_for(state, host, facts)``: the revision whose files a
host's effective manifest is composed from (the manifest route, its fast
answer and the long poll all ask it; ``Datum-Revision`` names what it chose).
Without ``[fleet.rollout]`` it is the directory as it is now, as before
rollouts existed. With it, the rollout in force (``datum.store.rollouts``,
the newest row, read at most once per ``FRESH`` seconds per process) decides:

- ``done`` (or none yet): its revision;
- ``rolling``, ``paused``, ``halted``: the new revision to the hosts of the
  released waves (``datum.fleet.rollouts.plan``), the previous to the rest, unless
  the host's effective manifest is the same in both (digests compared): then
  the new one, so an unchanged host is never held back;
- ``aborted``: the previous revision, to everyone.

A revision that is not the directory's current one is composed from its
snapshot (``datum.fleet.rollouts.snapshot``), written under ``<home>/revisions``.

A server that sees a new revision (``started``, from ``datum.api.revisions.served``)
keeps its snapshot and starts its rollout. ``tick`` advances or halts it
(``datum.store.rollouts.check``): after the pass of a host on the rolling
revision (at most every ``INTAKE_GAP`` seconds per process) and every
``CHECK_EVERY`` seconds in ``datum serve``, so a soak ends without a report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datum.core.findings import Problem
from datum.fleet.effective import Effective, directory_of, effective
from datum.fleet.revision import Revision
from datum.store import rollouts as stored
from datum.store.rollouts import ABORTED, DONE, RolloutRow
from datum.store.snapshots import keep, kept, load

if TYPE_CHECKING:
    from datum.api.front.state import ServerState

log = logging.getLogger("datum.api")

FRESH = 0.25  # seconds the rollout in force is trusted before it is read again (one read by primary key)
CHECK_EVERY = 2.0  # seconds between two checks of the rollout under way in ``datum serve``
INTAKE_GAP = 0.5  # the least time between two checks made on a pass's intake, per process
SETTLED_FRESH = 2 * FRESH  # how old a read of the rollout in force the fast answer trusts (the watch's period and more)


def configured(state: ServerState) -> bool:
    fleet = state.settings.fleet
    return fleet.rollout is not None and fleet.manifests is not None and state.store is not None


def refresh(state: ServerState) -> bool:
    """Read the rollout in force; True when it moved since the last read (the long poll then asks again)."""
    if not configured(state):
        return False
    assert state.store is not None
    began = time.monotonic()  # the row is as fresh as the moment its read began
    row = stored.latest(state.store)
    with state.rollouts.lock:
        if began < state.rollouts.read_at:  # a read that began later has answered already: it stands
            return False
        kept_row, state.rollouts.row = state.rollouts.row, row
        state.rollouts.read_at = began
    before = kept_row.version if kept_row else None
    return before != (row.version if row else None)


def in_force(state: ServerState) -> RolloutRow | None:
    if time.monotonic() - state.rollouts.read_at > FRESH:
        refresh(state)
    return state.rollouts.row


def _planner(state: ServerState, directory: Path) -> stored.Planner:
    from datum.fleet.effective import rules_now
    from datum.fleet.nodes import group_of
    from datum.fleet.reboots import DEFAULT_GROUP
    from datum.fleet.rollouts.plan import plan

    settings = state.settings.fleet.rollout
    assert settings is not None
    try:
        rules = rules_now(directory)  # never of a nodes.yaml half written
    except Problem:
        rules = []

    def planner(revision: str, known: Mapping[str, str]) -> dict[str, tuple[int, str]]:
        # a known host's group as intake recorded it (nodes.yaml with its facts); a canary named by hand that
        # never reported: its name's
        def group(host: str) -> str:
            return known.get(host) or group_of(rules, host, {}) or DEFAULT_GROUP

        return plan(revision, known, group, settings.canary, settings.waves)

    return planner


def started(state: ServerState, current: Revision, directory: Path) -> None:
    """``current`` is the directory's revision now: keep its snapshot, start its rollout (once; blocking)."""
    if not configured(state) or state.rollouts.begun == current.id:
        return
    from datum.fleet.effective import held_still
    from datum.fleet.revision import still_named
    from datum.fleet.rollouts.snapshot import TooLarge, capture

    settings = state.settings.fleet.rollout
    assert settings is not None and state.store is not None
    blob = None
    if not kept(state.store, current.id):  # read before the lock: refresh() waits on it in every request
        try:
            files, blob = held_still(directory, lambda _state: capture(directory))
        except TooLarge as exc:
            log.warning("revision %s is not kept: %s", current.id, exc)
        else:
            if files != still_named(directory, current):  # the files kept are not the revision's
                log.info("revision %s moved on before its files were kept: no rollout of it", current.id)
                return
    with state.rollouts.lock:
        if state.rollouts.begun == current.id:
            return
        if blob is not None and not kept(state.store, current.id):
            keep(state.store, current.id, blob)
        try:
            row = stored.begin(
                state.store, current.id, len(settings.waves), _planner(state, directory), state.settings.fleet.stale_after,
                after=_order_in_git(state, current, directory),
            )
        except stored.Behind as exc:
            log.warning("%s", exc)  # once per revision this process sees: begun is set below
            state.rollouts.behind, row = current.id, None
        else:
            state.rollouts.behind = None
        if row is not None:
            log.info("rollout %d of revision %s: %s (from %s)", row.id, row.revision, row.state, row.previous)
            if row.previous is not None and row.state != DONE and not kept(state.store, row.previous):
                log.warning("revision %s has no snapshot: the hosts the rollout of %s holds back are answered 503 "
                            "and keep the manifest they have", row.previous, row.revision)
        state.rollouts.begun = current.id
        refresh(state)


def _order_in_git(state: ServerState, current: Revision, directory: Path) -> str | None:
    """What git proves of the directory's commit against the one in force: ``stored.Behind`` when it is an
    ancestor (a copy that lags at a commit the store never saw: a pull that fetched and did not check out); the
    revision in force when it descends from it (the directory is ahead, whatever order the store first saw
    the two in: a lagging replica's revision that began before it must not pin it out); else None."""
    from datum.fleet.revision import ancestor_of, descends_from

    assert state.store is not None
    row = stored.latest(state.store)
    if row is None or row.revision == current.id or stored.put_back(row, current.id):
        return None
    if ancestor_of(directory, current, row.revision):
        raise stored.Behind(current.id, f"commit {current.commit} is an ancestor of revision {row.revision}", row)
    return row.revision if descends_from(directory, current, row.revision) else None


def _as_it_is(row: RolloutRow | None, current: str) -> bool:
    """Whether ``row`` serves every host the directory as it is (revision ``current``): none yet, or ``done``
    on it. ``revision_for`` answers so, and the fast answer may (``settled_on``)."""
    return row is None or (row.state == DONE and row.revision == current)


def settled_on(state: ServerState, revision: str) -> bool:
    """``_as_it_is`` as the rollout in force last read says, ``revision`` the directory's current one. Never a
    read of the store (the fast answer runs on the event loop): a row older than ``SETTLED_FRESH`` (the watch
    reads it every period) is not trusted, and the route answers and reads it again."""
    if time.monotonic() - state.rollouts.read_at > SETTLED_FRESH:
        return False
    return _as_it_is(state.rollouts.row, revision)


def _members(state: ServerState, row: RolloutRow) -> dict[str, int]:
    found = state.rollouts.members.get(row.id)
    if found is None:
        assert state.store is not None
        found = stored.membership(state.store, row.id)
        state.rollouts.members = {row.id: found}  # only the rollout in force is kept
    return found


def released(state: ServerState, row: RolloutRow, host: str) -> bool:
    """Whether ``host`` is in a wave ``row`` has released (a host it did not plan waits for the last)."""
    return _members(state, row).get(host, row.last_wave) <= row.wave


def _directory(state: ServerState, revision: str, current: Revision, directory: Path) -> Path | None:
    """Where ``revision``'s files are: the fleet directory when it is current, else its snapshot's copy."""
    if revision == current.id:
        return directory
    from datum.fleet.rollouts.snapshot import materialize, materialized

    done = materialized(state.settings.home, revision)  # written by this process before: no read of the store
    if done is not None:
        return done
    assert state.store is not None
    blob = load(state.store, revision)
    if blob is None:
        return None
    return materialize(state.settings.home, revision, blob)


@dataclass(frozen=True, slots=True)
class Served:
    effective: Effective
    revision: str | None


def revision_for(
    state: ServerState, host: str, facts: dict[str, Any], current: Revision | None, directory: Path | None = None,
    *, record: bool = False,
) -> Served:
    """The revision ``host`` is served, and its effective manifest composed from it (blocking: it may
    compose, read a snapshot and write it out); ``current`` is the directory's revision now
    (``datum.api.revisions.served``). A Problem when there is none (404) or it is not valid (422)."""
    directory = directory or directory_of(str(state.settings.fleet.manifests))
    if current is None or not configured(state):
        return Served(effective(directory, host, facts), current.id if current else None)
    row = in_force(state)
    if _as_it_is(row, current.id):
        return Served(effective(directory, host, facts), current.id)
    if row.state == DONE or row.previous is None:
        return _from(state, row.revision, current, directory, host, facts)
    if row.state == ABORTED:
        return _from(state, row.previous, current, directory, host, facts)
    if row.state == stored.SUPERSEDED:  # a newer rollout is being started this moment: the directory as it is
        return Served(effective(directory, host, facts), current.id)
    if released(state, row, host):
        try:
            return _from(state, row.revision, current, directory, host, facts)
        except Problem as exc:
            if record:  # the host's own agent asked, with its own facts
                _unserved(state, row, host, exc, current, directory)
            raise
    try:
        old = _from(state, row.previous, current, directory, host, facts)
    except Problem as exc:  # nothing (valid) for it in the previous revision: it is not held back from anything
        if not _nothing_for(exc):  # the previous revision cannot be served: never the new one instead
            raise
        return _from(state, row.revision, current, directory, host, facts)
    try:
        new = _from(state, row.revision, current, directory, host, facts)
    except Problem as exc:  # the new revision has nothing valid for it: it keeps the previous until released
        if not _nothing_for(exc):
            raise
        return old
    return new if new.effective.digest == old.effective.digest else old


def _nothing_for(exc: Problem) -> bool:
    """Whether composing a revision for a host said it has nothing for it (``NOT_FOUND``) or nothing valid
    (``INVALID_INPUT``), rather than that it cannot be served now (``UNAVAILABLE``)."""
    return exc.code in (stored.UNSERVED_FAILED, stored.UNSERVED_LEFT)


def _unserved(state: ServerState, row: RolloutRow, host: str, exc: Problem, current: Revision, directory: Path) -> None:
    """A released host the rollout's revision has no valid manifest for: recorded once (``stored.unserved``), so
    its wave counts it (failed, or not waited for) instead of waiting for a pass on a revision it cannot get.
    Only for the files the revision was named for, as they still are (an edit meanwhile is another answer)."""
    from datum.fleet.revision import still_named

    if row.state not in stored.OPEN or not _nothing_for(exc):
        return
    if row.revision != current.id or still_named(directory, current) is None:
        return
    if host not in _members(state, row) or (row.id, host) in state.rollouts.unserved:
        return
    assert state.store is not None
    try:
        if stored.unserved(state.store, row.id, host, exc.code, exc.plain()):
            log.warning("rollout %d: revision %s cannot be served to %s: %s", row.id, row.revision, host, exc.plain())
    except Exception as exc2:  # noqa: BLE001 - recorded at its next request
        log.warning("recording that revision %s cannot be served to %s failed: %s", row.revision, host, exc2)
        return
    if any(rollout != row.id for rollout, _host in state.rollouts.unserved):  # only the rollout in force's
        state.rollouts.unserved = {seen for seen in state.rollouts.unserved if seen[0] == row.id}
    state.rollouts.unserved.add((row.id, host))


def _from(state: ServerState, revision: str, current: Revision, directory: Path, host: str, facts: dict[str, Any]) -> Served:
    where = _directory(state, revision, current, directory)
    if where is None:  # no snapshot kept (too large to keep)
        # Never another revision instead: the directory's would undo a hold-back or an abort without a word,
        # and when the directory is behind it would take the host back. The agent keeps what it applied.
        why = "this server's fleet directory is behind it" if state.rollouts.behind is not None else (
            f"this server's fleet directory holds revision {current.id}")
        raise Problem.one(
            "UNAVAILABLE", f"revision {revision} has no snapshot (its files were not kept: too large), and {why}: "
            "the host keeps the manifest it has",
        )
    return Served(effective(where, host, facts), revision)


def held_back(state: ServerState, host: str, ran: str | None) -> stored.HeldBack | None:
    """Whether the rollout in force holds ``host`` back, its last pass having run ``ran`` (the listing, the
    host's detail and page): ``datum.store.rollouts.held_back`` on this process's reads."""
    if not configured(state):
        return None
    row = in_force(state)
    if not stored.under_way(row):
        return None
    return stored.held_back(row, _members(state, row), host, ran)


def tick(state: ServerState) -> RolloutRow | None:
    """Advance or halt the rollout under way (blocking); the row when it moved. Never raises."""
    if not configured(state):
        return None
    settings = state.settings.fleet.rollout
    assert settings is not None and state.store is not None
    state.rollouts.checked_at = time.monotonic()
    try:
        moved = stored.check(state.store, settings.soak, settings.max_failed, state.settings.fleet.stale_after)
    except Exception:  # noqa: BLE001 - checked again at the next tick
        log.exception("checking the rollout failed")
        return None
    if moved is not None:
        log.info("rollout %d of revision %s: %s, wave %d of %d", moved.id, moved.revision, moved.state,
                 moved.wave, moved.last_wave)
        refresh(state)
    return moved


def after_pass(state: ServerState, revision: str | None) -> None:
    """A pass was stored: check the rollout when the pass ran its revision (at most every ``INTAKE_GAP``)."""
    if revision is None or not configured(state):
        return
    row = in_force(state)
    if row is None or row.state != stored.ROLLING or row.revision != revision:
        return
    if time.monotonic() - state.rollouts.checked_at < INTAKE_GAP:
        return
    tick(state)
