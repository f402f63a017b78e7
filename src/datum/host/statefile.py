"""The host's own state: the last pass report per host, and the lock that keeps passes one at a time.

``--state PATH`` (default ``[host] state``, else ``$DATUM_HOME/agent.db``) is
the agent's *local* state file, a SQLite file: its tables (``agent_reports``
here, the spool and the last fetched manifest of ``datum.agent.state``) are
made and written by the agent alone with the standard library's ``sqlite3``,
never by the server, and share no table with the server's store. The server
learns about hosts from their reports only (``--report-to``, ``datum agent``),
so every table has one writer; a URL given as ``--state`` is refused
(``state_path``). Importing SQLAlchemy alone costs more than the whole
idle-pass budget (about 0.3-0.6 s on the 2-core machine), so this module
never imports it.

One pass at a time: the state file is locked with ``flock`` beside it, which
the kernel releases with the process however it dies.

Nothing beside the state is followed: the state file and its lock are opened
only when they are regular files of one link (a symbolic link, a directory or
a FIFO planted there is refused with a message naming it, and nothing it
leads to is read, truncated or written); a new state file is made with
``O_EXCL | O_NOFOLLOW``.
"""

from __future__ import annotations

import os
import time

from datum.core.jsontext import flat

# Light on purpose: the idle pass (``datum.host.idle``) uses this module and loads neither
# ``json`` (with ``re`` and ``enum``) nor ``typing``, ``pathlib`` or ``contextlib`` unless a
# report is read or written as JSON here.
TYPE_CHECKING = False
if TYPE_CHECKING:  # imported where a problem is raised: a pass that raises none never loads it
    from collections.abc import Callable
    from datetime import timedelta
    from types import TracebackType
    from typing import Any

    from datum.core.findings import Problem

LOCK_NAME = "host-pass"
# The local file's own schema: one table here, more in datum.agent.state. Made with
# CREATE TABLE IF NOT EXISTS, so a version is only needed when a column changes.
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


def __getattr__(name: str) -> Any:
    if name == "NotPersisted":
        return _not_persisted()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _not_persisted() -> type[Problem]:
    """``NotPersisted``, made on first use (a ``Problem``: ``datum.core.findings`` is not imported before)."""
    global _NOT_PERSISTED
    if _NOT_PERSISTED is None:
        from datum.core.findings import Problem

        class NotPersisted(Problem):
            """The pass ran and its report could not be stored: ``report`` is what to print before the error."""

            report: dict[str, Any] | None = None

        NotPersisted.__module__ = __name__
        _NOT_PERSISTED = NotPersisted
    return _NOT_PERSISTED


_NOT_PERSISTED: type[Problem] | None = None


def _why(exc: BaseException, path: str | None) -> str:
    """What SQLite said, plus the real cause when the disk under the store is full (it says 'disk I/O error')."""
    text = str(exc)
    try:
        full = path is not None and os.statvfs(os.path.dirname(path) or ".").f_bavail == 0
    except OSError:
        full = False
    return f"{text} (no space left on device)" if full and "full" not in text else text


# What --state adds to datum.home.url_refused: where this host's reports go instead.
INSTEAD = "The server's store learns about this host from the reports posted to it: --report-to URL, or datum agent"


def state_path(state: str, option: str = "--state") -> str:
    """``--state``: the absolute path of the host's local state file; a URL is a usage error.

    Made absolute without resolving links: a link planted at the state file is then refused where it is
    (``open_local``), never followed to whatever it names."""
    from datum.home import url_refused

    if why := url_refused(state):
        from datum.core.findings import Problem

        raise Problem.one("USAGE", f"{option} {why}. {INSTEAD}")
    return os.path.abspath(os.path.expanduser(state))


