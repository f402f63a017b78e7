"""The C heap given back after connections came and went (datum.api.trim): only when some were opened."""

from __future__ import annotations

import platform

from datum.api.trim import Trim, malloc_trim


def test_trims_only_when_connections_were_opened_since_the_last_look():
    opened = [0]
    calls: list[int] = []
    trim = Trim(lambda: opened[0], lambda: calls.append(0) or 0)
    trim.poll()
    assert calls == []  # nothing opened since it was made
    opened[0] = 3
    trim.poll()
    trim.poll()
    assert len(calls) == 1 and trim.trims == 1
    opened[0] = 4
    trim.poll()
    assert len(calls) == 2


def test_a_failing_trim_does_not_raise():
    opened = [0]

    def broken() -> int:
        raise OSError("no")

    trim = Trim(lambda: opened[0], broken)
    opened[0] = 1
    trim.poll()
    assert trim.trims == 0


def test_glibc_has_malloc_trim_and_elsewhere_nothing_is_called():
    call = malloc_trim()
    if platform.libc_ver()[0] == "glibc":
        assert call is not None
        assert call() in (0, 1)  # 1: memory was given back
    else:
        assert call is None
        opened = [0]
        trim = Trim(lambda: opened[0], call)
        opened[0] = 1
        trim.poll()
        assert trim.trims == 0
