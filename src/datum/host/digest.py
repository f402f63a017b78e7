"""What a file's bytes are remembered by: BLAKE2b-256, hex (the caches check a file against it).

CPython's own ``_blake2``: ``hashlib`` would load OpenSSL, ~4 ms of an idle pass.
"""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter without the module
    from hashlib import blake2b


def of_bytes(data: bytes) -> str:
    return blake2b(data, digest_size=32).hexdigest()


def of_file(path: str, limit: int | None = None) -> str:
    """The digest of the file at ``path`` (its first ``limit`` bytes when given); OSError as raised."""
    with open(path, "rb") as f:
        return of_bytes(f.read() if limit is None else f.read(limit))
