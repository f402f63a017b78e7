"""The ``buckets`` example reconciler: one directory per bucket under a root, objects are files.

Desired state is the ``buckets`` table. Statuses: ``creating``, ``active``,
``deleting``, ``delete_blocked``, ``deleted`` (terminal). A bucket asked to be
deleted while it still holds objects is parked in ``delete_blocked`` with
reason ``blocked_on_owner`` until its tenant empties it. A directory with no
desired row is reaped, breaker permitting. An entry under the root that is
not a directory is reported as ``unexpected_kind`` and never touched.

Nothing here deletes an object. A directory is removed only with ``rmdir``,
after counting what it holds at that moment, empty subdirectories bottom-up,
never through a symlink; content that appears after the count makes the
``rmdir`` fail and the bucket waits on its owner. A row moves to ``active`` or
``deleted`` on what the directory showed only once the framework has seen it
for ``confirmation_ticks`` passes (``settle``). Every status the reconciler
writes is compare-and-set on the status its pass read, in ``ctx.begin()``, so
a tenant's ``datum bucket delete`` during a pass is never overwritten.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa

from datum.sdk import (
    BlockedOnOwner,
    Branch,
    CoverageSpec,
    DesiredTable,
    Direction,
    FieldError,
    Occupied,
    PassContext,
    Reason,
    ReconcilerSettings,
    Store,
    SubstrateError,
    Waiting,
    count_objects,
    invalid,
    remove_empty,
)

NAME = "buckets"
KIND = "bucket"

CREATING, ACTIVE, DELETING, DELETE_BLOCKED, DELETED = (
    "creating",
    "active",
    "deleting",
    "delete_blocked",
    "deleted",
)
STATUSES = (CREATING, ACTIVE, DELETING, DELETE_BLOCKED, DELETED)
WORK_QUERY = (CREATING, ACTIVE, DELETING, DELETE_BLOCKED)
TOMBSTONES = frozenset({DELETING, DELETE_BLOCKED})

# The table comes from this plugin's own Alembic branch (migrations/); ``store.require`` runs it.
BRANCH = Branch.of_plugin(NAME, Path(__file__).parent / "migrations")

metadata = sa.MetaData()
# The table (name, status, created_at, updated_at; its counts kept by triggers, migration buckets_0002).
desired = DesiredTable(
    "buckets", metadata, kind=KIND, noun="bucket", work_query=WORK_QUERY, terminal={DELETED}, branch=BRANCH
)
buckets = desired.table


def coverage_spec(work_query: Collection[str] = WORK_QUERY) -> CoverageSpec:
    """What coverage reads for ``work_query``: the ``buckets`` table, its counts kept by the database."""
    return desired.coverage(work_query)


_SAFE_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{1,61})[a-z0-9]$")


class BucketSettings(ReconcilerSettings):
    """The ``[reconcilers.buckets]`` section: the common settings, the bucket root and the work query.

    ``work_query`` exists so the failure the coverage report was made for can
    be reproduced: leave ``delete_blocked`` out and those rows are stranded.
    """

    root: Path
    work_query: tuple[Literal["creating", "active", "deleting", "delete_blocked", "deleted"], ...] = WORK_QUERY

    @staticmethod
    def defaults(home: Path) -> dict[str, Any]:
        return {"root": home / "buckets"}


def check_name(name: str) -> str:
    """A bucket name is a safe directory name: 3-63 of a-z, 0-9 and '-', no leading or trailing '-'."""
    if not _SAFE_NAME.match(name):
        raise invalid(
            [FieldError("name", "3-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit")],
            f"bucket name {name!r} is not a safe directory name",
        )
    return name


# -- desired state -----------------------------------------------------------------


def create(store: Store, name: str) -> str:
    """Ask for a bucket. Re-asking for a deleted bucket brings it back; otherwise it must be new."""
    return desired.create(store, check_name(name), CREATING)


def delete(store: Store, name: str) -> str:
    """Ask for a bucket to be deleted; the reconciler deletes it once it is empty."""
    return desired.request(store, check_name(name), DELETING, {CREATING, ACTIVE})


def rows(store: Store) -> list[dict[str, Any]]:
    """Every bucket row, by name."""
    return desired.rows(store)


# -- substrate ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """What sits under the bucket root at one name."""

    is_dir: bool
    objects: int | None  # None: the directory could not be read to count them
    size: int


def observe(root: Path) -> dict[str, Entry]:
    """Every entry under the root. Raises ``SubstrateError`` when the root cannot be read."""
    found: dict[str, Entry] = {}
    try:
        with os.scandir(root) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    # One bucket being emptied or removed meanwhile does not fail the pass.
                    found[e.name] = Entry(True, _count_or_none(Path(e.path)), 0)
                else:
                    found[e.name] = Entry(False, 0, e.stat(follow_symlinks=False).st_size)
    except OSError as exc:
        raise SubstrateError(f"cannot read bucket root {root}: {exc.strerror or exc}") from exc
    return found


def describe_desired(row: dict[str, Any]) -> str:
    return f"absent (status {row['status']})" if row["status"] in TOMBSTONES else f"directory (status {row['status']})"


def describe_actual(entry: Entry) -> str:
    if entry.is_dir:
        return "directory, objects not countable" if entry.objects is None else f"directory, {_objects(entry.objects)}"
    return f"not a directory ({entry.size} bytes)"


def _objects(n: int) -> str:
    return f"{n} object{'s' if n != 1 else ''}"


# -- the reconciler ----------------------------------------------------------------


class BucketsReconciler:
    """Converges bucket directories to the ``buckets`` table."""

    name = NAME
    items_reported = True

    def __init__(self, settings: BucketSettings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.root = Path(settings.root)
        self.work_query = tuple(settings.work_query)
        self.coverage = [coverage_spec(self.work_query)]
        self._ctx: PassContext | None = None
        store.require(BRANCH)

    def run(self, ctx: PassContext) -> None:
        if not self.root.exists() and ctx.first_pass:
            self.root.mkdir(parents=True, exist_ok=True)
        with self.store.connect() as conn:
            # A directory whose row sits in a status this work query does not select belongs to a
            # known bucket, not a stray: never reaped (coverage reports such rows as stranded).
            wanted, unselected = desired.work(conn, self.work_query)
        actual = {k: v for k, v in observe(self.root).items() if k not in unselected}
        self._ctx = ctx
        try:
            ctx.converge(
                KIND,
                wanted,
                actual,
                self.apply,
                equal=lambda row, entry: entry.is_dir,
                tombstone=lambda row: row["status"] in TOMBSTONES,
                describe=describe_desired,
                describe_actual=describe_actual,
                unsettled=lambda row: row["status"] != ACTIVE,
                settle=self.settle,
            )
        finally:
            self._ctx = None

    def apply(
        self, direction: Direction, name: str, row: dict[str, Any] | None, entry: Entry | None
    ) -> None:
        path = self.root / name
        if direction is Direction.RESTORE and row is not None:
            path.mkdir()
            self._status(name, row["status"], ACTIVE)
        elif direction is Direction.REAP:
            self._remove(name, "directory holds {}; it has no bucket row, so its owner must move or empty it")
        elif row is not None and row["status"] in TOMBSTONES:
            try:
                removed = self._remove(name, "bucket still holds {}; the tenant must empty it")
            except BlockedOnOwner:
                self._status(name, row["status"], DELETE_BLOCKED)
                raise
            if removed:
                # Gone by this pass's own rmdir. Gone by someone else's hand
                # instead, it is settled once later passes confirm it.
                self._status(name, row["status"], DELETED)
        else:
            raise RuntimeError(f"{path} exists and is not a directory")

    def settle(self, name: str, row: dict[str, Any], entry: Entry | None) -> None:
        """Move a row whose directory has shown its end state for ``confirmation_ticks`` passes."""
        path = self.root / name
        if row["status"] in TOMBSTONES:
            if os.path.lexists(path):
                raise Waiting(Reason.UNEXPECTED_STATE, f"{path} reappeared; status left {row['status']}")
            self._status(name, row["status"], DELETED)
        else:
            if not path.is_dir() or path.is_symlink():
                raise Waiting(Reason.UNEXPECTED_STATE, f"{path} vanished; status left {row['status']}")
            self._status(name, row["status"], ACTIVE)

    def _remove(self, name: str, held: str) -> bool:
        """Remove an empty bucket directory: whether this call removed it. Holding objects: the owner's move."""
        path = self.root / name
        try:
            remove_empty(self.root, name)
        except NotADirectoryError as exc:
            raise Waiting(Reason.UNEXPECTED_KIND, f"{path} is not a directory; left alone") from exc
        except Occupied as exc:
            now = _count_or_none(path)
            raise BlockedOnOwner(held.format(_objects(exc.objects if now is None else now))) from exc
        except FileNotFoundError:
            return False
        return True

    def _status(self, name: str, read: str, status: str) -> None:
        """Compare-and-set on the status this pass read: a change made meanwhile is left alone."""
        if self._ctx is None:
            raise RuntimeError("bucket statuses are written only during a pass")
        self._ctx.compare_and_set(buckets, name, read, status)


def _count_or_none(path: Path) -> int | None:
    try:
        return count_objects(path)
    except OSError:
        return None
