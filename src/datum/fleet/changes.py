"""The fleet directory's changes, and the long polls held on them until the manifest a host is served moves.

An agent that has its manifest asks to be answered as soon as the host's
effective manifest differs from the one it has (``GET
/v1/hosts/{host}/manifest?wait=N`` with ``If-None-Match``: the route says it in
HTTP, ``datum.api.routes.hosts``), else when ``wait`` seconds have passed.
``held`` and ``held_by`` decide when: the host's manifest is found again at each
change, and answered when it is no longer what the agent has.

What the server composes from is the fleet directory alone (``[fleet]
manifests``, ``datum.fleet.effective``), so a change is a change of its
files. One task per process (``FleetChanges``) reads the directory's
``signature`` (a ``stat`` per path, in a worker thread) every ``PERIOD``
seconds; when it moved and then held still for a period, every waiter wakes
and asks for its host's manifest again (a composition is made once for all the hosts that share it), answers
when its digest moved, and waits again for the rest of its time when it did
not. With staged rollouts a change wakes only the waiters its rollout serves anew (``moved``: the canaries,
not the 1,000 hosts it holds back, whose answer it does not change), and each transition of the rollout
the waiters of the hosts it concerns (``probe``). A wait is a ``Poll``: a future of its own, kept in one set
that a change completes at once and in the set of the waits whose time runs out in the same ``GRAIN`` (one
timer for them all); the front door holds it between two looks with no coroutine of the answer's
(``datum.api.front.security.Later``): no thread, a few KiB with its connection. Not one ``asyncio.Event`` shared by all: a waiter that times out
leaves an Event's deque by ``remove``, a scan of every other waiter (70 us
each at 10,000 waiters, measured; docs/performance.md), where it leaves the
set in constant time. Replicas on one store
each watch their own directory, which is what each serves from (docs/fleet.md
says why not ``LISTEN/NOTIFY``).

At shutdown (``close``, from the HTTP protocol's ``shutdown``) every waiter
answers at once as at its timeout, so a restart is not held up by the waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import anyio.to_thread

from datum.fleet import effective as composing
from datum.fleet.effective import Effective, directory_of, forget_all_but, remembered, signature

log = logging.getLogger("datum.api")

PERIOD = 0.25  # seconds between two reads of the fleet directory's signature
# Seconds: a wait's time runs out at the first multiple of GRAIN from its deadline on (at most that late), with
# every other wait due then, on one timer (10,000 waits of 300 s: about 300 timers, not 10,000 of 0.5 KiB each).
GRAIN = 1.0
SETTLE = 8  # periods a change may keep moving before it is told all the same (a directory never still)

# Whether what a host would be served now is still what its agent has (the route: its If-None-Match matches).
Unchanged = Callable[[Effective], bool]


class AllBut(frozenset[str]):
    """Every waiter but the waits of these hosts (a rollout's last wave: it releases its hosts and every host no
    wave planned, not the hosts of the waves released before it)."""


# Which waiters a transition of the rollout in force wakes: all, none, the waits of these hosts, or all but theirs.
Wake = bool | frozenset[str] | AllBut


class FleetChanges:
    """The fleet directory's changes, as a set of waiters' futures that the next change completes.

    ``waiter()`` is a future the next change (or ``close``) completes, and
    ``forget`` lets it go; ``run()`` (one task per process, from the app's
    lifespan) reads the directory's signature every ``period`` seconds and,
    when it moved, completes every waiter's future and forgets what was
    remembered for the older state of the files. The directory is resolved
    at each look (``directory_of``): a link switched to another release is a
    change, and what was remembered of the release left is forgotten whole.
    """

    def __init__(
        self, directory: Path, period: float = PERIOD, seen: Callable[[], object] | None = None,
        probe: Callable[[], Wake] | None = None, moved: Callable[[object], Wake] | None = None,
    ) -> None:
        self.configured = directory
        self.directory = directory_of(directory)  # as last looked at
        self.period = period
        self._seen = seen  # run in a worker thread at start and after each change (the revision's record)
        # With staged rollouts (datum.fleet.rollouts): run in a worker thread each period; what it says of the
        # rollout in force (``Wake``): True, every waiter asks again, as at a change; the hosts whose answer the
        # transition changed (a wave released, an abort), their waiters only; False, none.
        self._probe = probe
        # With staged rollouts: run in a worker thread after a change was told, with what ``seen`` returned
        # (None when it failed); which waiters the change wakes (``Wake``). Without it, every waiter: the files
        # are what every host is served from. With a rollout, what each host is served moves only as the
        # rollout of the new files says (its canary first), not with the files.
        self._moved = moved
        self._waiters: set[asyncio.Future[str | None]] = set()
        self._of: dict[str, set[asyncio.Future[str | None]]] = {}  # the waiters of each host that said which
        # The waits whose time runs out at each multiple of GRAIN, and the one timer that completes them then.
        self._due: dict[int, set[asyncio.Future[str | None]]] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self.changes = 0  # how many changes were seen (for tests and metrics)

    def waiter(self, host: str | None = None) -> asyncio.Future[str | None]:
        """A future the next change of the directory (or ``close``) completes, and a transition of the rollout
        that changes what ``host`` is served; ``forget`` it when done."""
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        if self._closed:
            future.set_result(None)
        else:
            self._waiters.add(future)
            if host is not None:
                self._of.setdefault(host, set()).add(future)
        return future

    def forget(self, future: asyncio.Future[str | None], host: str | None = None) -> None:
        """``future`` no longer waits (answered, timed out, its client gone)."""
        self._waiters.discard(future)
        if host is not None and (mine := self._of.get(host)) is not None:
            mine.discard(future)
            if not mine:
                del self._of[host]

    def expires(self, future: asyncio.Future[str | None], deadline: float) -> int:
        """``future`` completed with ``EXPIRED`` at ``deadline`` (the loop's time; at most ``GRAIN`` later), with
        every other wait due then: one timer for them all, not one per wait (a uvloop timer is 0.5 KiB). The
        tick to hand ``unexpires`` when it no longer waits."""
        tick = math.ceil(deadline / GRAIN)
        due = self._due.get(tick)
        if due is None:
            due = self._due[tick] = set()
            self._timers[tick] = asyncio.get_running_loop().call_at(tick * GRAIN, self._expire, tick)
        due.add(future)
        return tick

    def unexpires(self, future: asyncio.Future[str | None], tick: int) -> None:
        due = self._due.get(tick)
        if due is None:
            return
        due.discard(future)
        if not due:
            del self._due[tick]
            self._timers.pop(tick).cancel()

    def _expire(self, tick: int) -> None:
        self._timers.pop(tick, None)
        for future in self._due.pop(tick, ()):
            if not future.done():
                future.set_result(EXPIRED)

    @property
    def waiting(self) -> int:
        """How many waits are held now (for tests and metrics)."""
        return len(self._waiters)

    @property
    def timed(self) -> int:
        """How many waits have their time running (for tests)."""
        return sum(len(due) for due in self._due.values())

    @property
    def timers(self) -> int:
        """How many timers run the waits' time (for tests)."""
        return len(self._timers)

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
                self._wake(await self._probed())
                continue
            seen = await self._settled(now)
            self.changes += 1
            left, self.directory = self.directory, seen[0]
            if left != self.directory:  # a link switched to another release: nothing of the one left holds
                forget_all_but(left, "")
            forget_all_but(self.directory, seen[1])
            told = await self._tell()  # first: the woken waiters find the new revision named and recorded
            self._wake(await self._after_change(told))

    async def _settled(self, moved: tuple[Path, str]) -> tuple[Path, str]:
        """The signature once the directory holds still for a period (at most ``SETTLE`` periods): an edit
        written in place (truncated, then written; an editor without a rename, a ``cp``) must not wake every
        waiter on the half-written file, and each woken waiter would fetch what it found then. A ``git``
        checkout or ``rsync`` of many files settles the same way. Costs one period on every change."""
        for _ in range(SETTLE):
            await asyncio.sleep(self.period)
            self._wake(await self._probed())  # the rollout in force moved meanwhile: as every period
            again = await self._read()
            if again is None or again == moved:
                return moved
            moved = again
        return moved

    async def _tell(self) -> object:
        """What ``seen`` says of the directory now (None: nothing, or it failed)."""
        if self._seen is None:
            return None
        try:
            return await anyio.to_thread.run_sync(self._seen)
        except Exception as exc:  # noqa: BLE001 - told again at the next change; a manifest request names it too
            log.warning("naming the fleet directory's revision failed: %s", exc)
            return None

    async def _after_change(self, told: object) -> Wake:
        """Which waiters a change of the files wakes: every one, unless ``moved`` says (staged rollouts)."""
        if self._moved is None:
            return True
        try:
            return await anyio.to_thread.run_sync(self._moved, told)
        except Exception as exc:  # noqa: BLE001 - every waiter asks again, as without rollouts
            log.debug("reading what a change of the fleet directory wakes failed: %s", exc)
            return True

    async def _probed(self) -> Wake:
        if self._probe is None:
            return False
        try:
            return await anyio.to_thread.run_sync(self._probe)
        except Exception as exc:  # noqa: BLE001 - probed again next period
            log.debug("reading the rollout in force failed: %s", exc)
            return False

    async def _read(self) -> tuple[Path, str] | None:
        """The directory the configured path names now, and its files' signature."""
        try:
            return await anyio.to_thread.run_sync(self._look)
        except Exception as exc:  # noqa: BLE001 - an unreadable directory is read again next period
            log.debug("reading the fleet directory's signature failed: %s", exc)
            return None

    def _look(self) -> tuple[Path, str]:
        resolved = directory_of(self.configured)
        return resolved, signature(resolved)

    def _wake(self, which: Wake = True) -> None:
        """Complete the waiters ``which`` says: all (True), none (False), those of these hosts, or all but theirs."""
        if which is False:
            return
        if which is True:
            waiters, self._waiters, self._of = self._waiters, set(), {}
        elif isinstance(which, AllBut):
            self._of = {host: mine for host, mine in self._of.items() if host in which}
            kept = set().union(*self._of.values())
            waiters, self._waiters = self._waiters - kept, kept
        else:
            waiters = {f for host in which for f in self._of.pop(host, ())}
            self._waiters -= waiters
        for future in waiters:
            if not future.done():
                future.set_result(None)

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


async def current(resolved: Path, host: str, facts: dict[str, object], labels: Mapping[str, str] | None = None) -> Effective:
    """The host's effective manifest (``labels``: those it was given at enrollment): remembered (on the loop, a
    ``stat`` per file) or composed in a worker thread. A Problem when there is none (404) or it does not validate
    (422)."""
    found = remembered(resolved, host, facts, labels)
    if found is None:
        found = await anyio.to_thread.run_sync(composing.effective, resolved, host, facts, labels)
    return found


def held(
    changes: FleetChanges, directory: Path, host: str, facts: dict[str, object], unchanged: Unchanged, wait: float,
    labels: Mapping[str, str] | None = None,
) -> Awaitable[Effective]:
    """The host's manifest as soon as it is no longer ``unchanged`` (what its agent has), else as it is
    when ``wait`` seconds have passed (or the server closes). Each change of the directory asks again, from
    the directory resolved anew (``directory_of``: a link switched to another release); a Problem (the
    directory now composes to nothing valid for the host) is raised at once. ``held_by`` itself, with no
    coroutine of its own around it (a frame held for the whole wait)."""
    return held_by(changes, lambda: current(directory_of(directory), host, facts, labels), unchanged, wait)


async def held_by(
    changes: FleetChanges, find: Callable[[], Awaitable[Effective]], unchanged: Unchanged, wait: float,
    host: str | None = None,
) -> Effective:
    """``held`` with what the host is served found by ``find`` (a staged rollout's choice,
    ``datum.fleet.rollouts.serve``); ``host``: the waits a transition of the rollout concerning it wakes.
    A ``Poll`` driven by a coroutine; the manifest's fast answer drives one from the front door instead."""
    poll = Poll(changes, wait, host)
    try:
        while True:
            poll.watch()
            found = await find()
            if not poll.parks(found, unchanged(found)) or poll.ready is None:
                return found
            await poll.ready
            if (expired := poll.woken()) is not None:
                return expired
    finally:
        poll.leave()


class Poll:
    """One long poll between its looks at what its host is served: a future in the watch's sets.

    ``watch()`` before each look (a change while looking is not missed), then ``parks(found, unchanged)``:
    False when ``found`` is the answer (it moved from what the agent has, the server closes, or the time is
    up); True when it waits, until ``ready`` completes, at the next change (or ``close``) or when its time
    runs out. Then ``woken()``: the manifest to answer as it was when the time ran out, or None to look
    again. ``leave()`` lets go of the future (idempotent). No coroutine of its own: whoever
    drives it (``held_by``, or the front door for a fast answer) is the only frame held while it waits.
    """

    __slots__ = ("changes", "host", "deadline", "ready", "tick", "found")

    def __init__(self, changes: FleetChanges, wait: float, host: str | None = None) -> None:
        self.changes = changes
        self.host = host
        self.deadline = asyncio.get_running_loop().time() + wait
        self.ready: asyncio.Future[str | None] | None = None
        self.tick: int | None = None  # when its time runs out (FleetChanges.expires)
        self.found: Effective | None = None  # what the last look found, answered as it is when the time runs out

    def watch(self) -> None:
        self.leave()
        self.ready = self.changes.waiter(self.host)

    def parks(self, found: Effective, unchanged: bool) -> bool:
        loop = asyncio.get_running_loop()
        if not unchanged or self.changes.closed or loop.time() >= self.deadline or self.ready is None:
            self.leave()
            return False
        self.found = found
        self.tick = self.changes.expires(self.ready, self.deadline)
        return True

    def woken(self) -> Effective | None:
        expired = self.ready is not None and self.ready.done() and self.ready.result() is EXPIRED
        self.leave()
        return self.found if expired else None

    def leave(self) -> None:
        if self.ready is None:
            return
        if self.tick is not None:
            self.changes.unexpires(self.ready, self.tick)
            self.tick = None
        self.changes.forget(self.ready, self.host)
        self.ready = None


EXPIRED = "expired"  # what a waiter's future is completed with when its wait's time ran out (a change: None)
