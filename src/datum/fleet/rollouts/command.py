"""The operator's pause, resume and abort of the rollout in force: ``datum rollout pause|resume|abort`` (on
the store) and ``POST /v1/rollouts/current/{action}`` (``datum.api.routes.rollouts``) both call ``act``.

The transition is the store's conditional update (``datum.store.rollouts.command``): replicas and the CLI
acting at once change a rollout once, and the state machine (``datum.core.vocab.COMMANDS``, each act's
sources and target) says which states allow which command. No rollout is 404, a state that does not allow
the command 409, in the words both surfaces print. An abort names the hosts that had taken the aborted
revision. A server that acted reads the row back into its memory at once (``serve.refresh``); every
replica's held waits wake at its watch's next period (``serve.announce``).
"""

from __future__ import annotations

from dataclasses import dataclass

from datum.config import FleetSettings
from datum.core.findings import ErrorCode, Problem
from datum.core.vocab import COMMANDS, RolloutAct
from datum.fleet.rollouts import serve
from datum.fleet.server import FleetServer
from datum.store import rollouts as stored
from datum.store.engine import Store
from datum.store.rollouts import RolloutRow

DONE_WORDS = {command: act.value for command, act in COMMANDS.items()}  # pause: paused, ...


@dataclass(frozen=True, slots=True)
class Commanded:
    """The rollout in force after the command, and the hosts an abort returns (None for a pause or a resume)."""

    row: RolloutRow
    returned: list[str] | None = None


def act(store: Store, fleet: FleetSettings, action: str, who: str, reason: str | None = None,
        server: FleetServer | None = None) -> Commanded:
    """Pause, resume or abort (``action``, a key of ``COMMANDS``) the rollout in force for ``who``; ``reason``
    is stored with the transition. ``Problem`` 404 when no rollout has started, 409 when its state forbids
    the command. ``server``: the server process that acted (None: the CLI), which serves what it did at once."""
    before, after = stored.command(store, action, who, fleet.stale_after, reason)
    if before is None:
        raise Problem.one(ErrorCode.NOT_FOUND, "no rollout has started on this store")
    if after is None:
        raise Problem.one(ErrorCode.CONFLICT, f"rollout {before.id} of revision {before.revision} is {before.state}: "
                                      f"it cannot be {DONE_WORDS[action]}")
    returned = stored.hosts_on(store, after.revision) if COMMANDS[action] is RolloutAct.ABORTED else None
    if server is not None:
        serve.refresh(server)  # every replica's waits wake at its watch's next period (serve.announce)
    return Commanded(after, returned)
