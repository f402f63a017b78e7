"""The approval hook (``[enroll] approve``) asked about pending enrollments off the request path.

Puppet runs its autosign policy executable per certificate request, and the
agent waits for its certificate: asked inside the request, a hook that takes
seconds (an inventory or cloud API lookup) would hold the request and a server
worker for each host enrolling at once. Here ``POST /v1/enroll`` answers
``pending`` at once and marks the identity due (``hook_due``); ``Asker.poll``,
on each server with a hook, takes the due requests (a compare-and-set on
``hook_due``, so one server of several asks), runs the hook on at most
``WORKERS`` of them at a time, each in a session of its own killed at
``[enroll] approve_timeout``, and records what it said: exit 0 ``active``, any
other exit ``denied``, no answer in time ``pending`` for ``datum enroll
approve``; a decision leaves its row in the audit log, in its transaction (principal ``hook:<path>``, action
``enroll:Approve`` or ``enroll:Deny``, as a person's would). A taking lasts the timeout plus ``SLACK``: a server that stopped
while asking leaves the request to the next poll of any server. The agent
(``datum agent enroll``) asks again until the request is decided.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from datum.core.redact import redacted
from datum.store import Store, audit
from datum.store.identities import ACTIVE, DENIED, PENDING
from datum.store.schema import host_identities

log = logging.getLogger("datum.fleet")

WORKERS = 4  # hooks running at once on one server
SLACK = timedelta(seconds=30)  # past the timeout, before another server asks about a request taken
PERIOD = 2.0  # seconds between two looks for due requests (an enrollment on this server wakes it at once)


def answer(hook: Path, timeout: float, asked: dict[str, Any]) -> tuple[str, str]:
    """(state, why) by the hook about ``asked``: ``active`` on exit 0, ``denied`` on any other exit, ``pending``
    when it did not answer within ``timeout`` seconds (killed, with whatever it started) or could not run."""
    host = asked["host"]
    try:  # a session of its own: at the timeout the hook and whatever it started are killed, pipes and all
        proc = subprocess.Popen([str(hook)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    except OSError as exc:
        return PENDING, f"the approval hook {hook} could not run ({exc.strerror}): waiting for datum enroll approve {host}"
    try:
        out, err = proc.communicate(json.dumps(asked, default=str), timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return PENDING, f"the approval hook {hook} did not answer within {timeout:g} s: waiting for datum enroll approve {host}"
    said = (out.strip() or err.strip()).splitlines()
    state = ACTIVE if proc.returncode == 0 else DENIED
    verb = "approved" if state == ACTIVE else f"denied (exit {proc.returncode})"
    return state, f"{verb} by the approval hook {hook}" + (f": {redacted(said[0][:200])}" if said else "")


def _asked(row: Any) -> dict[str, Any]:
    """What the hook reads on stdin about the request ``row``."""
    try:
        facts = json.loads(row.facts) if row.facts else {}
    except ValueError:
        facts = {}
    return {"host": row.host, "fingerprint": row.fingerprint, "source": row.source, "facts": facts,
            "joinToken": row.join_token, "group": row.group_name}


class Asker:
    """Asks the hook about the requests due on ``store`` (``poll``, from a thread of the server's)."""

    def __init__(self, store: Store, hook: Path, timeout: timedelta, clock: Callable[[], datetime],
                 workers: int = WORKERS) -> None:
        self.store = store
        self.hook = hook
        self.timeout = timeout
        self.clock = clock
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="enroll-approve")
        self._lock = threading.Lock()
        self._busy = 0

    def poll(self) -> None:
        """Take as many due requests as there are free workers, and ask the hook about each; a store fault is
        logged, and the next poll tries again."""
        with self._lock:
            free = self.workers - self._busy
        if free <= 0:
            return
        try:
            for row in self._take(free):
                with self._lock:
                    self._busy += 1
                self._pool.submit(self._ask, row)
        except Exception:  # noqa: BLE001 - serving goes on; the requests stay due
            log.exception("taking enrollment requests to the approval hook failed")

    def _take(self, most: int) -> list[Any]:
        """Up to ``most`` due requests, each now this server's (``hook_due`` moved past the hook's timeout)."""
        now = self.clock()
        due = (host_identities.c.state == PENDING) & (host_identities.c.hook_due <= now)
        with self.store.connect() as conn:
            rows = conn.execute(sa.select(host_identities).where(due)
                                .order_by(host_identities.c.hook_due, host_identities.c.host).limit(most)).all()
        taken = []
        for row in rows:
            with self.store.begin() as conn:
                moved = conn.execute(
                    sa.update(host_identities)
                    .where(due, host_identities.c.host == row.host, host_identities.c.public_key == row.public_key)
                    .values(hook_due=now + self.timeout + SLACK)
                ).rowcount
            if moved == 1:  # else another server took it first
                taken.append(row)
        return taken

    def _ask(self, row: Any) -> None:
        try:
            state, why = answer(self.hook, self.timeout.total_seconds(), _asked(row))
            log.info("host %s: %s", row.host, why)
            with self.store.begin() as conn:  # still the request asked about: not decided, forgotten or re-keyed
                decided = conn.execute(
                    sa.update(host_identities)
                    .where(host_identities.c.host == row.host, host_identities.c.public_key == row.public_key,
                           host_identities.c.state == PENDING)
                    .values(state=state, reason=why, hook_due=None, changed_at=self.clock())
                ).rowcount
                if decided and state != PENDING:  # a decision: its audit row, with it
                    audit.record(conn, self._row(row.host, state, why))
        except Exception:  # noqa: BLE001 - the request stays taken until SLACK passes, then is asked again
            log.exception("asking the approval hook about host %s failed", row.host)
        finally:
            with self._lock:
                self._busy -= 1

    def _row(self, host: str, state: str, why: str) -> audit.Entry:
        """The audit row of the hook's decision about ``host``: its principal ``hook:<the hook's path>``, the action
        a person's ``datum enroll approve`` or ``deny`` would have, this server's machine its source."""
        action = audit.APPROVE_HOST if state == ACTIVE else audit.DENY_HOST
        return audit.Entry(f"hook:{self.hook}", action, audit.cedar_uid("Host", host), source=socket.gethostname(),
                           request=f"[enroll] approve {self.hook}", detail=f"{state}: {why}")

    def close(self) -> None:
        """Wait for the hooks running (each ends by its timeout)."""
        self._pool.shutdown(wait=True)
