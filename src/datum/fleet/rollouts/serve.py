"""Which revision each host is served while staged rollouts are configured.

One decision, ``revision_for(server, host, facts)``: the revision whose files a
host's effective manifest is composed from (the manifest route, its fast
answer and the long poll all ask it, through ``datum.fleet.serving``;
``Datum-Revision`` names what it chose). Without ``[fleet.rollout]`` it is the
directory as it is now, as before rollouts existed. With it, the rollout in
force (``datum.store.rollouts``, the newest row, read at most once per
``FRESH`` seconds per process into ``datum.fleet.server.Remembered``: ``refresh``)
decides:

- ``done`` (or none yet): its revision;
- ``rolling``, ``paused``, ``halted``: the new revision to the hosts of the
  released waves (``datum.fleet.rollouts.plan``), the previous to the rest, unless
  the host's effective manifest is the same in both (digests compared): then
  the new one, so an unchanged host is never held back;
- ``aborted``: the previous revision, to everyone.

A revision that is not the directory's current one is composed from its
snapshot (``datum.fleet.rollouts.snapshot``), written under ``<home>/revisions``.
A released host the new revision has no valid manifest for is recorded once
(``_unserved``), so its wave counts it. ``held_back`` says whether a host is
held back, for the listing, the host's detail and its page.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datum.core.findings import ErrorCode, Problem
from datum.fleet.changes import AllBut, Wake
from datum.fleet.effective import Effective, directory_of, effective
from datum.fleet.revision import Revision
from datum.fleet.server import FleetServer
from datum.store import rollouts as stored
from datum.store.revisions import floor
from datum.store.rollouts import ABORTED, DONE, RolloutRow
from datum.store.snapshots import load

log = logging.getLogger("datum.api")

FRESH = 0.25  # seconds the rollout in force is trusted before it is read again (one read by primary key)
SETTLED_FRESH = 2 * FRESH  # how old a read of the rollout in force the fast answer trusts (the watch's period and more)


def configured(server: FleetServer) -> bool:
    fleet = server.settings.fleet
    return fleet.rollout is not None and fleet.manifests is not None and server.store is not None


def refresh(server: FleetServer) -> RolloutRow | None:
    """Read the rollout in force (every caller that must see the store's row now); the row this process
    keeps. Whether it moved is ``announce``'s alone to say."""
    if not configured(server):
        return None
    assert server.store is not None
    began = time.monotonic()  # the row is as fresh as the moment its read began
    row = stored.latest(server.store)
    with server.rollouts.lock:
        if began >= server.rollouts.read_at:  # a read that began later has answered already: it stands
            server.rollouts.row, server.rollouts.read_at = row, began
        return server.rollouts.row


def announce(server: FleetServer) -> Wake:
    """The one place a transition of the rollout in force is announced: the directory watch's probe
    (``datum.fleet.changes``), every period on every replica, and after a change of the files (``moved``).
    Which held long polls ask again when the row read now is not the one they were last told of, whoever made
    the transition (this process's tick, the API, the CLI through the store, another replica) and whoever read
    the row first (``concerned``)."""
    if not configured(server):
        return False
    row = refresh(server)
    with server.rollouts.lock:
        before = server.rollouts.announced
        if before is not False and _version(before) == _version(row):
            return False
        server.rollouts.announced = row
    if row is not None and row.state == stored.ROLLING:
        server.rollouts.wake_check()  # a resume (from anywhere) may release a wave now: checked at once
    return concerned(server, before, row)


def moved(server: FleetServer, current: object) -> Wake:
    """Which held long polls a change of the fleet directory's files wakes, once the watch told it
    (``current``: the revision ``datum.fleet.serving.served`` named, None when it could not). What a host is
    served moves with the files only through the rollout of their revision: when that rollout is the one in
    force, the waiters it concerns (``announce``: a rollout begun, its canaries, not the 1,000 hosts it holds
    back); else (no rollout of it: behind the store, not recorded, the directory unreadable) every waiter."""
    if not configured(server) or not isinstance(current, Revision):
        return True
    row = in_force(server)
    if row is None or row.revision != current.id:
        return True
    return announce(server)


def _version(row: RolloutRow | None | bool) -> object:
    return row.version if isinstance(row, RolloutRow) else None


def concerned(server: FleetServer, before: RolloutRow | None | bool, row: RolloutRow | None) -> Wake:
    """Whose answer the move from ``before`` (the row last announced) to ``row`` changes, so that a
    transition of a rollout of 100,000 hosts asks again for the hosts it concerns, not for all: a wave
    released, its hosts (they get the new revision; the last wave, every host but those of the waves before:
    it releases the hosts no wave planned too); an abort, the released hosts (the previous one again); a
    halt, a pause, a resume, and ``done`` after the last wave, nobody (what each host is served is the same).
    A rollout begun from the ``done`` one last announced: its released hosts (the canaries; every other host
    is held on that ``done`` revision, as it was served it, or on the newer one it ran, which it was served
    too). Every waiter for anything else: another rollout, the first look."""
    if row is None or not isinstance(before, RolloutRow):
        return True
    if before.id != row.id:
        begun = before.state == DONE and row.previous == before.revision and row.state in (*stored.OPEN, ABORTED)
        return _released(server, row, -1) if begun else True
    if row.state == ABORTED:
        return True if row.wave >= row.last_wave else _released(server, row, -1)
    if row.wave > before.wave:
        return _released(server, row, before.wave)
    return False


def _released(server: FleetServer, row: RolloutRow, since: int) -> Wake:
    """The hosts of ``row``'s waves after ``since`` up to the one it has released; from the last wave on, every
    host but those of the waves up to ``since`` (a host no wave planned waits for the last)."""
    members = _members(server, row)
    if row.wave >= row.last_wave:
        return AllBut(h for h, w in members.items() if w <= since)
    return frozenset(h for h, w in members.items() if since < w <= row.wave)


def in_force(server: FleetServer) -> RolloutRow | None:
    if time.monotonic() - server.rollouts.read_at > FRESH:
        refresh(server)
    return server.rollouts.row


def _as_it_is(row: RolloutRow | None, current: str) -> bool:
    """Whether ``row`` serves every host the directory as it is (revision ``current``): none yet, or ``done``
    on it. ``revision_for`` answers so, and the fast answer may (``settled_on``)."""
    return row is None or (row.state == DONE and row.revision == current)


def settled_on(server: FleetServer, revision: str) -> bool:
    """``_as_it_is`` as the rollout in force last read says, ``revision`` the directory's current one. Never a
    read of the store (the fast answer runs on the event loop): a row older than ``SETTLED_FRESH`` (the watch
    reads it every period) is not trusted, and the route answers and reads it again."""
    if time.monotonic() - server.rollouts.read_at > SETTLED_FRESH:
        return False
    return _as_it_is(server.rollouts.row, revision)


def _members(server: FleetServer, row: RolloutRow) -> dict[str, int]:
    found = server.rollouts.members.get(row.id)
    if found is None:
        assert server.store is not None
        found = stored.membership(server.store, row.id)
        server.rollouts.members = {row.id: found}  # only the rollout in force is kept
    return found


def released(server: FleetServer, row: RolloutRow, host: str) -> bool:
    """Whether ``host`` is in a wave ``row`` has released (a host it did not plan waits for the last)."""
    return _members(server, row).get(host, row.last_wave) <= row.wave


def _directory(server: FleetServer, revision: str, current: Revision, directory: Path) -> Path | None:
    """Where ``revision``'s files are: the fleet directory when it is current, else its snapshot's copy."""
    if revision == current.id:
        return directory
    from datum.fleet.rollouts.snapshot import materialize, materialized

    done = materialized(server.settings.home, revision)  # written by this process before: no read of the store
    if done is not None:
        return done
    assert server.store is not None
    blob = load(server.store, revision)
    if blob is None:
        return None
    try:
        return materialize(server.settings.home, revision, blob)
    except ValueError as e:  # a stored blob capture never made (a hand edit, a bomb): refused, never half served
        raise Problem.one(
            ErrorCode.UNAVAILABLE, f"revision {revision}'s snapshot in the store is refused ({e}): the host keeps the "
            "manifest it has",
        ) from e


@dataclass(frozen=True, slots=True)
class Served:
    """What a host is served: its effective manifest, and the revision it was composed from (None: none named)."""

    effective: Effective
    revision: str | None


def revision_for(
    server: FleetServer, host: str, facts: dict[str, Any], current: Revision | None, directory: Path | None = None,
    *, record: bool = False, labels: Mapping[str, str] | None = None,
) -> Served:
    """The revision ``host`` is served, and its effective manifest composed from it (blocking: it may
    compose, read a snapshot and write it out); ``current`` is the directory's revision now
    (``datum.fleet.serving.served``). A Problem when there is none (404) or it is not valid (422)."""
    directory = directory or directory_of(str(server.settings.fleet.manifests))
    if current is None or not configured(server):
        return Served(effective(directory, host, facts, labels), current.id if current else None)
    row = in_force(server)
    if _as_it_is(row, current.id):
        return Served(effective(directory, host, facts, labels), current.id)
    if row.state == DONE or row.previous is None:
        return _from(server, row.revision, current, directory, host, facts, labels)
    if row.state == ABORTED:
        return _from(server, row.previous, current, directory, host, facts, labels)
    if row.state == stored.SUPERSEDED:  # a newer rollout is being started this moment: the directory as it is
        return Served(effective(directory, host, facts, labels), current.id)
    if released(server, row, host):
        try:
            return _from(server, row.revision, current, directory, host, facts, labels)
        except Problem as exc:
            if record:  # the host's own agent asked, with its own facts
                _unserved(server, row, host, exc, current, directory)
            raise
    # Held back: on the previous revision, or on a newer one it ran itself (the per-host floor), never older.
    assert server.store is not None
    ran = floor(server.store, host, row.previous)
    if ran == row.revision:  # it runs the new revision already: nothing to hold it back from
        return _from(server, row.revision, current, directory, host, facts, labels)
    try:
        old = _from(server, ran or row.previous, current, directory, host, facts, labels)
    except Problem as exc:  # nothing (valid) for it in the previous revision: it is not held back from anything
        if not _nothing_for(exc):  # the previous revision cannot be served: never the new one instead
            raise
        return _from(server, row.revision, current, directory, host, facts, labels)
    try:
        new = _from(server, row.revision, current, directory, host, facts, labels)
    except Problem as exc:  # the new revision has nothing valid for it: it keeps the previous until released
        if not _nothing_for(exc):
            raise
        return old
    return new if new.effective.digest == old.effective.digest else old


def _nothing_for(exc: Problem) -> bool:
    """Whether composing a revision for a host said it has nothing for it (``NOT_FOUND``) or nothing valid
    (``INVALID_INPUT``), rather than that it cannot be served now (``UNAVAILABLE``)."""
    return exc.code in (stored.UNSERVED_FAILED, stored.UNSERVED_LEFT)


def _unserved(server: FleetServer, row: RolloutRow, host: str, exc: Problem, current: Revision, directory: Path) -> None:
    """A released host the rollout's revision has no valid manifest for: recorded once (``stored.unserved``), so
    its wave counts it (failed, or not waited for) instead of waiting for a pass on a revision it cannot get.
    Only for the files the revision was named for, as they still are (an edit meanwhile is another answer)."""
    from datum.fleet.revision import still_named

    if row.state not in stored.OPEN or not _nothing_for(exc):
        return
    if row.revision != current.id or still_named(directory, current) is None:
        return
    if host not in _members(server, row) or (row.id, host) in server.rollouts.unserved:
        return
    assert server.store is not None
    try:
        if stored.unserved(server.store, row.id, host, exc.code, exc.plain()):
            log.warning("rollout %d: revision %s cannot be served to %s: %s", row.id, row.revision, host, exc.plain())
    except Exception as exc2:  # noqa: BLE001 - recorded at its next request
        log.warning("recording that revision %s cannot be served to %s failed: %s", row.revision, host, exc2)
        return
    if any(rollout != row.id for rollout, _host in server.rollouts.unserved):  # only the rollout in force's
        server.rollouts.unserved = {seen for seen in server.rollouts.unserved if seen[0] == row.id}
    server.rollouts.unserved.add((row.id, host))


def _from(server: FleetServer, revision: str, current: Revision, directory: Path, host: str, facts: dict[str, Any],
          labels: Mapping[str, str] | None = None) -> Served:
    where = _directory(server, revision, current, directory)
    if where is None:  # no snapshot kept (too large to keep)
        # Never another revision instead: the directory's would undo a hold-back or an abort without a word,
        # and when the directory is behind it would take the host back. The agent keeps what it applied.
        why = "this server's fleet directory is behind it" if server.rollouts.behind is not None else (
            f"this server's fleet directory holds revision {current.id}")
        raise Problem.one(
            ErrorCode.UNAVAILABLE, f"revision {revision} has no snapshot (its files were not kept: too large), and {why}: "
            "the host keeps the manifest it has",
        )
    return Served(effective(where, host, facts, labels), revision)


def held_back(server: FleetServer, host: str, ran: str | None) -> stored.HeldBack | None:
    """Whether the rollout in force holds ``host`` back, its last pass having run ``ran`` (the listing, the
    host's detail and page): ``datum.store.rollouts.held_back`` on this process's reads."""
    if not configured(server):
        return None
    row = in_force(server)
    if not stored.under_way(row):
        return None
    return stored.held_back(row, _members(server, row), host, ran)


