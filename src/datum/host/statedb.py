"""The host's state file on disk, owned here: its schema, how it is opened, and every statement run on it.

``--state PATH`` (``[host] state``, else ``$DATUM_HOME/agent.db``) is the agent's own SQLite file,
written by the agent alone with the standard library's ``sqlite3`` (never SQLAlchemy: its import alone
costs more than an idle pass). Its four tables are declared once (``LOCAL_SCHEMA``) and every query on
them is a function here: the report rows a pass writes and reads (``write_pass``, ``last_pass``,
``report_text``, ``hosts``), the ``agent_meta`` keys (``meta``, ``set_meta``, ``next_seq``), the spool
of reports not yet delivered (``spooled``, ``delivered``, ``trim_spool``) and the last manifest the
server gave (``last_manifest``, ``keep_manifest``). Callers (``datum.host.statefile``'s ``StateStore``,
``datum.agent.state``, the idle pass, the pass lock) call these and hold no SQL of their own.

Nothing beside the state is followed: the file is opened only when it is a regular file of one link
(a symbolic link, a directory or a FIFO planted there is refused with a message naming it, and nothing
it leads to is read, truncated or written); a new state file is made with ``O_EXCL | O_NOFOLLOW``, 0600.

Light on purpose: the idle pass (``datum.host.idle``) starts cold with this module, through the pass
lock (``datum.host.lock`` says how: no ``json``, no ``typing``, ``TYPE_CHECKING`` spelt by hand).
"""

from __future__ import annotations

import os
import sqlite3

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from datum.core.findings import Problem

# The local file's own schema: one table for the reports, the agent's beside it
# (datum.agent.state). Made with CREATE TABLE IF NOT EXISTS, so a version is only
# needed when a column changes.
LOCAL_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_reports (
    host TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    finished_at TEXT,
    updated_at TEXT NOT NULL,
    report TEXT NOT NULL
);
-- datum agent: reports not yet delivered to the server, in sequence order.
CREATE TABLE IF NOT EXISTS agent_spool (
    seq INTEGER PRIMARY KEY,
    pass_id TEXT NOT NULL,
    report TEXT NOT NULL
);
-- datum agent: the last manifest the server gave (applied when it cannot be fetched).
CREATE TABLE IF NOT EXISTS agent_manifest (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    digest TEXT NOT NULL,
    body BLOB NOT NULL,
    fetched_at TEXT NOT NULL
);
-- datum agent: counters (the per-host sequence number).
CREATE TABLE IF NOT EXISTS agent_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


class Unreadable(Exception):
    """The persisted report exists and cannot be read: the host state is ``unknown``."""


class Unstored(Exception):
    """The state file refused a report (a full or read-only disk, a lock held past its wait): why."""


# -- the state file, opened as a plain file ------------------------------------------------------


def open_local(path: str) -> sqlite3.Connection:
    """The agent's local state file, its tables made when missing (``sqlite3``, autocommit).

    On a first pass the directory it lives in may not exist yet (``$DATUM_HOME``
    on a fresh host): it is made, readable by its owner only (0700). The file
    is a regular file of one link, made 0600 when missing (``_plain_state``), and
    still the same one once SQLite has opened it; anything else is refused.
    """
    try:
        try:
            return _connect(path)
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if not parent or os.path.lexists(parent):
                raise
            os.makedirs(parent, mode=0o700)
            return _connect(path)
    except (sqlite3.Error, OSError) as exc:
        why = _why(exc, path) if isinstance(exc, sqlite3.Error) else f"cannot make {exc.filename}: {exc.strerror}"
        raise problem(f"cannot open the state file {path}: {why}") from exc


def _connect(path: str) -> sqlite3.Connection:
    found = _plain_state(path)
    db = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) != found:  # swapped between the check and SQLite's open
            raise _refused("the state file", path, "not the file that was checked (replaced while opened)")
        db.execute("PRAGMA busy_timeout=10000")
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name='agent_meta'").fetchone():
            db.executescript(LOCAL_SCHEMA)
    except BaseException:
        db.close()
        raise
    return db