class StateStore:
    """Where pass reports live, keyed by host name."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock_fd: int | None = None
        self._durable = False
        # The record of a pass that died holding the lock this process took next.
        self.taken_over: dict[str, Any] | None = None
        self._db = open_local(path)

    def close(self) -> None:
        self._db.close()

    # -- reports ----------------------------------------------------------------------------
    def get(self, host: str) -> dict[str, Any] | None:
        """The last persisted pass report of ``host``, or None; ``Unreadable`` when it cannot be read."""
        import json

        row = self._db.execute("SELECT report FROM agent_reports WHERE host = ?", (host,)).fetchone()
        try:
            report = json.loads(row[0]) if row else None
        except ValueError as exc:
            raise Unreadable(f"the last pass report of {host} cannot be read: {exc}") from exc
        if report is not None:
            from pydantic import ValidationError

            from datum.host.report import PassReport

            try:  # what reads it (datum status, datum reboot) reads a pass report: one, or unknown
                PassReport.model_validate(report)
            except ValidationError as exc:
                wrong = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or 'report'}: {e['msg']}" for e in exc.errors()[:3]
                )
                raise Unreadable(f"the last pass report of {host} cannot be read: not a pass report ({wrong})") from exc
        return report

    # What a pass needs of the last one: its state, when it finished, its reboot.
    _SUMMARY = ("state", "finishedAt", "reboot")

    def summary(self, host: str) -> dict[str, Any] | None:
        """``get``'s ``state``, ``finishedAt`` and ``reboot`` only, without parsing the whole report
        (1,000 resources, ~200 KB): the state and the end are columns ``record`` writes with it;
        the report is searched for ``"reboot"`` (a byte search) and parsed by SQLite's
        ``json_extract`` only where it is found (where it is not, the report has no ``reboot``)."""
        import sqlite3

        try:
            row = self._db.execute(
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
            import json

            out["reboot"] = json.loads(reboot)
        return out

    def hosts(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT host FROM agent_reports ORDER BY host")]

    def record(self, host: str, report: dict[str, Any], stale_markers: dict[str, int] | None = None) -> None:
        """Persist ``report`` as ``host``'s latest pass; ``NotPersisted`` (carrying it) when the store refuses.

        ``stale_markers``: the reboot markers this pass found stale, kept with it (None: unchanged).
        """
        self._persist(lambda: self._record(host, report, stale_markers), lambda: report)

    # The reboot markers a pass found stale (path: mtime), for the passes after it (datum.host.reboot).
    _STALE = "reboot.staleMarkers"

    def stale_markers(self) -> dict[str, int]:
        """The reboot markers the last pass that found any found stale; {} when none, or unreadable."""
        import json

        row = self._db.execute("SELECT value FROM agent_meta WHERE key = ?", (self._STALE,)).fetchone()
        try:
            kept = json.loads(row[0]) if row else {}
        except ValueError:
            return {}
        ok = isinstance(kept, dict) and all(isinstance(v, int) for v in kept.values())
        return {str(k): v for k, v in kept.items()} if ok else {}

    def record_idle(self, host: str, finished: str, text: str) -> None:
        """``record`` for an idle pass's converged report, already in JSON (``datum.host.idle``)."""

        def report() -> dict[str, Any]:
            import json

            loaded: dict[str, Any] = json.loads(text)
            return loaded

        self._persist(lambda: self.record_text(host, "converged", finished, text), report)

    def _persist(self, write: Callable[[], None], report: Callable[[], dict[str, Any]]) -> None:
        import sqlite3

        try:
            write()
        except Exception as exc:
            from datum.core.findings import Problem

            if not isinstance(exc, Problem | sqlite3.Error):
                raise
            why = exc.findings[0].message if isinstance(exc, Problem) else _why(exc, self.path)
            failed = _not_persisted().one("UNAVAILABLE", f"the pass report was not stored in {self.path}: {why}")
            failed.report = report()  # type: ignore[attr-defined]
            raise failed from exc

    def _record(self, host: str, report: dict[str, Any], stale_markers: dict[str, int] | None = None) -> None:
        import json

        text = json.dumps(report)
        spool = (report["seq"], str(report.get("passId", ""))) if isinstance(report.get("seq"), int) else None
        meta = {self._STALE: json.dumps(stale_markers)} if stale_markers is not None else None
        self.record_text(host, report["state"], report.get("finishedAt"), text, spool, meta)

    def record_text(
        self,
        host: str,
        state: str,
        finished: str | None,
        text: str,
        spool: tuple[int, str] | None = None,
        meta: dict[str, str] | None = None,
    ) -> None:
        """``record``'s transaction, for a report already in JSON (``text``); ``spool``: its
        (seq, passId) when ``datum agent`` delivers it; ``meta``: ``agent_meta`` keys written with
        it. Raises what SQLite raises."""
        from datetime import UTC, datetime

        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "INSERT OR REPLACE INTO agent_reports (host, state, finished_at, updated_at, report)"
                " VALUES (?, ?, ?, ?, ?)",
                (host, state, finished, datetime.now(UTC).isoformat(), text),
            )
            if spool is not None:  # datum agent's pass: to be delivered, with it
                db.execute(
                    "INSERT OR IGNORE INTO agent_spool (seq, pass_id, report) VALUES (?, ?, ?)",
                    (*spool, text),
                )
            for key, value in (meta or {}).items():
                db.execute("INSERT OR REPLACE INTO agent_meta (key, value) VALUES (?, ?)", (key, value))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # SQLite already rolled back on a full disk: keep the real error
                db.execute("ROLLBACK")
            raise

    # -- the one-pass-at-a-time lock --------------------------------------------------------
    def _holder(self) -> str:
        record = _read_record(lock_path(self.path))
        return _describe(record) if record else "another agent"

    def lease(self, wait: timedelta, boot_id: str = "") -> _Lease:
        """Hold the pass lock of this state file; wait at most ``wait`` for a live holder, then refuse clearly.

        The lock is ``flock`` on ``<state>.host-pass.lock``: the kernel
        releases it with the process (SIGKILL and OOM included), so a dead
        pass never blocks the next, and it never expires under a live one. The
        file holds the running pass's record (pid, start); it stays behind when
        the pass dies before its report is persisted, which is how
        ``unfinished`` knows.
        """
        self.taken_over = None
        return _Lease(self, _new_holder(boot_id), wait)

    def _busy(self, wait: timedelta) -> Problem:
        from datum.core.findings import Problem

        return Problem.one(
            "UNAVAILABLE",
            f"another pass is running against {self.path} (held by {self._holder()}); "
            f"gave up after waiting {wait.total_seconds():g}s",
        )

    def mark_changing(self) -> None:
        """The pass is about to change the host: make its record survive a power cut (once)."""
        if self._lock_fd is not None and not self._durable:
            os.fsync(self._lock_fd)
            self._durable = True

    def unfinished(self) -> dict[str, Any] | None:
        """A pass that started and has not persisted its report: its record, ``running`` when it still runs."""
        import fcntl

        try:
            fd = _open_plain(lock_path(self.path), os.O_RDONLY, "the lock file")
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


