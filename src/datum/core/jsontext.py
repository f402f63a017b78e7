"""JSON text of strings and flat objects, as ``json.dumps`` writes it, without importing ``json``.

Importing ``json`` loads ``re`` and ``enum`` (about 7 ms of a 2-core machine's
process start). The idle pass writes its lock record and fills its report
with this instead: the C encoder ``json`` itself uses for strings.
"""

from __future__ import annotations

try:
    from _json import encode_basestring_ascii as string
except ImportError:  # pragma: no cover - an interpreter without CPython's accelerator
    from json.encoder import encode_basestring_ascii as string

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["flat", "string"]


def flat(record: Mapping[str, str | int | None]) -> str:
    """``json.dumps(record)`` for an object whose values are strings, integers or None."""
    return "{" + ", ".join(f"{string(k)}: {_value(v)}" for k, v in record.items()) + "}"


def _value(v: str | int | None) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return string(v) if isinstance(v, str) else str(int(v))
