"""A validated manifest as a pass walks it: its resources, their order, the paths they manage.

``datum.host.manifest`` makes these (YAML, pydantic, every finding at once) and
``datum.host.compiled`` loads them from the validated-manifest cache; a pass over
a cached manifest imports this module and neither of validation's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datum.providers.base import Attributes


# The largest manifest (or included file) read: 16 MiB.
MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Resource:
    """One validated resource of the manifest."""

    index: int
    type: str
    name: str
    spec: Attributes
    id: str = field(init=False, repr=False, compare=False)  # Type[name]: asked for several times a resource

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", f"{self.type}[{self.name}]")

    @property
    def needs(self) -> list[str]:
        return [*self.spec.requires, *self.spec.subscribes]


@dataclass(frozen=True, slots=True)
class Manifest:
    """A valid manifest: its resources in file order, the order a pass walks them, the paths they manage."""

    dir: Path
    resources: tuple[Resource, ...]
    order: tuple[int, ...]
    source: str = '<manifest>'
    paths: frozenset[str] = frozenset()
    included: tuple[tuple[str, str], ...] = ()  # the files ``include`` read: (path, digest of their bytes)
    # The files beside it that its resources read (``Provider.beside``: a source, a template), as
    # validation found them: a cached manifest stands while each is still a file.
    besides: tuple[str, ...] = ()

    def ordered(self) -> list[Resource]:
        return [self.resources[i] for i in self.order]
