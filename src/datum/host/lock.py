"""What a host pass holds while it runs: the state file, opened as a plain file; its pass lock; the
signal watch. Kept light: the idle pass (``datum.host.idle``) starts cold with this module.

One pass at a time: the state file is locked with ``flock`` on ``<state>.host-pass.lock``,
which the kernel releases with the process however it dies. The lock file holds the running
pass's record (holder, pid, start): it stays behind when the pass dies before its report is
persisted, which is how the next pass, and ``datum status``, know (``unfinished``).

Nothing beside the state is followed: the state file and its lock are opened only when they
are regular files of one link (a symbolic link, a directory or a FIFO planted there is refused
with a message naming it, and nothing it leads to is read, truncated or written); a new state
file is made with ``O_EXCL | O_NOFOLLOW``, 0600.

The report rows a pass reads and writes are here too (``last_pass``, ``write_pass``); the reports
as JSON, the spool's readers and ``datum status`` are ``datum.host.statefile``'s.

Light on purpose, the one place besides the idle pass and the recorder where speed decides how
the code is written: no ``json``, ``typing``, ``contextlib``, ``signal`` nor ``datetime`` for a
pass that answers. The holder's record is written with ``json``'s own C string encoder; the
signal handlers are installed through ``_signal``, the C module ``signal`` re-exports
(``signal`` imports ``enum``); ``TYPE_CHECKING`` is spelt here rather than imported.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's C module, without stubs
import os
import sqlite3
import time

try:
    from _json import encode_basestring_ascii as _encode
except ImportError:  # pragma: no cover - an interpreter without CPython's accelerator
    from json.encoder import encode_basestring_ascii as _encode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType, TracebackType
    from typing import Any

    from datum.core.findings import Problem

LOCK_NAME = "host-pass"
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
        raise _problem(f"cannot open the state file {path}: {why}") from exc


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
        fd = _open_plain(path, os.O_RDONLY, what)
    except FileNotFoundError:
        try:
            fd = _open_plain(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, what, 0o600)
        except FileExistsError:  # made since (by another agent, or a link planted): as it is now
            fd = _open_plain(path, os.O_RDONLY, what)
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077:  # it holds every File's content: an older version left it 0644
            os.fchmod(fd, 0o600)
        return st.st_dev, st.st_ino
    finally:
        os.close(fd)


def _open_plain(path: str, flags: int, what: str, mode: int = 0o644) -> int:
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


def _problem(message: str) -> Problem:
    """The ``UNAVAILABLE`` problem (``datum.core.findings`` imported once something is wrong)."""
    from datum.core.findings import Problem

    return Problem.one("UNAVAILABLE", message)


def _refused(what: str, path: str, found: str) -> Problem:
    return _problem(
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


# -- the one-pass-at-a-time lock ------------------------------------------------------------------
# A holder is "node:pid:random:boot id:process start:epoch ms": enough to
# name it, and to prove it dead from the same host without waiting for a TTL.


def lock_path(path: str) -> str:
    """The lock file beside a SQLite state file."""
    return f"{path}.{LOCK_NAME}.lock"


class Lease:
    """The pass lock of the state file at ``path``, held while entered.

    Entered, it waits at most ``wait`` seconds for a live holder (then refuses clearly: another
    pass is running), writes this pass's record into the lock file, and keeps the record of a
    pass that died holding it (``taken_over``). Left normally, it empties the record; left by an
    exception, the record stays: the pass did not finish.
    """

    def __init__(self, path: str, db: sqlite3.Connection, wait: float, boot_id: str = "") -> None:
        self.path, self.db, self.wait = path, db, wait
        self.holder = _new_holder(boot_id)
        self.taken_over: dict[str, Any] | None = None
        self._fd: int | None = None
        self._durable = False

    def mark_changing(self) -> None:
        """The pass is about to change the host: make its record survive a power cut (once)."""
        if self._fd is not None and not self._durable:
            os.fsync(self._fd)
            self._durable = True

    def __enter__(self) -> str:
        import fcntl

        path = lock_path(self.path)
        try:
            fd = _open_plain(path, os.O_RDWR | os.O_CREAT, "the lock file", 0o600)
        except FileNotFoundError as exc:
            raise _problem(f"cannot open the lock file {path}: {exc.strerror}") from exc
        try:
            deadline, tries = time.monotonic() + self.wait, 0
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    tries += 1
                    # A few tries at least: ``datum status`` holds it shared for an instant.
                    if time.monotonic() >= deadline and tries >= 3:
                        raise self._busy() from None
                    time.sleep(0.1)
            # a file locked by another process (datum status): waited for lock_wait
            self.db.execute(f"PRAGMA busy_timeout={max(1, int(self.wait * 1000))}")
            self.taken_over = _parse(_read_fd(fd))  # a pass that died holding it
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, _flat(_record_of(self.holder) or {}).encode(), 0)
            except OSError as exc:  # a full disk: say so before anything is touched
                raise _problem(
                    f"the state file {self.path} is not usable: cannot write {path}: {exc.strerror}"
                ) from exc
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self.holder

    def __exit__(
        self, kind: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if kind is None:  # when the pass raised, its record says it did not finish
                os.ftruncate(fd, 0)
                if self._durable:  # a record made durable is removed durably
                    os.fsync(fd)
        finally:
            os.close(fd)  # the only descriptor: the kernel drops the lock

    def _busy(self) -> Problem:
        record = _read_record(lock_path(self.path))
        holder = _describe(record) if record else "another agent"
        return _problem(
            f"another pass is running against {self.path} (held by {holder}); "
            f"gave up after waiting {self.wait:g}s"
        )


def unfinished(record: dict[str, Any] | None, last: dict[str, Any] | None) -> bool:
    """Whether a lock file's ``record`` is a pass that did not finish: no report persisted since it started.

    A pass killed after its report was stored, before it emptied its record, did finish.
    """
    if not record:
        return False
    from datetime import datetime

    try:
        started = datetime.fromisoformat(str(record.get("startedAt")))
        finished = datetime.fromisoformat(str((last or {}).get("finishedAt")))
    except ValueError:
        return True
    return finished < started


def unfinished_reason(record: dict[str, Any]) -> str:
    """What ``datum status`` says of a pass that started and never persisted its report."""
    return f"the pass started at {record.get('startedAt')} did not finish (pid {record.get('pid')})"


def running_record(path: str) -> dict[str, Any] | None:
    """A pass that started on the state file ``path`` and has not persisted its report: its record,
    ``running`` when it still runs."""
    import fcntl

    try:
        fd = _open_plain(lock_path(path), os.O_RDONLY, "the lock file")
    except Exception:  # noqa: BLE001 - none, or not one to read (a link): no pass record
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            running = False
        except BlockingIOError:
            running = True
        record = _parse(_read_fd(fd))
    finally:
        os.close(fd)  # drops a shared lock taken above
    return {**record, "running": running} if record else None


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22); '' unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def _new_holder(boot_id: str) -> str:
    pid = os.getpid()
    parts = (os.uname().nodename, str(pid), os.urandom(4).hex(), boot_id.replace(":", ""))
    return ":".join((*parts, _process_start(pid), str(time.time_ns() // 1_000_000)))


def _record_of(holder: str) -> dict[str, Any] | None:
    parts = holder.split(":")
    if len(parts) != 6 or not parts[1].isdigit():
        return None  # an older agent's holder: nothing to prove
    node, pid, _, boot, start, epoch = parts
    from datetime import UTC, datetime

    started = datetime.fromtimestamp(int(epoch) / 1000, UTC) if epoch.isdigit() else None
    return {
        "holder": holder,
        "node": node,
        "pid": int(pid),
        "bootId": boot,
        "processStart": start,
        "startedAt": started.isoformat() if started else None,
    }


def json_string(text: str) -> str:
    """``json.dumps(text)``, with ``json``'s own C encoder (the lock's record, the idle pass's times)."""
    encoded: str = _encode(text)
    return encoded


