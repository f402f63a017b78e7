"""What a file's bytes are remembered by: BLAKE2b-256, hex (the caches check a file against it),
made by the recorder's ``digest`` (``datum.providers.reads``), which the idle pass replays by."""

from __future__ import annotations

from datum.providers.reads import digest


def of_bytes(data: bytes) -> str:
    """``datum.providers.reads.digest``: the idle pass replays an included manifest by it."""
    return digest(data)


def of_file(path: str, limit: int | None = None) -> str:
    """The digest of the file at ``path`` (its first ``limit`` bytes when given); OSError as raised."""
    with open(path, "rb") as f:
        return of_bytes(f.read() if limit is None else f.read(limit))
