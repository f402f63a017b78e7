"""A validated manifest as a pass walks it: its resources, their order, the paths they manage.

``datum.host.manifest`` makes these (YAML, pydantic, every finding at once) and
``datum.host.compiled`` loads them from the validated-manifest cache; a pass over
a cached manifest imports this module and neither of validation's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from datum.providers.value import Frozen

if TYPE_CHECKING:
    from datum.providers.base import Attributes


# The largest manifest (or included file) read: 16 MiB.
MAX_BYTES = 16 * 1024 * 1024

class Resource(Frozen):
    """One validated resource of the manifest."""

    __slots__ = ("index", "type", "name", "spec", "id")
    index: int
    type: str
    name: str
    spec: Attributes
    id: str  # Type[name]: a pass asks for it several times per resource

    def __init__(self, index: int, type: str, name: str, spec: Attributes) -> None:  # noqa: A002
        setattr_ = object.__setattr__
        setattr_(self, "index", index)
        setattr_(self, "type", type)
        setattr_(self, "name", name)
        setattr_(self, "spec", spec)
        setattr_(self, "id", f"{type}[{name}]")

    def _fields(self) -> tuple[object, ...]:
        return (self.index, self.type, self.name, self.spec)  # ``id`` follows from them

    def __repr__(self) -> str:
        return f"Resource(index={self.index!r}, type={self.type!r}, name={self.name!r}, spec={self.spec!r})"

    def as_dict(self) -> dict[str, object]:
        return {"index": self.index, "type": self.type, "name": self.name, "spec": self.spec}

    @property
    def needs(self) -> list[str]:
        return [*self.spec.requires, *self.spec.subscribes]


class Manifest(Frozen):
    """A valid manifest: its resources in file order, the order a pass walks them, the paths they manage."""

    __slots__ = ("dir", "resources", "order", "source", "paths", "included")
    dir: Path
    resources: tuple[Resource, ...]
    order: tuple[int, ...]
    source: str
    paths: frozenset[str]
    included: tuple[tuple[str, str], ...]  # the files ``include`` read: (path, digest of their bytes)

    def __init__(
        self,
        dir: Path,  # noqa: A002
        resources: tuple[Resource, ...],
        order: tuple[int, ...],
        source: str = "<manifest>",
        paths: frozenset[str] = frozenset(),
        included: tuple[tuple[str, str], ...] = (),
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "dir", dir)
        setattr_(self, "resources", resources)
        setattr_(self, "order", order)
        setattr_(self, "source", source)
        setattr_(self, "paths", paths)
        setattr_(self, "included", included)

    def ordered(self) -> list[Resource]:
        return [self.resources[i] for i in self.order]
