"""Host facts for templates: hostname, OS release, kernel, boot id, CPU count, memory.

Facts that describe an installed system (hostname, OS release) are read under
``--root``; facts that describe the running machine (kernel, boot id, CPUs,
memory) are read from the running machine, since a root does not boot.
"""

from __future__ import annotations

import os

from datum.providers import reads
from datum.providers.value import Frozen

TYPE_CHECKING = False  # the idle pass reads the boot id: no typing or pathlib imported for it
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


class Facts(Frozen):
    __slots__ = ("hostname", "os_release", "kernel", "boot_id", "cpu_count", "memory_mb")
    hostname: str
    os_release: dict[str, str]
    kernel: str
    boot_id: str
    cpu_count: int
    memory_mb: int

    def __init__(
        self,
        hostname: str,
        os_release: dict[str, str] | None = None,
        kernel: str = "",
        boot_id: str = "",
        cpu_count: int = 1,
        memory_mb: int = 0,
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "hostname", hostname)
        setattr_(self, "os_release", {} if os_release is None else os_release)
        setattr_(self, "kernel", kernel)
        setattr_(self, "boot_id", boot_id)
        setattr_(self, "cpu_count", cpu_count)
        setattr_(self, "memory_mb", memory_mb)

    def as_dict(self) -> dict[str, Any]:
        """Every fact by name; ``os_release`` a copy (a template cannot change the facts)."""
        out = super().as_dict()
        out["os_release"] = dict(self.os_release)
        return out


# Every name a template sees besides its ``vars``: the facts, and all of them under ``facts``.
# A ``vars`` key with one of these names is a validation finding, never a silent override.
NAMES: frozenset[str] = frozenset([*Facts.__slots__, "facts"])


def parse_os_release(text: str) -> dict[str, str]:
    """``KEY="value"`` lines as a dict, quotes removed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            out[key] = value.strip().strip("'\"")
    return out


def _read(path: str | Path) -> str:
    """A file under the root (its real path), as text; empty when it cannot be read."""
    try:
        data = reads.read_bytes(str(path))
    except OSError:
        return ""
    return "" if data is None else data.decode("utf-8", "replace")


def read_boot_id(boot_id_file: str) -> str:
    """The running boot's id; ``DATUM_BOOT_ID_FILE`` overrides the configured file (tests)."""
    found: str = reads.fact("text", os.environ.get("DATUM_BOOT_ID_FILE") or boot_id_file)
    return found


def running_kernel() -> str:
    found: str = reads.fact("uname", "release")
    return found


def node_name() -> str:
    """What gethostname(2) returns, without importing socket."""
    found: str = reads.fact("uname", "nodename")
    return found


def read_facts(root: Path, boot_id_file: str) -> Facts:
    """Read every fact once."""
    from datum.providers.fs import resolve

    hostname = _read(resolve(root, "/etc/hostname")).strip() if str(root) != "/" else ""
    os_release = parse_os_release(_read(resolve(root, "/etc/os-release")))
    if not os_release:
        os_release = parse_os_release(_read(resolve(root, "/usr/lib/os-release")))
    return Facts(
        hostname=hostname or node_name(),
        os_release=os_release,
        kernel=running_kernel(),
        boot_id=read_boot_id(boot_id_file),
        cpu_count=reads.fact("cpus"),
        memory_mb=reads.fact("memory_kb") // 1024,
    )
