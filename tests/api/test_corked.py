"""``Corked``: a loop turn's writes go out as one, in order; nothing is lost at close, nothing sent after."""

from __future__ import annotations

import asyncio

from datum.api import corked
from datum.api.corked import Corked


class Wire:
    """A transport that records each write: what the socket would have been asked to send."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False
        self.eof = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def write_eof(self) -> None:
        self.eof = True

    def abort(self) -> None:
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_a_turns_writes_are_one_send_in_order():
    async def run() -> list[bytes]:
        wire = Wire()
        t = Corked(wire, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.write(b"")
        t.write(bytearray(b"body"))
        assert wire.writes == [] and t.get_write_buffer_size() == 23
        await asyncio.sleep(0)
        t.write(b"next")
        t.writelines([b"-", b"more"])
        await asyncio.sleep(0)
        assert t.get_extra_info("peername") == "info:peername"  # the rest is the transport's
        return wire.writes

    assert asyncio.run(run()) == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"next-more"]


def test_large_writes_go_at_once_and_in_order(monkeypatch):
    monkeypatch.setattr(corked, "LIMIT", 10)

    async def run() -> list[bytes]:
        wire = Wire()
        t = Corked(wire, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"x" * 11)  # nothing held: straight through
        t.write(b"head")
        t.write(b"y" * 8)  # held past the limit: flushed with what came before
        assert wire.writes == [b"x" * 11, b"head" + b"y" * 8]
        await asyncio.sleep(0)
        return wire.writes

    assert asyncio.run(run()) == [b"x" * 11, b"head" + b"y" * 8]


def test_a_large_write_after_close_is_not_sent(monkeypatch):
    monkeypatch.setattr(corked, "LIMIT", 10)

    async def run() -> list[bytes]:
        wire = Wire()
        t = Corked(wire, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"small")
        t.close()
        t.write(b"z" * 50)  # past the limit, the direct path: the connection is closing all the same
        await asyncio.sleep(0)
        return wire.writes

    assert asyncio.run(run()) == [b"small"]


def test_close_and_eof_flush_first_and_a_closed_connection_is_sent_nothing():
    async def run() -> None:
        loop = asyncio.get_running_loop()
        wire = Wire()
        t = Corked(wire, loop)  # type: ignore[arg-type]
        t.write(b"last answer")
        t.close()
        assert wire.writes == [b"last answer"] and wire.closing
        await asyncio.sleep(0)  # the scheduled flush finds nothing more
        assert wire.writes == [b"last answer"]

        wire = Wire()
        t = Corked(wire, loop)  # type: ignore[arg-type]
        t.write(b"bye")
        t.write_eof()
        assert wire.writes == [b"bye"] and wire.eof

        wire = Wire()
        t = Corked(wire, loop)  # type: ignore[arg-type]
        t.write(b"lost")
        wire.closing = True  # the peer went away before the turn ended
        await asyncio.sleep(0)
        assert wire.writes == []
        t.write(b"dropped")
        t.abort()
        await asyncio.sleep(0)
        assert wire.writes == []

    asyncio.run(run())
