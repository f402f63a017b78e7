"""The read gate: how many people's reads a server process serves at once, so reads never starve the control loop.

A read an operator or the page makes (Cedar ``observability:ReadSubstrate``,
``fleet:ReadHost``, ``fleet:ReadHistory``: drift reports, the list surface, the host listing, a host's
kept passes and the fleet's events, the page's fragments, ``/metrics``) runs on a worker thread and holds a store
connection while it does. Unbounded, a refresh storm (a thousand browsers
reloading the page) takes every thread and every pooled connection, and the
scheduler's tick and the agents' reports wait behind it until the pool times
out. The guard takes a slot here for each such request before it reaches its
route and gives it back when the answer is sent: at most ``[server]
read_slots`` at once per process, queued in arrival order; one that has not
had a slot within ``[server] read_wait`` is answered ``503 UNAVAILABLE`` with
``Retry-After``, at once rather than after the pool's timeout. An agent's
requests (its manifest, its reports, its reboot lease) never wait here.
"""

from __future__ import annotations

import asyncio
import math

from datum.api.front.authz import Action
from datum.core.findings import ErrorCode, Problem

# The Cedar actions of people's reads: the requests that take a slot.
READS = frozenset({Action.READ_SUBSTRATE.value, Action.READ_HOST.value, Action.READ_HISTORY.value,
                   Action.READ_AUDIT.value})


class ReadGate:
    """At most ``slots`` reads at once; a read that waits past ``wait`` seconds is shed with ``Retry-After``."""

    def __init__(self, slots: int, wait: float) -> None:
        self.slots = slots
        self.wait = wait
        self._free: asyncio.Semaphore | None = None  # made on the serving loop, at the first read

    async def acquire(self) -> None:
        """Wait for a slot, in arrival order; ``UNAVAILABLE`` (``busy``) when none freed within ``wait``."""
        if self._free is None:
            self._free = asyncio.Semaphore(self.slots)
        try:
            async with asyncio.timeout(self.wait):
                await self._free.acquire()
        except TimeoutError:
            raise busy(self.slots, self.wait) from None

    def release(self) -> None:
        assert self._free is not None
        self._free.release()


def busy(slots: int, wait: float) -> Problem:
    """The answer to a read shed by the gate: ``UNAVAILABLE``, when to come back in ``details.retryAfter``."""
    retry = max(1, math.ceil(wait))
    return Problem.one(
        ErrorCode.UNAVAILABLE,
        f"the server is answering {slots} reads at once ([server] read_slots) and this one waited {wait:g}s "
        f"([server] read_wait): try again in {retry}s",
        details={"retryAfter": retry},
    )
