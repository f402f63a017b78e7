"""Set-diff of keyed desired and actual items into restore, reap and align.

Pure and streaming: it yields only the items that diverge, so a caller keeps
nothing for the items that match.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from datum.core.vocab import Direction

D = TypeVar("D")
A = TypeVar("A")

Equal = Callable[[D, A], bool]
Tombstone = Callable[[D], bool]


@dataclass(frozen=True, slots=True)
class Divergence(Generic[D, A]):
    """One item that differs: which half of the diff produced it, and both sides."""

    id: str
    direction: Direction
    desired: D | None
    actual: A | None


def diff(
    desired: Mapping[str, D],
    actual: Mapping[str, A],
    equal: Callable[[D, A], bool] = operator.eq,
    tombstone: Callable[[D], bool] | None = None,
) -> Iterator[Divergence[D, A]]:
    """Yield every diverged item.

    - ``restore``: desired, absent from the substrate;
    - ``reap``: in the substrate with no desired entry;
    - ``align``: present in both and ``equal`` says they differ.

    A desired entry for which ``tombstone`` is true asks for the item to be
    gone: absent from the substrate it has converged, present it is ``align``.
    """
    for key, want in desired.items():
        if key in actual:
            have = actual[key]
            gone_wanted = tombstone is not None and tombstone(want)
            if gone_wanted or not equal(want, have):
                yield Divergence(key, Direction.ALIGN, want, have)
        elif tombstone is None or not tombstone(want):
            yield Divergence(key, Direction.RESTORE, want, None)
    for key, have in actual.items():
        if key not in desired:
            yield Divergence(key, Direction.REAP, None, have)
