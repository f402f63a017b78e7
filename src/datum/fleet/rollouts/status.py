"""Which revision of the fleet's manifests each host runs: ``datum rollout status``, ``GET /v1/revisions``, the page.

Per revision (``datum.fleet.revision``) the hosts whose last pass ran it, by
the state they read now (converged, failed, and the rest: a silent host reads
unknown, as in the listing), newest revision first (when a server first saw
it, ``datum.store.revisions``; a revision no server recorded, reported by a
host, comes last). The current revision, the one this server serves now, is
always listed, with no hosts when none ran it yet. Hosts whose pass says no
revision are counted apart (``without``), by what they are (``Unrevisioned``:
reported with ``datum apply --report-to``, ran the manifest their agent kept,
or an agent older than revisions), in the words every surface prints
(``WITHOUT``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from datum.core.vocab import HostState
from datum.fleet.revision import Revision
from datum.store.engine import Store
from datum.store.revisions import running, seen, without_origins
from datum.store.rollouts import ABORTED, SERVER, RolloutRow


@dataclass(frozen=True, slots=True)
class RevisionRow:
    id: str
    current: bool
    first_seen: datetime | None
    git_commit: str | None
    hosts: int
    converged: int
    failed: int
    other: int
    states: dict[str, int] = field(default_factory=dict)


# What a host whose last pass names no revision is, by its report's manifestOrigin: the words every surface says.
WITHOUT = {
    "apply": "reported with datum apply --report-to (a manifest of its own, which no revision of the fleet names)",
    "cached": "ran the manifest its agent kept (the server was not reached)",
    "older": "reported by an agent older than revisions",
}


ORIGINS_ON_PAGE = 1000  # the most hosts without a revision whose rows the page reads to say what each is


@dataclass(frozen=True, slots=True)
class Unrevisioned:
    """The hosts whose last pass names no revision, by what they are (``WITHOUT``'s keys)."""

    apply: int = 0
    cached: int = 0
    older: int = 0


def without_said(by: Any) -> list[str]:
    """``5 reported with datum apply --report-to (...)``: one phrase per kind there is, from ``Unrevisioned`` (or
    the API's ``WithoutRevision``, the same fields)."""
    return [f"{n} {WITHOUT[k]}" for k in WITHOUT if (n := getattr(by, k, 0))]


@dataclass(frozen=True, slots=True)
class Rollout:
    current: str | None  # the revision served now; None when this server serves no manifests
    revisions: list[RevisionRow]
    without: int  # hosts whose last pass names no revision
    without_by: Unrevisioned = field(default_factory=Unrevisioned)  # the same hosts, by what they are


def _row(rev: str, counts: Counter[str], current: str | None, first: datetime | None, commit: str | None) -> RevisionRow:
    total = sum(counts.values())
    converged = counts.get(HostState.CONVERGED.value, 0)
    failed = counts.get(HostState.FAILED.value, 0)
    return RevisionRow(
        rev, rev == current, first, commit, total, converged, failed, total - converged - failed,
        {k: v for k, v in sorted(counts.items()) if v},
    )


def serving(directory: str | None, in_force: RolloutRow | None) -> str | None:
    """The revision served to a host no rollout holds back or releases: the directory's (``directory``), but
    the previous one while the rollout of the directory's revision is aborted (an operator sent everyone back:
    ``current`` names what is served, never a revision nobody gets)."""
    if directory is not None and in_force is not None and in_force.state == ABORTED and in_force.revision == directory:
        return in_force.previous or directory
    return directory


def status(store: Store, multiple: float, now: datetime, current: Revision | None,
           in_force: RolloutRow | None = None, *, origins: int | None = None) -> Rollout:
    """The fleet's hosts per revision, newest first, the current one (``serving``: what the server serves
    now, ``current`` the directory's revision and ``in_force`` the rollout in force) always among them.

    The counts come from the database's counts, no read of every host. The hosts whose pass names no
    revision are also counted by what they are (``without_by``), which reads those hosts' rows (a fleet
    reporting through ``datum apply --report-to`` is all of them): only while they are at most ``origins``
    (None: however many; ``GET /v1/revisions`` and ``datum rollout status`` ask for them), so the page every
    viewer refreshes each second (``ORIGINS_ON_PAGE``) never reads a whole fleet's rows for one line."""
    served = serving(current.id if current else None, in_force)
    if served is not None and current is not None and served != current.id:
        current = Revision(served, None)
    per = running(store, multiple, now)
    without = sum(per.pop(None, Counter()).values())
    ids = [r for r in per if r is not None]
    if current is not None and current.id not in per:
        ids.append(current.id)
    known = seen(store, ids)
    rows = []
    for rev in ids:
        kept = known.get(rev)
        commit = kept.git_commit if kept else (current.commit if current and current.id == rev else None)
        rows.append(_row(rev, per.get(rev, Counter()), current.id if current else None,
                         kept.first_seen if kept else None, commit))
    # newest first; never recorded (no first seen) last, by id so the order is stable
    rows.sort(key=lambda r: (r.first_seen is None, -(r.first_seen.timestamp() if r.first_seen else 0), r.id))
    by = without_origins(store) if without and (origins is None or without <= origins) else {}
    return Rollout(current.id if current else None, rows, without,
                   Unrevisioned(**{k: by.get(k, 0) for k in WITHOUT}))


def acted(transitions: Sequence[Any]) -> str | None:
    """Who last acted on a rollout, which act and when, in the words every surface prints (the page,
    ``datum rollout status``), from its stored transitions (``RolloutEvent``s, oldest first): the last one
    a person made (``by`` not ``server``). None when nobody acted on it."""
    for t in reversed(transitions):
        if t.by != SERVER:
            return f"{t.action} by {t.by} at {t.at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    return None
