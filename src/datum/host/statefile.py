"""The agent's state store: the last pass report per host, and the lease that keeps passes one at a time.

The tables are the store's (``datum.store.hosts``, ``datum.store.schema.locks``).
For a SQLite store whose schema exists, the agent reads and writes them with
the standard library's ``sqlite3`` in the same formats SQLAlchemy uses,
because importing SQLAlchemy alone costs more than the whole idle-pass budget
(measured: about 0.3-0.6 s on the 2-core machine). Any other store, or a
SQLite file without the schema yet, goes through ``datum.store``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from datum.core.findings import Problem

LOCK_NAME = "host-pass"
# The store schema (Alembic revision of datum.store.migrations) whose ``hosts``
# and ``locks`` columns the sqlite3 path below writes. Any other revision goes
# through datum.store; a test fails when the store's HEAD moves past this.
SCHEMA_REVISION = "0002"
_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"  # SQLAlchemy's DATETIME text on SQLite


class Unreadable(Exception):
    """The persisted report exists and cannot be read: the host state is ``unknown``."""


def store_url(state: str) -> str:
    """``--state``: a store URL as it is, or a path to a SQLite file."""
    if "://" in state:
        return state
    return f"sqlite:///{Path(state).expanduser().resolve()}"


def sqlite_path(url: str) -> str | None:
    if url.startswith("sqlite:///") and ":memory:" not in url:
        return url[len("sqlite:///") :]
    return None


def _when(value: datetime) -> str:
    return value.astimezone(UTC).strftime(_SQLITE_TIME)


class StateStore:
    """Where pass reports live, keyed by host name."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._path = sqlite_path(url)
        self._db: Any = None
        self._store: Any = None
        if self._path is None or not self._current():
            from datum.store import open_store

            # Creates or migrates the schema; this process then stays on SQLAlchemy.
            self._store = open_store(self.url)

    # -- backends ---------------------------------------------------------------------------
    def _current(self) -> bool:
        """Whether the SQLite file has the schema revision this module writes; then keep it open."""
        import sqlite3

        assert self._path is not None
        if not os.path.exists(self._path):
            return False
        try:
            db = sqlite3.connect(self._path, timeout=10, isolation_level=None)
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            revision = (
                db.execute("SELECT version_num FROM alembic_version").fetchone()
                if "alembic_version" in names
                else None
            )
        except sqlite3.Error as exc:
            raise Problem.one(
                "UNAVAILABLE", f"cannot open the state store {self._path}: {exc}"
            ) from exc
        if revision == (SCHEMA_REVISION,) and {"hosts", "locks"} <= names:
            db.execute("PRAGMA busy_timeout=10000")
            self._db = db
            return True
        db.close()
        return False

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
        if self._store is not None:
            self._store.dispose()

    # -- reports ----------------------------------------------------------------------------
    def get(self, host: str) -> dict[str, Any] | None:
        """The last persisted pass report of ``host``, or None; ``Unreadable`` when it cannot be read."""
        if self._db is not None:
            row = self._db.execute("SELECT report FROM hosts WHERE host = ?", (host,)).fetchone()
            try:
                report = json.loads(row[0]) if row else None
            except ValueError as exc:
                raise Unreadable(f"the last pass report of {host} cannot be read: {exc}") from exc
        else:
            from datum.store.hosts import get_host

            found = get_host(self._store, host)
            report = found["report"] if found else None
        if report is not None and not (
            isinstance(report, dict) and isinstance(report.get("state"), str)
        ):
            raise Unreadable(f"the last pass report of {host} cannot be read: not a pass report")
        return report

    def hosts(self) -> list[str]:
        if self._db is not None:
            return [r[0] for r in self._db.execute("SELECT host FROM hosts ORDER BY host")]
        from datum.store.hosts import list_hosts

        return [h["host"] for h in list_hosts(self._store)]

    def record(self, host: str, report: dict[str, Any]) -> None:
        """Persist ``report`` as ``host``'s latest pass (same row ``datum.store.hosts.record_pass`` writes)."""
        if self._db is None:
            from datum.store.hosts import record_pass

            record_pass(self._store, host, report)
            return
        finished = report.get("finishedAt")
        values = (
            report["state"],
            report.get("reason"),
            report.get("bootId"),
            _when(datetime.fromisoformat(finished)) if finished else None,
            _when(datetime.now(UTC)),
            json.dumps(report),
        )
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            cur = db.execute(
                "UPDATE hosts SET state=?, reason=?, boot_id=?, finished_at=?, updated_at=?, report=? WHERE host=?",
                (*values, host),
            )
            if cur.rowcount == 0:
                db.execute(
                    "INSERT INTO hosts (state, reason, boot_id, finished_at, updated_at, report, host)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (*values, host),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # -- the one-pass-at-a-time lease -------------------------------------------------------
    def _try_acquire(self, holder: str, ttl: timedelta) -> bool:
        now = datetime.now(UTC)
        if self._db is None:
            from datum.store.locks import try_acquire

            return try_acquire(self._store, LOCK_NAME, holder, now, ttl)
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            exists = db.execute("SELECT name FROM locks WHERE name = ?", (LOCK_NAME,)).fetchone()
            if exists is None:
                db.execute(
                    "INSERT INTO locks (name, holder, expires_at) VALUES (?, ?, ?)",
                    (LOCK_NAME, holder, _when(now + ttl)),
                )
                taken = 1
            else:
                taken = db.execute(
                    "UPDATE locks SET holder=?, expires_at=? WHERE name=?"
                    " AND (holder IS NULL OR expires_at < ? OR holder = ?)",
                    (holder, _when(now + ttl), LOCK_NAME, _when(now), holder),
                ).rowcount
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return taken == 1

    def renew(self, holder: str, ttl: timedelta) -> None:
        """Extend a lease this holder has (a long pass must not lose it to a second one)."""
        if not self._try_acquire(holder, ttl):
            raise Problem.one(
                "UNAVAILABLE", f"the pass lost its lease on {self.url} to {self._holder()}"
            )

    def _holder(self) -> str:
        if self._db is None:
            return "another agent"
        row = self._db.execute(
            "SELECT holder, expires_at FROM locks WHERE name = ?", (LOCK_NAME,)
        ).fetchone()
        return f"{row[0]} (lease until {row[1]} UTC)" if row and row[0] else "another agent"

    def _release(self, holder: str) -> None:
        if self._db is None:
            from datum.store.locks import release

            release(self._store, LOCK_NAME, holder)
            return
        self._db.execute(
            "UPDATE locks SET holder=NULL, expires_at=NULL WHERE name=? AND holder=?",
            (LOCK_NAME, holder),
        )

    @contextmanager
    def lease(self, wait: timedelta, ttl: timedelta) -> Iterator[str]:
        """Hold the pass lease of this store; wait at most ``wait``, then refuse clearly."""
        holder = f"{os.uname().nodename}:{os.getpid()}:{os.urandom(4).hex()}"
        deadline = time.monotonic() + wait.total_seconds()
        while not self._try_acquire(holder, ttl):
            if time.monotonic() >= deadline:
                raise Problem.one(
                    "UNAVAILABLE",
                    f"another pass is running against {self.url} (held by {self._holder()}); "
                    f"gave up after waiting {wait.total_seconds():g}s",
                )
            time.sleep(0.1)
        try:
            yield holder
        finally:
            self._release(holder)
