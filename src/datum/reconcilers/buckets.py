"""The ``buckets`` example reconciler: one directory per bucket under a root, objects are files.

Desired state is the ``buckets`` table. Statuses: ``creating``, ``active``,
``deleting``, ``delete_blocked``, ``deleted`` (terminal). A bucket asked to be
deleted while it still holds objects is parked in ``delete_blocked`` with
reason ``blocked_on_owner`` until its tenant empties it. A directory with no
desired row is reaped, breaker permitting. An entry under the root that is
not a directory is reported as ``unexpected_kind`` and never touched.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa

from datum.config import ReconcilerSettings
from datum.core.coverage import CoverageDecl
from datum.core.findings import FieldError, Problem, invalid
from datum.core.vocab import Direction, Reason
from datum.reconcile import BlockedOnOwner, CoverageSpec, PassContext, SubstrateError, Waiting
from datum.store import Store
from datum.store.types import UTCDateTime

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

metadata = sa.MetaData()
buckets = sa.Table(
    "buckets",
    metadata,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("status", sa.String(32), nullable=False, index=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

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


def _now() -> datetime:
    return datetime.now(UTC)


def create(store: Store, name: str) -> str:
    """Ask for a bucket. Re-asking for a deleted bucket brings it back; otherwise it must be new."""
    check_name(name)
    store.ensure(metadata)
    now = _now()
    with store.begin() as conn:
        row = conn.execute(sa.select(buckets.c.status).where(buckets.c.name == name)).first()
        if row is None:
            conn.execute(
                sa.insert(buckets).values(name=name, status=CREATING, created_at=now, updated_at=now)
            )
        elif row.status == DELETED:
            conn.execute(
                sa.update(buckets)
                .where(buckets.c.name == name)
                .values(status=CREATING, created_at=now, updated_at=now)
            )
        else:
            raise Problem.one("CONFLICT", f"bucket {name!r} already exists (status {row.status})")
    return CREATING


def delete(store: Store, name: str) -> str:
    """Ask for a bucket to be deleted; the reconciler deletes it once it is empty."""
    check_name(name)
    store.ensure(metadata)
    with store.begin() as conn:
        row = conn.execute(sa.select(buckets.c.status).where(buckets.c.name == name)).first()
        if row is None or row.status == DELETED:
            raise Problem.one("NOT_FOUND", f"no bucket named {name!r}")
        if row.status in (CREATING, ACTIVE):
            _set_status(conn, name, DELETING)
            return DELETING
        return str(row.status)


def rows(store: Store) -> list[dict[str, Any]]:
    """Every bucket row, by name."""
    store.ensure(metadata)
    with store.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(buckets).order_by(buckets.c.name)).mappings()]


def _set_status(conn: sa.Connection, name: str, status: str) -> None:
    conn.execute(
        sa.update(buckets).where(buckets.c.name == name).values(status=status, updated_at=_now())
    )


# -- substrate ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """What sits under the bucket root at one name."""

    is_dir: bool
    objects: int
    size: int


def observe(root: Path) -> dict[str, Entry]:
    """Every entry under the root. Raises ``SubstrateError`` when the root cannot be read."""
    found: dict[str, Entry] = {}
    try:
        with os.scandir(root) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    found[e.name] = Entry(True, _count_objects(Path(e.path)), 0)
                else:
                    found[e.name] = Entry(False, 0, e.stat(follow_symlinks=False).st_size)
    except OSError as exc:
        raise SubstrateError(f"cannot read bucket root {root}: {exc.strerror or exc}") from exc
    return found


def _count_objects(path: Path) -> int:
    count = 0
    for _dirpath, _dirs, files in os.walk(path):
        count += len(files)
    return count


def describe_desired(row: dict[str, Any]) -> str:
    return f"absent (status {row['status']})" if row["status"] in TOMBSTONES else f"directory (status {row['status']})"


def describe_actual(entry: Entry) -> str:
    if entry.is_dir:
        return f"directory, {entry.objects} object{'s' if entry.objects != 1 else ''}"
    return f"not a directory ({entry.size} bytes)"


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
        decl = CoverageDecl(
            kind=KIND,
            selected=frozenset(self.work_query),
            terminal=frozenset({DELETED}) - frozenset(self.work_query),
        )
        self.coverage = [CoverageSpec(decl, buckets)]
        store.ensure(metadata)

    def run(self, ctx: PassContext) -> None:
        if not self.root.exists() and ctx.first_pass:
            self.root.mkdir(parents=True, exist_ok=True)
        with self.store.connect() as conn:
            desired = {
                r["name"]: dict(r)
                for r in conn.execute(
                    sa.select(buckets).where(buckets.c.status.in_(self.work_query))
                ).mappings()
            }
            # A directory whose row sits in a status this work query does not
            # select belongs to a known bucket, not a stray: never reap it.
            # Coverage is what reports such rows as stranded.
            unselected = set(
                conn.execute(
                    sa.select(buckets.c.name).where(
                        buckets.c.status.not_in(self.work_query), buckets.c.status != DELETED
                    )
                ).scalars()
            )
        actual = {k: v for k, v in observe(self.root).items() if k not in unselected}
        ctx.converge(
            KIND,
            desired,
            actual,
            self.apply,
            equal=lambda row, entry: entry.is_dir,
            tombstone=lambda row: row["status"] in TOMBSTONES,
            describe=describe_desired,
            describe_actual=describe_actual,
        )
        self._settle(desired, actual)

    def apply(
        self, direction: Direction, name: str, row: dict[str, Any] | None, entry: Entry | None
    ) -> None:
        path = self.root / name
        if direction is Direction.RESTORE:
            path.mkdir()
            self._status(name, ACTIVE)
        elif direction is Direction.REAP:
            if entry is not None and not entry.is_dir:
                raise Waiting(Reason.UNEXPECTED_KIND, f"{path} is not a directory; left alone")
            shutil.rmtree(path)
        elif row is not None and row["status"] in TOMBSTONES:
            objects = _count_objects(path) if path.is_dir() else 0
            if objects:
                if row["status"] != DELETE_BLOCKED:
                    self._status(name, DELETE_BLOCKED)
                raise BlockedOnOwner(
                    f"bucket still holds {objects} object{'s' if objects != 1 else ''}; "
                    "the tenant must empty it"
                )
            if path.is_dir():
                path.rmdir()
            else:
                raise Waiting(Reason.UNEXPECTED_KIND, f"{path} is not a directory; left alone")
            self._status(name, DELETED)
        else:
            raise RuntimeError(f"{path} exists and is not a directory")

    def _settle(self, desired: dict[str, dict[str, Any]], actual: dict[str, Entry]) -> None:
        """Move rows whose substrate already agrees: created out of band, or already gone."""
        with self.store.begin() as conn:
            for name, row in desired.items():
                entry = actual.get(name)
                if row["status"] == CREATING and entry is not None and entry.is_dir:
                    _set_status(conn, name, ACTIVE)
                elif row["status"] in TOMBSTONES and entry is None:
                    _set_status(conn, name, DELETED)

    def _status(self, name: str, status: str) -> None:
        with self.store.begin() as conn:
            _set_status(conn, name, status)