def _plain_state(path: str) -> tuple[int, int]:
    """The (device, inode) of the state file, a regular file of one link; a missing one is made (0600,
    ``O_EXCL | O_NOFOLLOW``: never through a link). Anything else there is refused."""
    what = "the state file"
    try:
        fd = open_plain(path, os.O_RDONLY, what)
    except FileNotFoundError:
        try:
            fd = open_plain(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, what, 0o600)
        except FileExistsError:  # made since (by another agent, or a link planted): as it is now
            fd = open_plain(path, os.O_RDONLY, what)
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077:  # it holds every File's content: an older version left it 0644
            os.fchmod(fd, 0o600)
        return st.st_dev, st.st_ino
    finally:
        os.close(fd)


def open_plain(path: str, flags: int, what: str, mode: int = 0o644) -> int:
    """``path`` opened without following a link (nor blocking on a FIFO): a descriptor of a regular file
    with one link, or the ``UNAVAILABLE`` problem naming what is there instead (nothing it leads to is
    touched). ``FileNotFoundError`` and ``FileExistsError`` (with ``O_EXCL``) as they are."""
    import errno
    import stat

    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except (FileNotFoundError, FileExistsError):
        raise
    except OSError as exc:
        raise _refused(what, path, "a symbolic link" if exc.errno == errno.ELOOP else str(exc.strerror)) from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise _refused(what, path, "a file with other hard links" if stat.S_ISREG(st.st_mode) else "not a regular file")
    return fd


def problem(message: str) -> Problem:
    """The ``UNAVAILABLE`` problem (``datum.core.findings`` imported once something is wrong)."""
    from datum.core.findings import ErrorCode, Problem

    return Problem.one(ErrorCode.UNAVAILABLE, message)


def _refused(what: str, path: str, found: str) -> Problem:
    return problem(
        f"{what} {path} is {found}: refused, and nothing it leads to is touched "
        "(remove it, and the next pass makes its own)"
    )


def _why(exc: BaseException, path: str) -> str:
    """What SQLite said, plus the real cause when the disk under the store is full (it says 'disk I/O error')."""
    text = str(exc)
    try:
        full = os.statvfs(os.path.dirname(path) or ".").f_bavail == 0
    except OSError:
        full = False
    return f"{text} (no space left on device)" if full and "full" not in text else text


# -- the report rows ------------------------------------------------------------------------------


def last_pass(db: sqlite3.Connection, host: str) -> dict[str, Any] | None:
    """What a pass needs of ``host``'s last report: its ``state``, ``finishedAt`` and ``reboot`` (as
    JSON text), without parsing the whole report (1,000 resources, ~200 KB): the state and the end
    are columns ``write_pass`` writes with it; the report is searched for ``"reboot"`` (a byte
    search) and parsed by SQLite's ``json_extract`` only where it is found. ``Unreadable`` when it
    cannot be read."""
    try:
        row = db.execute(
            "SELECT state, finished_at, CASE WHEN instr(report, '\"reboot\"') > 0"
            " THEN json(json_extract(report, '$.reboot')) END FROM agent_reports WHERE host = ?",
            (host,),
        ).fetchone()
    except sqlite3.OperationalError as exc:  # malformed JSON
        raise Unreadable(f"the last pass report of {host} cannot be read: {exc}") from exc
    if row is None:
        return None
    state, finished, reboot = row
    if not isinstance(state, str):
        raise Unreadable(f"the last pass report of {host} cannot be read: not a pass report")
    out: dict[str, Any] = {"state": state}
    if finished is not None:
        out["finishedAt"] = finished
    if reboot is not None:
        out["reboot"] = reboot
    return out


def write_pass(
    db: sqlite3.Connection,
    path: str,
    host: str,
    state: str,
    finished: str | None,
    text: str,
    spool: tuple[int, str] | None = None,
    meta: dict[str, str] | None = None,
) -> None:
    """Persist a report already in JSON (``text``) as ``host``'s last pass in the state file
    ``db`` opened at ``path``, in one transaction; ``spool``: its (seq, passId) when ``datum
    agent`` delivers it; ``meta``: ``agent_meta`` keys written with it. ``Unstored`` says why
    SQLite refused it."""
    import datetime

    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "INSERT OR REPLACE INTO agent_reports (host, state, finished_at, updated_at, report)"
                " VALUES (?, ?, ?, ?, ?)",
                (host, state, finished, datetime.datetime.now(datetime.UTC).isoformat(), text),
            )
            if spool is not None:  # datum agent's pass: to be delivered, with it
                db.execute("INSERT OR IGNORE INTO agent_spool (seq, pass_id, report) VALUES (?, ?, ?)", (*spool, text))
            for key, value in (meta or {}).items():
                db.execute("INSERT OR REPLACE INTO agent_meta (key, value) VALUES (?, ?)", (key, value))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # SQLite already rolled back on a full disk: keep the real error
                db.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise Unstored(_why(exc, path)) from exc


