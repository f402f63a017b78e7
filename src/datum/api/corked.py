"""A connection's writes of one event-loop turn sent as one: a response's head and body in one ``send``.

uvicorn writes a response's status line and headers, then its body, each with
its own ``transport.write``: for a small answer (a manifest, a pass's status)
two ``send`` system calls and two TCP segments where one would do, the
larger part of what a cached answer costs the server (~40% of a manifest
request's CPU is ``send``). ``Corked`` stands in for the connection's
transport: the first write of a turn is held and a flush scheduled for the
end of the turn (``loop.call_soon``); what else is written meanwhile joins
it, in order. A write past ``LIMIT`` bytes held flushes at once (one large
body is not worth holding), and ``close`` and ``write_eof`` flush first, so
nothing written is ever lost or reordered; what the peer has not been sent
when the connection is lost is dropped, as the transport itself would.
Everything else is the transport's own (``__getattr__``).
"""

from __future__ import annotations

import asyncio
from typing import Any

# The bytes held before a flush: a response head and any body up to this size go out as one write.
LIMIT = 256 * 1024


class Corked:
    """``transport`` with each loop turn's writes joined into one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._size = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data or self._transport.is_closing():  # closing: nothing more goes out, held or not
            return
        if not self._held:
            if len(data) > LIMIT:
                self._transport.write(data)
                return
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))
        self._size += len(data)
        if self._size > LIMIT:
            self.flush()

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what is held, as one write (nothing when the connection is closing: it would not arrive)."""
        held, self._held, self._size = self._held, [], 0
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._size

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held, self._size = [], 0
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
