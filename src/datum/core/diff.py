"""Set-diff of keyed desired and actual items into restore, reap and align.

Pure and streaming: it yields only the items that diverge, so a caller keeps
nothing for the items that match.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from datum.core.vocab import Direction

D = TypeVar("D")
A = TypeVar("A")

Equal = Callable[[D, A], bool]
Tombstone = Callable[[D], bool]

_MISSING = object()


@dataclass(frozen=True, slots=True)
class Divergence(Generic[D, A]):
    """One item that differs: which half of the diff produced it, and both sides.

    ``settle`` marks an item whose substrate already shows what its desired
    record asks for, while the record itself still has to be moved on (a
    tombstone whose item is gone, a ``creating`` row whose item exists).
    ``gone`` says the record is a tombstone: it asks for the item to be gone.
    """

    id: str
    direction: Direction
    desired: D | None
    actual: A | None
    settle: bool = False
    gone: bool = False


def diff(
    desired: Mapping[str, D],
    actual: Mapping[str, A],
    equal: Callable[[D, A], bool] = operator.eq,
    tombstone: Callable[[D], bool] | None = None,
    unsettled: Callable[[D], bool] | None = None,
) -> Iterator[Divergence[D, A]]:
    """Yield every diverged item.

    - ``restore``: desired, absent from the substrate;
    - ``reap``: in the substrate with no desired entry;
    - ``align``: present in both and ``equal`` says they differ.

    A desired entry for which ``tombstone`` is true asks for the item to be
    gone: absent from the substrate it has converged, present it is ``align``.

    A desired entry whose substrate agrees but for which ``unsettled`` is true
    (its record is in a transitional status) is an ``align`` with ``settle``
    set: the record is to be finalised, which waits for confirmation like any
    other transition.
    """
    get: Callable[[str, object], Any] = actual.get  # one lookup per desired item
    present = 0  # desired keys found in actual: when that is all of actual, nothing is to reap
    for key, want in desired.items():
        have = get(key, _MISSING)
        gone_wanted = tombstone is not None and tombstone(want)
        if have is _MISSING:
            if not gone_wanted:
                yield Divergence(key, Direction.RESTORE, want, None)
            elif unsettled is not None and unsettled(want):
                yield Divergence(key, Direction.ALIGN, want, None, settle=True, gone=True)
            continue
        present += 1
        if gone_wanted or not equal(want, have):
            yield Divergence(key, Direction.ALIGN, want, have, gone=gone_wanted)
        elif unsettled is not None and unsettled(want):
            yield Divergence(key, Direction.ALIGN, want, have, settle=True, gone=gone_wanted)
    if len(actual) > present:
        for key, have in actual.items():
            if key not in desired:
                yield Divergence(key, Direction.REAP, None, have)