def report_text(db: sqlite3.Connection, host: str) -> str | None:
    """``host``'s last pass report as stored (JSON text), or None."""
    row = db.execute("SELECT report FROM agent_reports WHERE host = ?", (host,)).fetchone()
    return row[0] if row else None


def hosts(db: sqlite3.Connection) -> list[str]:
    """The hosts with a pass report, by name."""
    return [r[0] for r in db.execute("SELECT host FROM agent_reports ORDER BY host")]


# -- the agent_meta keys -------------------------------------------------------------------------


def meta(db: sqlite3.Connection, key: str) -> str | None:
    """One ``agent_meta`` value, or None."""
    row = db.execute("SELECT value FROM agent_meta WHERE key = ?", (key,)).fetchone()
    return str(row[0]) if row and row[0] is not None else None


def set_meta(db: sqlite3.Connection, key: str, value: str | None) -> None:
    """Write (None: drop) one ``agent_meta`` value, committed."""
    with db:
        if value is None:
            db.execute("DELETE FROM agent_meta WHERE key = ?", (key,))
        else:
            db.execute("INSERT OR REPLACE INTO agent_meta (key, value) VALUES (?, ?)", (key, value))


def next_seq(db: sqlite3.Connection) -> int:
    """The next sequence number of this host's passes (``agent_meta`` ``seq``), committed before it is returned.

    A new state file starts at the current time in milliseconds, so an agent whose file was lost still
    outranks every pass it sent before.
    """
    import time

    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute("SELECT value FROM agent_meta WHERE key = 'seq'").fetchone()
        seq = int(row[0]) + 1 if row else int(time.time() * 1000)
        db.execute("INSERT OR REPLACE INTO agent_meta (key, value) VALUES ('seq', ?)", (str(seq),))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return seq


def wait_for_writers(db: sqlite3.Connection, seconds: float) -> None:
    """How long a statement waits for another process writing the file (``datum status`` reading it)."""
    db.execute(f"PRAGMA busy_timeout={max(1, int(seconds * 1000))}")


# -- the spool: reports not yet delivered to the server -------------------------------------------


def spooled(db: sqlite3.Connection) -> list[tuple[int, str]]:
    """The undelivered reports (seq, JSON text), oldest first."""
    return [(int(seq), str(report)) for seq, report in db.execute("SELECT seq, report FROM agent_spool ORDER BY seq")]


def delivered(db: sqlite3.Connection, seq: int) -> None:
    db.execute("DELETE FROM agent_spool WHERE seq = ?", (seq,))


def trim_spool(db: sqlite3.Connection, keep: int) -> int:
    """Drop the oldest undelivered reports past the newest ``keep``; how many went."""
    cur = db.execute(
        "DELETE FROM agent_spool WHERE seq NOT IN (SELECT seq FROM agent_spool ORDER BY seq DESC LIMIT ?)", (keep,)
    )
    return int(cur.rowcount or 0)


# -- the last manifest the server gave ------------------------------------------------------------


def last_manifest(db: sqlite3.Connection) -> tuple[str, bytes, str] | None:
    """The last manifest the server gave: (digest, body, fetched at)."""
    row = db.execute("SELECT digest, body, fetched_at FROM agent_manifest WHERE id = 1").fetchone()
    return (str(row[0]), bytes(row[1]), str(row[2])) if row else None


def keep_manifest(db: sqlite3.Connection, digest: str, body: bytes, fetched_at: str) -> None:
    db.execute(
        "INSERT OR REPLACE INTO agent_manifest (id, digest, body, fetched_at) VALUES (1, ?, ?, ?)",
        (digest, body, fetched_at),
    )
