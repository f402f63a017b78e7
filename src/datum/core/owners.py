"""Who owns a name a plugin declares: Datum's own distribution first, and a name two others claim is nobody's.

A reconciler's name, a resource type, a route prefix and a Cedar schema
fragment's entities and actions are claims. Which claim wins must not
depend on the order of directories on ``sys.path`` (today's first-found
order is exactly that), so it is decided here, over every claim at once:

- a claim that overlaps one of Datum's own (declared by the ``datum``
  distribution, pointing into the ``datum`` package) is refused: Datum's
  names are Datum's whatever else is installed;
- claims of two or more other distributions that overlap each other are all
  refused, each saying who else claims it: neither is loaded, both are
  reported, and the operator removes one;
- Datum's own claims are never refused by another's.

"Overlap" is the kind's own question: the same name, a prefix at or under
another, two schema fragments that do not merge together.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K")

DATUM = "datum"


@dataclass(frozen=True, slots=True)
class Claim(Generic[K]):
    """One declaration of ``key`` by ``claimant`` (an entry point or plugin), from distribution ``dist``."""

    key: K
    claimant: str
    dist: str
    own: bool


def is_own(dist: str | None, target: str) -> bool:
    """Datum's own: declared by the ``datum`` distribution and pointing into the ``datum`` package."""
    module = target.partition(":")[0].strip()
    return (dist or "").lower().replace("_", "-") == DATUM and (module == DATUM or module.startswith(DATUM + "."))


def refusals(claims: Sequence[Claim[K]], overlap: Callable[[K, K], bool] = operator.eq, what: str = "name") -> list[str | None]:
    """For each claim, why it is refused, or None; ``what`` names the kind of claim in the why."""
    out: list[str | None] = []
    for claim in claims:
        if claim.own:
            out.append(None)
            continue
        # The same declaration found twice (one distribution on two path entries) is no rival.
        others = [o for o in claims if (o.claimant, o.dist) != (claim.claimant, claim.dist) and overlap(claim.key, o.key)]
        datum = [o for o in others if o.own]
        if datum:
            out.append(f"the {what} {claim.key!s} collides with Datum's own ({datum[0].claimant}): {claim.dist} may not take it")
        elif others:
            rivals = ", ".join(sorted({f"{o.claimant} from {o.dist}" for o in others}))
            out.append(f"{claim.dist} declares the {what} {claim.key!s}, as does {rivals}: neither is loaded until one is removed")
        else:
            out.append(None)
    return out
