"""The C heap's free memory given back to the system after connections came and went (glibc's ``malloc_trim``).

Each connection's TLS handshake allocates and frees tens of KiB in C
(OpenSSL's, uvloop's), and glibc keeps what was freed inside its heap, below
memory still in use, as part of the process's resident size. A server holding
10,000 long polls kept 1.6 KiB per held poll of such free memory
(docs/performance.md, "Held polls over TLS"). ``Trim.poll`` (every
``TRIM_EVERY`` seconds, on a thread of its own: ``datum.api.server``) calls
``malloc_trim(0)`` when connections were opened since its last call, so a
server whose connections stay as they are does nothing. Elsewhere than on
glibc (musl, macOS) there is nothing to call, and nothing is done.
"""

from __future__ import annotations

import ctypes
import logging
import platform
from collections.abc import Callable

log = logging.getLogger("datum.api")

TRIM_EVERY = 10.0  # seconds between two looks at whether connections were opened (a trim when they were)


def malloc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library is not glibc."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def call() -> int:
        return int(trim(0))

    return call


class Trim:
    """``malloc_trim(0)`` when ``opened()`` (how many connections were opened so far) moved since the last look."""

    def __init__(self, opened: Callable[[], int], trim: Callable[[], int] | None = None) -> None:
        self.opened = opened
        self.trim = trim
        self.trims = 0  # how many times it trimmed (for tests)
        self._seen = opened()

    def poll(self) -> None:
        now = self.opened()
        if now == self._seen or self.trim is None:
            return
        self._seen = now
        try:
            self.trim()
        except Exception as exc:  # noqa: BLE001 - memory not given back is no fault of serving
            log.debug("malloc_trim failed: %s", exc)
            return
        self.trims += 1
