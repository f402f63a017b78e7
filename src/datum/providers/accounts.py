"""The account databases under ``--root`` (etc/passwd, group, shadow, gshadow): read, look up, edit.

Edits rewrite the whole file atomically, so a crash leaves the old database
or the new one. Names resolve against the root's databases, not the running
system's, because ownership inside a root means that root's users.
"""

from __future__ import annotations

from dataclasses import dataclass

from datum.providers import reads
from datum.providers.base import HostContext, ProviderError
from datum.providers.fs import read_bytes, write_atomic

PASSWD = "/etc/passwd"
GROUP = "/etc/group"
SHADOW = "/etc/shadow"
GSHADOW = "/etc/gshadow"

# Databases whose entries must not be readable by everyone.
_SECRET = {SHADOW: 0o640, GSHADOW: 0o640}


@dataclass(frozen=True, slots=True, repr=False)
class Table:
    """One colon-separated database: its rows in file order."""

    path: str
    rows: tuple[tuple[str, ...], ...]

    def __repr__(self) -> str:  # shadow and gshadow hold hashes: never in a repr or a traceback
        if self.path in _SECRET:
            return f"Table({self.path!r}, {len(self.rows)} rows)"
        return f"Table({self.path!r}, {self.rows!r})"

    def get(self, name: str) -> tuple[str, ...] | None:
        for row in self.rows:
            if row and row[0] == name:
                return row
        return None

    def by_id(self, ident: int, column: int = 2) -> tuple[str, ...] | None:
        for row in self.rows:
            if len(row) > column and row[column] == str(ident):
                return row
        return None

    def ids(self, column: int = 2) -> set[int]:
        return {int(r[column]) for r in self.rows if len(r) > column and r[column].isdigit()}

    def with_row(self, name: str, row: tuple[str, ...] | None) -> Table:
        """A copy where ``name``'s row is replaced by ``row`` (appended if new, removed if None)."""
        out: list[tuple[str, ...]] = []
        found = False
        for r in self.rows:
            if r and r[0] == name:
                found = True
                if row is not None:
                    out.append(row)
            else:
                out.append(r)
        if not found and row is not None:
            out.append(row)
        return Table(self.path, tuple(out))


def read_table(ctx: HostContext, path: str) -> Table:
    """The database at host ``path`` under the root; empty when it does not exist."""
    key = f"accounts:{path}"
    cached = ctx.cache.get(key)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    data = read_bytes(ctx.path(path))
    rows = tuple(
        tuple(line.split(":"))
        for line in (data or b"").decode("utf-8", "replace").splitlines()
        if line
    )
    table = Table(path, rows)
    ctx.cache[key] = table
    return table


def exists(ctx: HostContext, path: str) -> bool:
    """Whether the database at host ``path`` is there (a read of the host, recorded)."""
    return reads.kind(ctx.real(path)) is not None


def write_table(ctx: HostContext, table: Table) -> None:
    """Write ``table`` back atomically and forget the cached copy."""
    data = "".join(":".join(r) + "\n" for r in table.rows).encode()
    write_atomic(ctx.path(table.path), data, mode=_SECRET.get(table.path))
    ctx.cache.pop(f"accounts:{table.path}", None)


def remove_name(ctx: HostContext, name: str, *paths: str) -> None:
    """Remove ``name``'s row from each database that exists."""
    for path in paths:
        if exists(ctx, path):
            write_table(ctx, read_table(ctx, path).with_row(name, None))


def uid_of(ctx: HostContext, owner: str) -> int:
    if owner.isdigit():
        return int(owner)
    row = read_table(ctx, PASSWD).get(owner)
    if row is None or len(row) < 3:
        raise ProviderError(f"no user {owner!r} in {PASSWD}")
    return int(row[2])


def gid_of(ctx: HostContext, group: str) -> int:
    if group.isdigit():
        return int(group)
    row = read_table(ctx, GROUP).get(group)
    if row is None or len(row) < 3:
        raise ProviderError(f"no group {group!r} in {GROUP}")
    return int(row[2])


def owner_ids(
    ctx: HostContext, owner: str | None, group: str | None
) -> tuple[int | None, int | None]:
    """The numeric ids of an owner and group attribute (None where not managed)."""
    return (
        uid_of(ctx, owner) if owner is not None else None,
        gid_of(ctx, group) if group is not None else None,
    )


def next_id(used: set[int], system: bool) -> int:
    """The first free id in the range Debian's adduser uses."""
    lo, hi = (100, 999) if system else (1000, 59999)
    for candidate in range(lo, hi + 1):
        if candidate not in used:
            return candidate
    raise ProviderError("no free id left")
