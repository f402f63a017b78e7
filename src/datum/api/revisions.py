"""The revision of the fleet's manifests this server serves (``datum.fleet.revision``), recorded once in the store.

``served`` names the directory's revision (in a worker thread: it may read
every file and run git) and, the first time this process serves it, records
it in the store (``datum.store.revisions``), so replicas agree on when it was
first seen; with ``[fleet.rollout]``, keeps its files and starts its rollout
(``datum.api.rollouts.started``). ``Datum-Revision`` on every manifest answer says which revision
the manifest was composed from; the agent puts it in its pass report.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio.to_thread

from datum.api.front.state import ServerState
from datum.api.rollouts import started
from datum.fleet.effective import directory_of
from datum.fleet.revision import Revision, known, revision
from datum.store.revisions import record

log = logging.getLogger("datum.api")

REVISION_HEADER = "Datum-Revision"


def served(state: ServerState, resolved: Path | None = None) -> Revision | None:
    """The revision of the fleet directory as it is now (``resolved``: as the request resolved it, else now),
    recorded in the store once; None without a fleet. Blocking: call it from a worker thread."""
    directory = state.settings.fleet.manifests
    if directory is None:
        return None
    resolved = resolved or directory_of(directory)
    found = revision(resolved)
    store = state.store
    if store is not None and found.id not in state.revisions_recorded:
        try:
            record(store, found.id, found.commit)
        except Exception as exc:  # noqa: BLE001 - recorded at the next request; the manifest is served meanwhile
            log.warning("recording revision %s failed: %s", found.id, exc)
        else:
            state.revisions_recorded.add(found.id)
    if store is not None and state.settings.fleet.rollout is not None and state.rollouts.begun != found.id:
        try:
            started(state, found, resolved)
        except Exception as exc:  # noqa: BLE001 - started at the next request or change
            log.warning("starting the rollout of revision %s failed: %s", found.id, exc)
    return found


async def serving(state: ServerState, resolved: Path | None = None) -> Revision | None:
    """``served`` without a worker thread when the revision is already named and recorded (a ``stat`` per path)."""
    directory = state.settings.fleet.manifests
    if directory is None:
        return None
    resolved = resolved or directory_of(directory)
    found = known(resolved)
    if found is not None and found.id in state.revisions_recorded and (
        state.settings.fleet.rollout is None or state.rollouts.begun == found.id
    ):
        return found
    return await anyio.to_thread.run_sync(served, state, resolved)
