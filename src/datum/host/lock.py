"""What a host pass holds while it runs: the state file (opened by ``datum.host.statedb``, which owns
it); its pass lock; the signal watch. Kept light: the idle pass (``datum.host.idle``) starts cold with
this module.

One pass at a time: the state file is locked with ``flock`` on ``<state>.host-pass.lock``,
which the kernel releases with the process however it dies. The lock file holds the running
pass's record (holder, pid, start): it stays behind when the pass dies before its report is
persisted, which is how the next pass, and ``datum status``, know (``unfinished``).

Nothing beside the state is followed: the lock file is opened as the state file is
(``datum.host.statedb.open_plain``: a regular file of one link, a link planted there refused). The
state file's schema and every statement run on it are ``datum.host.statedb``'s; the reports as
JSON and ``datum status`` are ``datum.host.statefile``'s.

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

from datum.core import hostreasons
from datum.host.statedb import open_local, open_plain, problem, wait_for_writers

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
            fd = open_plain(path, os.O_RDWR | os.O_CREAT, "the lock file", 0o600)
        except FileNotFoundError as exc:
            raise problem(f"cannot open the lock file {path}: {exc.strerror}") from exc
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
            wait_for_writers(self.db, self.wait)
            self.taken_over = _parse(_read_fd(fd))  # a pass that died holding it
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, _flat(_record_of(self.holder) or {}).encode(), 0)
            except OSError as exc:  # a full disk: say so before anything is touched
                raise problem(
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
        return problem(
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
    return hostreasons.unfinished(record.get("startedAt"), record.get("pid"))


def running_record(path: str) -> dict[str, Any] | None:
    """A pass that started on the state file ``path`` and has not persisted its report: its record,
    ``running`` when it still runs."""
    import fcntl

    try:
        fd = open_plain(lock_path(path), os.O_RDONLY, "the lock file")
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
        fd = open_plain(path, os.O_RDONLY, "the lock file")
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
