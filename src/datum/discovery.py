"""The entry points Datum reads (``datum.resources``, ``datum.reconcilers``), found once per state of the installation.

``importlib.metadata.entry_points()`` imports ``importlib.metadata`` (with
``email``, ``zipfile``, ...) and reads every installed distribution's
metadata: 10-15 ms of a process that a pass must not pay every time. The
groups found are kept in one small file of the cache directory, valid while
the installation is as it was: the modification time of every directory on
``sys.path`` (installing, upgrading or removing a distribution adds or
removes its ``.dist-info`` there) and of every ``entry_points.txt`` that
declared one of the groups (an editable project's metadata rewritten in place).
Anything else, or no cache, is a new scan.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

GROUPS = ("datum.resources", "datum.reconcilers", "pydantic")
FORMAT = 1


class Found(NamedTuple):
    """One entry point: its name, its ``module:attribute`` and the distribution that declares it."""

    name: str
    value: str
    dist: str


def cache_root() -> Path:
    """Datum's cache (``datum.home.cache_root``)."""
    from datum.home import cache_root as root

    return Path(root())


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _installation() -> dict[str, int | None]:
    # The current directory ('' of ``python -c``) changes with every file made in it: not a
    # place distributions are installed to, it is left out (the ``datum`` script never has it).
    return {entry: _mtime(entry) for entry in sys.path if entry}


_found: dict[str, list[Found]] | None = None


def entry_points(group: str) -> list[Found]:
    """The entry points of ``group`` (one of ``GROUPS``), in the order the installation lists them."""
    global _found
    if _found is None:
        _found = _load() or _scan()
    return list(_found.get(group, ()))


def stamp() -> str:
    """What the entry points were found under: changes when a distribution that matters changes."""
    entry_points(GROUPS[0])
    return _stamp


_stamp = ""
_declaring: list[str] = []


def dependencies() -> list[str]:
    """What ``stamp`` is made from: every ``sys.path`` entry, and each ``entry_points.txt`` that
    declared one of the groups (the idle pass checks these did not change)."""
    entry_points(GROUPS[0])
    return [entry for entry in sys.path if entry] + _declaring


def _index() -> Path:
    """One index per ``sys.path`` (the ``datum`` script and ``python -c`` see different ones)."""
    from zlib import crc32

    return cache_root() / f"entry-points-{crc32(chr(0).join(sys.path).encode()):08x}.idx"


def _load() -> dict[str, list[Found]] | None:
    global _stamp
    try:
        data = json.loads(_index().read_text(encoding="utf-8"))
        if data["format"] != FORMAT or data["python"] != sys.version or data["path"] != _installation():
            return None
        if any(_mtime(f) != m for f, m in data["declaring"].items()):
            return None
        found = {g: [Found(*e) for e in entries] for g, entries in data["groups"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    _stamp = _stamp_of(data["path"], data["declaring"], found)
    _declaring[:] = data["declaring"]
    return found


def _scan() -> dict[str, list[Found]]:
    """Read every distribution's entry points (importlib.metadata), then remember the groups."""
    global _stamp
    from importlib.metadata import distributions

    path = _installation()
    found: dict[str, list[Found]] = {g: [] for g in GROUPS}
    declaring: dict[str, int | None] = {}
    for dist in distributions():
        mine = [ep for ep in dist.entry_points if ep.group in found]
        if not mine:
            continue
        name = dist.metadata["Name"] or "?"
        where = getattr(dist, "_path", None)
        if where is not None:
            declaring[str(Path(where) / "entry_points.txt")] = _mtime(str(Path(where) / "entry_points.txt"))
        for ep in mine:
            found[ep.group].append(Found(ep.name, ep.value, name))
    _stamp = _stamp_of(path, declaring, found)
    _declaring[:] = declaring
    data = {"format": FORMAT, "python": sys.version, "path": path, "declaring": declaring, "groups": found}
    try:
        index = _index()
        index.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = index.with_name(f".{index.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:  # the owner's alone, as all under $DATUM_HOME
            out.write(json.dumps(data))
        os.replace(tmp, index)
    except OSError:
        pass  # a cache is never a failure: the next process scans again
    return found


def _stamp_of(path: dict[str, int | None], declaring: dict[str, int | None], found: dict[str, list[Found]]) -> str:
    """What was found, where from, and the state of the directories distributions are installed
    in; not the rest of ``sys.path`` (the script's own directory differs between ``datum`` and
    ``python -m``, and must not make the validated-manifest cache miss)."""
    sites = {k: v for k, v in path.items() if k.endswith(("site-packages", "dist-packages"))}
    return json.dumps([sites, declaring, found], sort_keys=True)


def forget() -> None:
    """Scan again on the next question (a test that installs a distribution)."""
    global _found
    _found = None


def no_pydantic_plugins() -> None:
    """Tell pydantic it has no plugins when no distribution declares one, so building a model
    does not make pydantic scan every distribution's entry points itself (``pydantic.plugin._loader``
    keeps what its own scan found in ``_plugins``; None means not scanned yet)."""
    if entry_points("pydantic"):
        return
    loader = sys.modules.get("pydantic.plugin._loader")
    if loader is None:
        import pydantic.plugin._loader as loader
    if getattr(loader, "_plugins", ...) is None:
        loader._plugins = {}