class Held:
    """A state file whose pass lock is held, with what releases it, last taken first (an
    ``ExitStack`` without ``contextlib``): ``datum.host.agent.host_pass(held=)`` takes it over and
    releases it when its pass ends. ``stop``: the signal watch taken with it, if one was
    (``datum.host.idle``, whose idle pass hands its lock and a signal that came to the engine).
    """

    __slots__ = ("store", "stop", "_exits")

    def __init__(self, store: StateStore, stop: Any = None) -> None:
        self.store, self.stop = store, stop
        self._exits: list[Callable[..., Any]] = []

    def enter(self, context: Any) -> Any:
        """Enter ``context``; its exit is made by ``close``."""
        value = context.__enter__()
        self._exits.append(context.__exit__)
        return value

    def callback(self, release: Callable[[], Any]) -> None:
        self._exits.append(lambda *_exc: release())

    def close(self, *exc: Any) -> None:
        """Release what is held, last taken first; ``exc`` as a context's ``__exit__`` gets it."""
        exits, self._exits = self._exits, []
        for leave in reversed(exits):
            leave(*(exc or (None, None, None)))


def hold(path: str, wait: timedelta, boot_id: str) -> Held:
    """The state file at ``path`` opened and its pass lock taken (``StateStore.lease``: waiting at
    most ``wait``), both released by the ``Held``'s ``close``."""
    store = StateStore(path)
    held = Held(store)
    held.callback(store.close)
    try:
        held.enter(store.lease(wait, boot_id))
    except BaseException as exc:
        held.close(type(exc), exc, exc.__traceback__)
        raise
    return held


