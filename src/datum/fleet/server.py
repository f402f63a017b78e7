"""The fleet server of one process: what it serves hosts from, and what it remembers between their requests.

``FleetServer`` is the one object the fleet's modules are handed
(``datum.fleet.serving``, ``datum.fleet.intake``, ``datum.fleet.rollouts``):
the settings, the store (None until the server is wired), the rollouts as this
process last read them (``Remembered``), the revisions it recorded, the watch of
the fleet directory that wakes the held long polls, and the intake's own
counters. Process memory only: what every replica agrees on is in the store.
The HTTP app holds one (``datum.api.front.state``) and speaks for it; nothing
here speaks HTTP.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from datum.config import Settings
from datum.fleet.changes import FleetChanges
from datum.fleet.counters import IntakeCounters
from datum.fleet.labels import EnrolledLabels
from datum.store import Store
from datum.store.rollouts import RolloutRow


@dataclass
class Remembered:
    """What one server process remembers of the staged rollouts (``datum.fleet.rollouts``): the one in force
    as last read and when that read began (``serve.refresh`` reads it again at most every ``serve.FRESH``
    seconds), its wave plan, the revision it last started a rollout for or found behind
    (``machine.started``), the hosts it recorded as not served, when it last checked (``machine.tick``), and
    the version of it the held long polls were last told of (``serve.announce``)."""

    row: RolloutRow | None = None
    read_at: float = -math.inf
    members: dict[int, dict[str, int]] = field(default_factory=dict)
    begun: str | None = None
    behind: str | None = None  # the directory's revision when the store refused it as Behind, else None
    unserved: set[tuple[int, str]] = field(default_factory=set)  # (rollout, host) recorded as not served
    checked_at: float = -math.inf
    lock: threading.RLock = field(default_factory=threading.RLock)  # started() refreshes under it
    # The rollout in force as the held long polls were last told of it (``serve.announce``, the watch's
    # probe, alone writes it; False: never told): a transition is announced whoever read the row first.
    announced: RolloutRow | None | bool = False
    # Wakes the check loop of ``datum serve`` at once, or at the latest the seconds given from now
    # (``machine.next_check``, ``machine.after_pass``): set by the server when it runs one.
    wake_check: Callable[..., None] = field(default=lambda within=0.0: None)


@dataclass
class FleetServer:
    """The server side of hosts in one process; ``store`` is None until wired."""

    settings: Settings
    store: Store | None = None
    # Staged rollouts ([fleet.rollout], datum.fleet.rollouts): the rollout in force as last read, its wave plan.
    rollouts: Remembered = field(default_factory=Remembered)
    # The fleet directory's revisions this process recorded in the store (datum.fleet.serving): once each.
    revisions_recorded: set[str] = field(default_factory=set)
    # The fleet directory's changes, watched while the server is served with a fleet (datum.fleet.changes):
    # without it a manifest request's wait is answered at once, without Datum-Wait.
    changes: FleetChanges | None = None
    # The reports this process took and how long each took (datum.fleet.counters), on /metrics.
    intake: IntakeCounters = field(default_factory=IntakeCounters)
    # The labels hosts were given at enrollment, as last read (datum.fleet.labels).
    labels: EnrolledLabels = field(init=False)

    def __post_init__(self) -> None:
        self.labels = EnrolledLabels(lambda: self.store)
