"""The host's own state: the last pass report per host, read and written as JSON.

``--state PATH`` (default ``[host] state``, else ``$DATUM_HOME/agent.db``) is
the agent's *local* state file, a SQLite file: its tables (the reports read
here, the spool and the last fetched manifest ``datum.agent.state`` reads)
are made and written by the agent alone with the standard library's
``sqlite3``, never by the server, and share no table with the server's store. The server
learns about hosts from their reports only (``--report-to``, ``datum agent``),
so every table has one writer; a URL given as ``--state`` is refused
(``state_path``). Importing SQLAlchemy alone costs more than the whole
idle-pass budget, so this module never imports it.

The file's schema, how it is opened and every statement run on it are
``datum.host.statedb``'s, its pass lock ``datum.host.lock``'s: the idle pass
loads those two without this module. ``StateStore`` reads and writes the
reports over them as JSON, and says when one could not be stored
(``NotPersisted``).
"""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import timedelta
from typing import Any

from datum.core import hostreasons
from datum.core.findings import ErrorCode, Finding, Problem
from datum.host import statedb
from datum.host.lock import Lease, lock_path, running_record, unfinished, unfinished_reason
from datum.host.statedb import Unreadable, Unstored, open_local

__all__ = [
    "NotPersisted",
    "StateStore",
    "Unreadable",
    "lock_path",
    "open_local",
    "state_path",
    "unfinished",
    "unfinished_reason",
]


class NotPersisted(Problem):
    """The pass ran and its report could not be stored in the state file at ``path`` (``why``):
    ``report`` is what to print before the error."""

    def __init__(self, path: str, why: object, report: dict[str, Any]) -> None:
        super().__init__([Finding(ErrorCode.UNAVAILABLE, f"the pass report was not stored in {path}: {why}")])
        self.report = report


# What --state adds to datum.home.url_refused: where this host's reports go instead.
INSTEAD = "The server's store learns about this host from the reports posted to it: --report-to URL, or datum agent"


def state_path(state: str, option: str = "--state") -> str:
    """``--state``: the absolute path of the host's local state file; a URL is a usage error.

    Made absolute without resolving links: a link planted at the state file is then refused where it is
    (``open_local``), never followed to whatever it names."""
    from datum.home import url_refused

    if why := url_refused(state):
        raise Problem.one(ErrorCode.USAGE, f"{option} {why}. {INSTEAD}")
    return os.path.abspath(os.path.expanduser(state))


class StateStore:
    """Where pass reports live, keyed by host name: the state file at ``path`` (``db``: one opened
    already, the connection a held pass lock came with, ``datum.host.lock.Held``)."""

    # The reboot markers a pass found stale (path: mtime), for the passes after it (datum.host.reboot).
    _STALE = "reboot.staleMarkers"

    def __init__(self, path: str, db: sqlite3.Connection | None = None) -> None:
        self.path = path
        self._db = open_local(path) if db is None else db

    def close(self) -> None:
        self._db.close()

    def get(self, host: str) -> dict[str, Any] | None:
        """The last persisted pass report of ``host``, or None; ``Unreadable`` when it cannot be read."""
        text = statedb.report_text(self._db, host)
        try:
            report = json.loads(text) if text is not None else None
        except ValueError as exc:
            raise Unreadable(hostreasons.unreadable(f"the last pass report of {host}", exc)) from exc
        if report is not None:
            from pydantic import ValidationError

            from datum.host.report import PassReport

            try:  # what reads it (datum status, datum reboot) reads a pass report: one, or unknown
                PassReport.model_validate(report)
            except ValidationError as exc:
                wrong = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or 'report'}: {e['msg']}" for e in exc.errors()[:3]
                )
                raise Unreadable(hostreasons.unreadable(f"the last pass report of {host}", f"not a pass report ({wrong})")) from exc
        return report

    def summary(self, host: str) -> dict[str, Any] | None:
        """``get``'s ``state``, ``finishedAt`` and ``reboot`` only, without parsing the whole report
        (``datum.host.statedb.last_pass``); ``Unreadable`` when it cannot be read."""
        found = statedb.last_pass(self._db, host)
        if found is not None and "reboot" in found:
            found["reboot"] = json.loads(found["reboot"])
        return found

    def hosts(self) -> list[str]:
        return statedb.hosts(self._db)

    def record(self, host: str, report: dict[str, Any], stale_markers: dict[str, int] | None = None) -> None:
        """Persist ``report`` as ``host``'s latest pass; ``NotPersisted`` (carrying it) when the store
        refuses. A report with a ``seq`` (``datum agent``'s) is spooled with it, in one transaction.

        ``stale_markers``: the reboot markers this pass found stale, kept with it (None: unchanged).
        """
        text = json.dumps(report)
        spool = (report["seq"], str(report.get("passId", ""))) if isinstance(report.get("seq"), int) else None
        meta = {self._STALE: json.dumps(stale_markers)} if stale_markers is not None else None
        try:
            statedb.write_pass(self._db, self.path, host, report["state"], report.get("finishedAt"), text, spool, meta)
        except Unstored as exc:
            raise NotPersisted(self.path, exc, report) from exc

    def stale_markers(self) -> dict[str, int]:
        """The reboot markers the last pass that found any found stale; {} when none, or unreadable."""
        text = statedb.meta(self._db, self._STALE)
        try:
            kept = json.loads(text) if text is not None else {}
        except ValueError:
            return {}
        ok = isinstance(kept, dict) and all(isinstance(v, int) for v in kept.values())
        return {str(k): v for k, v in kept.items()} if ok else {}

    def meta(self, key: str) -> str | None:
        """One ``agent_meta`` value (``datum.host.hooks``: the boot a reboot was made from), or None."""
        return statedb.meta(self._db, key)

    def set_meta(self, key: str, value: str | None) -> None:
        """Write (None: drop) one ``agent_meta`` value, committed."""
        statedb.set_meta(self._db, key, value)

    def lease(self, wait: timedelta, boot_id: str = "") -> Lease:
        """This state file's pass lock (``datum.host.lock.Lease``), held while entered; waits at most
        ``wait`` for a live holder, then refuses clearly."""
        return Lease(self.path, self._db, wait.total_seconds(), boot_id)

    def unfinished(self) -> dict[str, Any] | None:
        """A pass that started and has not persisted its report: its record, ``running`` when it still runs."""
        return running_record(self.path)
