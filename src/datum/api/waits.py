"""Long polls on a host's effective manifest: ``GET /v1/hosts/{host}/manifest?wait=N`` with ``If-None-Match``.

An agent that has its manifest asks with its ``ETag`` and ``wait``: the server
answers as soon as the host's effective manifest differs from it (200, the
new manifest), else ``304`` when ``wait`` seconds have passed. Either answer
carries ``Datum-Wait: N``, which tells the agent this server holds waits (a
server that does not answers at once without it, and the agent falls back to
its interval).

What the server composes from is the fleet directory alone (``[fleet]
manifests``, ``datum.fleet.effective``), so a change is a change of its
files. One task per process (``FleetChanges``) reads the directory's
``signature`` (a ``stat`` per path, in a worker thread) every ``PERIOD``
seconds; when it moved, every waiter wakes and asks for its host's manifest
again (a composition is made once for all the hosts that share it), answers
when its digest moved, and waits again for the rest of its time when it did
not. A waiter is a coroutine parked on one ``asyncio.Event`` shared by all
and a timer: no thread, a few KiB with its connection. Replicas on one store
each watch their own directory, which is what each serves from (docs/fleet.md
says why not ``LISTEN/NOTIFY``).

At shutdown (``close``, from the HTTP protocol's ``shutdown``) every waiter
answers at once as at its timeout, so a restart is not held up by the waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import anyio.to_thread

from datum.fleet import effective as composing
from datum.fleet.effective import Effective, forget_all_but, remembered, signature

log = logging.getLogger("datum.api")

PERIOD = 0.25  # seconds between two reads of the fleet directory's signature
MAX_WAIT = 600  # the longest wait a request may ask, in seconds
WAIT_HEADER = "Datum-Wait"


class FleetChanges:
    """The fleet directory's changes, as one ``asyncio.Event`` per state of its files.

    ``next()`` is the event the next change sets; ``run()`` (one task per
    process, from the app's lifespan) reads the directory's signature every
    ``period`` seconds and, when it moved, sets the event, makes a new one and
    forgets what was remembered for the older state of the files.
    """

    def __init__(self, directory: Path, period: float = PERIOD, seen: Callable[[], object] | None = None) -> None:
        self.directory = directory.resolve()
        self.period = period
        self._seen = seen  # run in a worker thread at start and after each change (the revision's record)
        self._event = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self.changes = 0  # how many changes were seen (for tests and metrics)

    def next(self) -> asyncio.Event:
        """The event set by the next change of the directory (or by ``close``)."""
        return self._event

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self) -> None:
        """Watch from now on, on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self.run(), name="fleet-changes")

    async def run(self) -> None:
        seen = await self._read()
        await self._tell()
        while not self._closed:
            await asyncio.sleep(self.period)
            now = await self._read()
            if now is None or now == seen:
                continue
            seen = now
            self.changes += 1
            forget_all_but(self.directory, now)
            await self._tell()  # first: the woken waiters find the new revision named and recorded
            self._wake()

    async def _tell(self) -> None:
        if self._seen is None:
            return
        try:
            await anyio.to_thread.run_sync(self._seen)
        except Exception as exc:  # noqa: BLE001 - told again at the next change; a manifest request names it too
            log.warning("naming the fleet directory's revision failed: %s", exc)

    async def _read(self) -> str | None:
        try:
            return await anyio.to_thread.run_sync(signature, self.directory)
        except Exception as exc:  # noqa: BLE001 - an unreadable directory is read again next period
            log.debug("reading the fleet directory's signature failed: %s", exc)
            return None

    def _wake(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def close(self) -> None:
        """Answer every waiter now (as at its timeout), and hold no new wait; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._wake()

    async def stop(self) -> None:
        self.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


async def current(resolved: Path, host: str, facts: dict[str, object]) -> Effective:
    """The host's effective manifest: remembered (on the loop, a ``stat`` per file) or composed in a worker
    thread. A Problem when there is none (404) or it does not validate (422)."""
    found = remembered(resolved, host, facts)
    if found is None:
        found = await anyio.to_thread.run_sync(composing.effective, resolved, host, facts)
    return found


def etag_of(found: Effective) -> str:
    return f'"{found.digest}"'


def matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110's weak comparison for ``If-None-Match``: ``*``, or any listed tag, ``W/`` or not."""
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def wait_of(text: str | None) -> int | None:
    """The ``wait`` query parameter: whole seconds from 0 to ``MAX_WAIT``, or None when absent; a
    ValueError for anything else (the route says so, 422)."""
    if text is None:
        return None
    if not text.isdigit() or int(text) > MAX_WAIT:
        raise ValueError(text)
    return int(text)


async def held(
    changes: FleetChanges, resolved: Path, host: str, facts: dict[str, object], wanted: str, wait: float
) -> Effective:
    """The host's manifest as soon as it no longer matches ``wanted`` (an ``If-None-Match``), else as it is
    when ``wait`` seconds have passed (or the server closes). Each change of the directory asks again;
    a Problem (the directory now composes to nothing valid for the host) is raised at once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        change = changes.next()  # taken before asking: a change while asking is not missed
        found = await current(resolved, host, facts)
        left = deadline - loop.time()
        if not matches(wanted, etag_of(found)) or changes.closed or left <= 0:
            return found
        try:
            async with asyncio.timeout(left):
                await change.wait()
        except TimeoutError:
            return found
