"""RPM's version ordering, as rpm itself orders ``epoch:version-release``: ``rpmvercmp``, ``compare``, ``matches``.

The dnf provider decides whether a package is the version a manifest pins, or
older than the repository's, without asking rpm each time: so the comparison
must be rpm's to the letter (``lib/rpmvercmp.c`` and ``rpmverCmp`` in rpm
4.18), not a look-alike. Segments are runs of ASCII digits or letters; a run of
digits is newer than a run of letters and compared as a number (leading zeros
dropped); ``~`` sorts before anything, even the end (``1.0~rc1`` < ``1.0``);
``^`` sorts after the end but before any other segment (``1.0`` < ``1.0^git1``
< ``1.0.1``); every other character only separates. A missing epoch is 0 and a
missing release is older than any (``1.0`` < ``1.0-3``). A pin is matched as dnf
matches ``name-1.0``: its epoch and release only when it gives them (``matches``).
``tests/providers/test_rpmver.py`` holds it against ``rpm`` on this machine.
"""

from __future__ import annotations

from typing import NamedTuple


def _alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


def _digit(c: str) -> bool:
    return "0" <= c <= "9"


def rpmvercmp(a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` is older than, the same as or newer than ``b`` (rpm's ``rpmvercmp``)."""
    if a == b:
        return 0
    i, j, n, m = 0, 0, len(a), len(b)
    while i < n or j < m:
        while i < n and not _alnum(a[i]) and a[i] not in "~^":
            i += 1
        while j < m and not _alnum(b[j]) and b[j] not in "~^":
            j += 1
        one, two = a[i : i + 1], b[j : j + 1]  # "" at the end
        if one == "~" or two == "~":  # the tilde sorts before everything else, the end included
            if one != "~":
                return 1
            if two != "~":
                return -1
            i, j = i + 1, j + 1
            continue
        if one == "^" or two == "^":  # the caret sorts after the end, before every other segment
            if not one:
                return -1
            if not two:
                return 1
            if one != "^":
                return 1
            if two != "^":
                return -1
            i, j = i + 1, j + 1
            continue
        if not (one and two):
            break
        same_kind = _digit if _digit(one) else (lambda c: c.isascii() and c.isalpha())
        end_i, end_j = i, j
        while end_i < n and same_kind(a[end_i]):
            end_i += 1
        while end_j < m and same_kind(b[end_j]):
            end_j += 1
        seg_a, seg_b = a[i:end_i], b[j:end_j]
        if not seg_b:  # one numeric, the other alpha: the numeric one is newer
            return 1 if same_kind is _digit else -1
        if same_kind is _digit:
            seg_a, seg_b = seg_a.lstrip("0"), seg_b.lstrip("0")
            if len(seg_a) != len(seg_b):
                return 1 if len(seg_a) > len(seg_b) else -1
        if seg_a != seg_b:
            return 1 if seg_a > seg_b else -1
        i, j = end_i, end_j
    if i >= n and j >= m:
        return 0
    return -1 if i >= n else 1


class EVR(NamedTuple):
    """An ``epoch:version-release``; ``epoch`` and ``release`` None when not given."""

    epoch: str | None
    version: str
    release: str | None

    def __str__(self) -> str:
        return (f"{self.epoch}:" if self.epoch is not None else "") + self.version + (
            f"-{self.release}" if self.release is not None else ""
        )


def parse(evr: str) -> EVR:
    """``[epoch:]version[-release]`` as rpm's ``parseEVR`` splits it: an epoch only when digits alone
    come before the ``:`` (an empty one is 0), the release after the last ``-``."""
    digits = len(evr) - len(evr.lstrip("0123456789"))
    epoch: str | None = None
    rest = evr
    if evr[digits : digits + 1] == ":":
        epoch, rest = evr[:digits] or "0", evr[digits + 1 :]
    version, dash, release = rest.rpartition("-")
    if not dash:
        return EVR(epoch, rest, None)
    return EVR(epoch, version, release)


def compare(a: str | EVR, b: str | EVR) -> int:
    """-1, 0 or 1 as rpm's ``rpmverCmp`` orders two ``epoch:version-release``: a missing epoch is 0,
    and a missing release is older than any release."""
    x = parse(a) if isinstance(a, str) else a
    y = parse(b) if isinstance(b, str) else b
    found = rpmvercmp(x.epoch or "0", y.epoch or "0") or rpmvercmp(x.version, y.version)
    if found or x.release == y.release:
        return found
    if x.release is None or y.release is None:
        return -1 if x.release is None else 1
    return rpmvercmp(x.release, y.release)


def matches(pin: str | EVR, found: str | EVR) -> bool:
    """Whether the installed ``found`` is the version ``pin`` asks for, as dnf matches
    ``name-[epoch:]version[-release]``: the epoch and the release only when the pin gives them."""
    want = parse(pin) if isinstance(pin, str) else pin
    have = parse(found) if isinstance(found, str) else found
    if want.epoch is not None and rpmvercmp(want.epoch, have.epoch or "0"):
        return False
    if rpmvercmp(want.version, have.version):
        return False
    return want.release is None or (have.release is not None and not rpmvercmp(want.release, have.release))