def _flat(record: dict[str, str | int | None]) -> str:
    """``json.dumps(record)`` for an object whose values are strings, integers or None."""

    def value(v: str | int | None) -> str:
        if v is None:
            return "null"
        return json_string(v) if isinstance(v, str) else str(int(v))

    return "{" + ", ".join(f"{json_string(k)}: {value(v)}" for k, v in record.items()) + "}"


def _read_fd(fd: int) -> bytes:
    return os.pread(fd, 4096, 0)


def _read_record(path: str) -> dict[str, Any] | None:
    try:
        fd = _open_plain(path, os.O_RDONLY, "the lock file")
    except Exception:  # noqa: BLE001 - gone, or not one to read
        return None
    try:
        return _parse(_read_fd(fd))
    finally:
        os.close(fd)


def _parse(data: bytes) -> dict[str, Any] | None:
    if not data.strip():
        return None  # no pass holds it, or the last one finished
    import json

    try:
        record = json.loads(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "pid" in record else None


def _describe(record: dict[str, Any]) -> str:
    return f"{record.get('holder')}, pid {record.get('pid')}, since {record.get('startedAt')}"


# -- the signal watch -----------------------------------------------------------------------------

# What stops a host pass: the service manager's SIGTERM, a person's Ctrl-C.
PASS_SIGNALS = (_signal.SIGTERM, _signal.SIGINT)
_NAMES = {_signal.SIGTERM: "SIGTERM", _signal.SIGINT: "SIGINT"}


class Watch:
    """While it is open, SIGTERM and SIGINT ask the pass to stop after its current resource
    (``signal``: the first one's name, None while none came) instead of ending the process; the
    first also puts back the handler that was there before, so a second gets its usual handling.
    ``close`` puts back every handler. Outside the main thread no handler can be installed: it
    watches nothing (``datum.signals.stop_on`` is ``datum reconcile``'s, with ``signal``)."""

    __slots__ = ("signal", "_before")

    def __init__(self) -> None:
        self.signal: str | None = None
        self._before: dict[int, Any] = {}
        try:
            for sig in PASS_SIGNALS:
                self._before[sig] = _signal.signal(sig, self._handler)
        except ValueError:  # not the main thread
            self.close()

    def is_set(self) -> bool:
        return self.signal is not None

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self.signal = _NAMES[signum]
        _signal.signal(signum, self._before[signum])

    def close(self) -> None:
        before, self._before = self._before, {}
        for sig, old in before.items():
            _signal.signal(sig, old)


# -- what a pass holds ----------------------------------------------------------------------------


class Held:
    """A pass's hold on the state file at ``path``: the file open (``db``), its pass lock entered
    (``lease``) and, when asked, the signal watch (``watch``). The idle pass hands it to the engine
    (``datum.host.agent.host_pass(held=)``), and so does ``datum agent``, which unpacks its manifest
    under it; ``close`` releases them, last taken first (an exception given as a context's
    ``__exit__`` gets it: the lock's record then stays)."""

    __slots__ = ("path", "db", "lease", "watch")

    def __init__(self, path: str, db: sqlite3.Connection, lease: Lease, watch: Watch | None) -> None:
        self.path, self.db, self.lease, self.watch = path, db, lease, watch

    def close(self, *exc: Any) -> None:
        try:
            if self.watch is not None:
                self.watch.close()
            self.lease.__exit__(*(exc or (None, None, None)))
        finally:
            self.db.close()


def hold(path: str, wait: float, boot_id: str, watch: bool = True) -> Held:
    """The state file at ``path`` opened, its pass lock taken (waiting at most ``wait`` seconds for a
    live holder) and, with ``watch``, the pass signals watched; released by the ``Held``'s ``close``."""
    db = open_local(path)
    lease = Lease(path, db, wait, boot_id)
    try:
        lease.__enter__()
    except BaseException:
        db.close()
        raise
    return Held(path, db, lease, Watch() if watch else None)
