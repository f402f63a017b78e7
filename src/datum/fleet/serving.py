"""What manifest a host is served, and which revision of the fleet's manifests names it.

``served`` names the directory's revision (``datum.fleet.revision``; in a
worker thread: it may read every file and run git) and, the first time this
process serves it, records it in the store (``datum.store.revisions``), so
replicas agree on when it was first seen; with ``[fleet.rollout]``, keeps its
files and starts its rollout (``datum.fleet.rollouts.machine.started``).

A host's manifest is named by the revision of the files it was composed
from, which the agent puts in its pass report (the route says it as
``Datum-Revision``). ``composed`` answers from the directory as it is now,
``chosen`` with staged rollouts (the revision ``datum.fleet.rollouts.serve``
chooses for the host); both hold a long poll on the directory's changes
(``datum.fleet.changes``) when asked to wait, and both compose and name again
when an edit landed between the composition and the naming.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio.to_thread

from datum.core.findings import ErrorCode, Problem
from datum.fleet.changes import Unchanged, current, held, held_by
from datum.fleet.effective import Effective, directory_of
from datum.fleet.revision import Revision, known, named_for, revision
from datum.fleet.rollouts import serve
from datum.fleet.rollouts.machine import started
from datum.fleet.rollouts.serve import Served
from datum.fleet.server import FleetServer
from datum.store.revisions import record

log = logging.getLogger("datum.api")

ATTEMPTS = 3  # compositions named before the directory is said to keep changing (503)


def served(server: FleetServer, resolved: Path | None = None) -> Revision | None:
    """The revision of the fleet directory as it is now (``resolved``: as the request resolved it, else now),
    recorded in the store once; None without a fleet. Blocking: call it from a worker thread."""
    directory = server.settings.fleet.manifests
    if directory is None:
        return None
    resolved = resolved or directory_of(directory)
    found = revision(resolved)
    store = server.store
    if store is not None and found.id not in server.revisions_recorded:
        try:
            record(store, found.id, found.commit)
        except Exception as exc:  # noqa: BLE001 - recorded at the next request; the manifest is served meanwhile
            log.warning("recording revision %s failed: %s", found.id, exc)
        else:
            server.revisions_recorded.add(found.id)
    if store is not None and server.settings.fleet.rollout is not None and server.rollouts.begun != found.id:
        try:
            started(server, found, resolved)
        except Exception as exc:  # noqa: BLE001 - started at the next request or change
            log.warning("starting the rollout of revision %s failed: %s", found.id, exc)
    return found


async def serving(server: FleetServer, resolved: Path | None = None) -> Revision | None:
    """``served`` without a worker thread when the revision is already named and recorded (a ``stat`` per path)."""
    directory = server.settings.fleet.manifests
    if directory is None:
        return None
    resolved = resolved or directory_of(directory)
    found = known(resolved)
    if found is not None and found.id in server.revisions_recorded and (
        server.settings.fleet.rollout is None or server.rollouts.begun == found.id
    ):
        return found
    return await anyio.to_thread.run_sync(served, server, resolved)


def names(resolved: Path, found: Effective, revision: Revision | None) -> bool:
    """Whether ``revision`` is the one of the files ``found`` was composed from (None: no revision to name)."""
    return revision is None or named_for(resolved, found.state) == revision


def _id(revision: Revision | None) -> str | None:
    return None if revision is None else revision.id


def _keeps_changing() -> Problem:
    return Problem.one(ErrorCode.UNAVAILABLE, "the fleet directory keeps changing: its revision could not be named")


async def composed(
    server: FleetServer, directory: Path, host: str, facts: dict[str, Any], unchanged: Unchanged | None,
    wait: int | None, labels: Mapping[str, str] | None = None,
) -> Served:
    """The host's manifest from the directory as it is now (no staged rollout), named by the revision of the
    files it was composed from (``named``). With ``wait`` and ``unchanged`` (what the agent has) and a watch of
    the directory, a long poll."""
    changes = server.changes
    if wait and unchanged is not None and changes is not None:
        found = await held(changes, directory, host, facts, unchanged, wait, labels)
    else:
        found = await current(directory_of(directory), host, facts, labels)
    return await named(server, directory, host, facts, found, labels)


async def named(
    server: FleetServer, directory: Path, host: str, facts: dict[str, Any], found: Effective,
    labels: Mapping[str, str] | None = None,
) -> Served:
    """``found`` (the host's manifest, just composed or found) named by the revision of the files it was composed
    from: when an edit landed between the composition and the naming, both again (no wait: the edit is the change
    a wait was for), at most ``ATTEMPTS`` times in all."""
    for attempt in range(ATTEMPTS):
        if attempt:
            found = await current(directory_of(directory), host, facts, labels)
        resolved = directory_of(directory)  # a link switched meanwhile: another directory, which names tells
        now = await serving(server, resolved)
        if names(resolved, found, now):
            return Served(found, _id(now))
    raise _keeps_changing()


def choose(server: FleetServer, resolved: Path, host: str, facts: dict[str, Any], its_own: bool,
           labels: Mapping[str, str] | None = None) -> Served:
    """Which revision ``host`` is served, from the directory's revision now (blocking). Named and composed
    from the same files: when an edit landed between the two reads, both are made again (the agent reports
    the revision it is told, and a rollout counts its pass on it). ``its_own``: the host's own agent asks
    (what it cannot be served is then recorded, ``serve.revision_for``)."""
    for _ in range(ATTEMPTS):
        now = served(server, resolved)
        got = serve.revision_for(server, host, facts, now, resolved, record=its_own, labels=labels)
        if now is None or got.revision != now.id or names(resolved, got.effective, now):
            return got
    raise _keeps_changing()


async def chosen(
    server: FleetServer, directory: Path, host: str, facts: dict[str, Any], its_own: bool,
    unchanged: Unchanged | None, wait: int | None, labels: Mapping[str, str] | None = None,
) -> Served:
    """``choose`` in a worker thread, from the directory resolved at each ask (a link switched is a change);
    with ``wait``, ``unchanged`` and a watch of the directory, a long poll that asks again at each change of
    the directory or of the rollout in force."""
    named: list[str | None] = [None]

    async def find() -> Effective:
        got = await anyio.to_thread.run_sync(choose, server, directory_of(directory), host, facts, its_own, labels)
        named[0] = got.revision
        return got.effective

    changes = server.changes
    if wait and unchanged is not None and changes is not None:
        found = await held_by(changes, find, unchanged, wait, host)
    else:
        found = await find()
    return Served(found, named[0])
