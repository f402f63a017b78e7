"""Work-query coverage: a desired-state status histogram and the stranded-rows signal."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class CoverageDecl:
    """What a reconciler declares about one kind's desired-state statuses."""

    kind: str
    selected: frozenset[str]
    terminal: frozenset[str] = frozenset()
    owned_by: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        overlap = self.selected & self.terminal
        if overlap:
            raise ValueError(f"statuses both selected and terminal: {sorted(overlap)}")

    @property
    def known(self) -> frozenset[str]:
        return self.selected | self.terminal | frozenset(self.owned_by)


@dataclass(frozen=True, slots=True)
class CoverageRow:
    """How many rows sit in one status, and whether anything will ever move them."""

    kind: str
    status: str
    count: int
    selected: bool
    terminal: bool
    owned_by: str | None
    oldest_age_seconds: float

    @property
    def stranded(self) -> bool:
        """The full conjunction: rows exist, nobody selects them, they are not final, nobody owns them."""
        return self.count > 0 and not self.selected and not self.terminal and self.owned_by is None


def histogram(
    decl: CoverageDecl, counts: Mapping[str, tuple[int, float]]
) -> list[CoverageRow]:
    """Rows for every declared status and every status found in the table.

    ``counts`` maps a status to (row count, age of its oldest row in seconds).
    A status nobody declared is reported too: that is how a typo'd or new
    status shows up as stranded.
    """
    rows = []
    for status in sorted(decl.known | frozenset(counts)):
        count, age = counts.get(status, (0, 0.0))
        rows.append(
            CoverageRow(
                kind=decl.kind,
                status=status,
                count=count,
                selected=status in decl.selected,
                terminal=status in decl.terminal,
                owned_by=decl.owned_by.get(status),
                oldest_age_seconds=round(max(0.0, age), 3),
            )
        )
    return rows
