"""Small value classes for the pass: what ``dataclasses`` gave them, without importing it.

An idle pass over a validated manifest spends most of its time starting up.
Importing ``dataclasses`` (``inspect``, ``ast``, ``dis``, ``tokenize``) and
building a dataclass (its ``__init__``, ``__repr__`` and ``__eq__`` compiled
from source at import) cost it about 0.02 s of CPU for the eighteen classes it
loaded, a fifth of the pass. The classes a pass loads derive from ``Value``
(mutable) or ``Frozen`` instead and write their ``__init__`` by hand: every
field is a slot, listed in order in ``__slots__``; equality, the hash of a
frozen one, ``repr``, ``as_dict`` and ``replace`` work over those slots as a
dataclass's did (a frozen one refuses assignment with an ``AttributeError``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # the idle pass (datum.host.idle) reads the boot id with these: no typing
if TYPE_CHECKING:
    from typing import Any, Self


class Value:
    """Fields in ``__slots__``, compared, shown and copied as a dataclass's (``eq=True``)."""

    __slots__: tuple[str, ...] = ()

    def _fields(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in self.__slots__])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._fields() == other._fields()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable and compared by value: unhashable

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__qualname__}({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Copied and pickled through ``__init__`` (a frozen one refuses slot assignment after it)."""
        return (type(self), self._fields())

    def as_dict(self) -> dict[str, Any]:
        """Field name -> value, in order (``dataclasses.asdict`` without its deep copy)."""
        return {name: getattr(self, name) for name in self.__slots__}

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return type(self)(**{**self.as_dict(), **changes})


class Frozen(Value):
    """A ``Value`` that cannot change once made (``frozen=True``): hashable by its fields.

    ``__init__`` sets its fields with ``object.__setattr__``.
    """

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of a frozen {type(self).__qualname__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of a frozen {type(self).__qualname__}")

    def __hash__(self) -> int:  # type: ignore[override]  # Value's is None: a frozen one hashes
        return hash(self._fields())