class _Lease:
    """``StateStore.lease``'s hold of the pass lock: entered, it waits for the lock and writes this
    pass's record into the lock file; left normally, it empties the record. Left by an exception,
    the record stays: the pass did not finish."""

    def __init__(self, store: StateStore, holder: str, wait: timedelta) -> None:
        self.store, self.holder, self.wait = store, holder, wait
        self._fd: int | None = None

    def __enter__(self) -> str:
        import fcntl

        store, wait = self.store, self.wait
        path = lock_path(store.path)
        try:
            fd = _open_plain(path, os.O_RDWR | os.O_CREAT, "the lock file", 0o600)
        except FileNotFoundError as exc:
            from datum.core.findings import Problem

            raise Problem.one("UNAVAILABLE", f"cannot open the lock file {path}: {exc.strerror}") from exc
        try:
            deadline, tries = time.monotonic() + wait.total_seconds(), 0
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    tries += 1
                    # A few tries at least: ``datum status`` holds it shared for an instant.
                    if time.monotonic() >= deadline and tries >= 3:
                        raise store._busy(wait) from None
                    time.sleep(0.1)
            # a file locked by another process (datum status): waited for lock_wait
            store._db.execute(f"PRAGMA busy_timeout={max(1, int(wait.total_seconds() * 1000))}")
            store.taken_over = _parse(_read_fd(fd))  # a pass that died holding it
            record = _record_of(self.holder) or {}
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, flat(record).encode(), 0)
            except OSError as exc:  # a full disk: say so before anything is touched
                from datum.core.findings import Problem

                raise Problem.one(
                    "UNAVAILABLE",
                    f"the state file {store.path} is not usable: cannot write {path}: {exc.strerror}",
                ) from exc
        except BaseException:
            os.close(fd)
            raise
        self._fd = store._lock_fd = fd
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
                if self.store._durable:  # a record made durable is removed durably
                    os.fsync(fd)
        finally:
            self.store._lock_fd = None
            os.close(fd)  # the only descriptor: the kernel drops the lock


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


def open_local(path: str) -> Any:
    """The agent's local state file, its tables made when missing (``sqlite3``, autocommit).

    On a first pass the directory it lives in may not exist yet (``$DATUM_HOME``
    on a fresh host): it is made, readable by its owner only (0700). The file
    is a regular file of one link, made 0600 when missing (``_plain_state``), and
    still the same one once SQLite has opened it; anything else is refused.
    """
    import sqlite3

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
        from datum.core.findings import Problem

        why = _why(exc, path) if isinstance(exc, sqlite3.Error) else f"cannot make {exc.filename}: {exc.strerror}"
        raise Problem.one("UNAVAILABLE", f"cannot open the state file {path}: {why}") from exc


def _connect(path: str) -> Any:
    import sqlite3

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


# -- who holds the pass lock ------------------------------------------------------------------
# A holder is "node:pid:random:boot id:process start:epoch ms": enough to
# name it, and to prove it dead from the same host without waiting for a TTL.


def lock_path(path: str) -> str:
    """The lock file beside a SQLite state file."""
    return f"{path}.{LOCK_NAME}.lock"


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


def _refused(what: str, path: str, found: str) -> Problem:
    from datum.core.findings import Problem

    return Problem.one(
        "UNAVAILABLE",
        f"{what} {path} is {found}: refused, and nothing it leads to is touched "
        "(remove it, and the next pass makes its own)",
    )


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
