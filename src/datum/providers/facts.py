"""Host facts for templates: hostname, OS release, kernel, boot id, CPU count, memory.

Facts that describe an installed system (hostname, OS release) are read under
``--root``; facts that describe the running machine (kernel, boot id, CPUs,
memory) are read from the running machine, since a root does not boot.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from datum.providers import reads

# The running machine's boot id, kernel and node name are reads the idle pass replays: made by
# ``datum.providers.reads`` (the idle pass's cold start imports it, not this module).
read_boot_id = reads.boot_id


@dataclass(frozen=True, slots=True)
class Facts:
    hostname: str
    os_release: dict[str, str] = field(default_factory=dict)
    kernel: str = ""
    boot_id: str = ""
    cpu_count: int = 1
    memory_mb: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Every fact by name; ``os_release`` a copy (a template cannot change the facts)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["os_release"] = dict(self.os_release)
        return out


# Every name a template sees besides its ``vars``: the facts, and all of them under ``facts``.
# A ``vars`` key with one of these names is a validation finding, never a silent override.
NAMES: frozenset[str] = frozenset([*(f.name for f in fields(Facts)), "facts"])


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


def read_facts(root: Path, boot_id_file: str) -> Facts:
    """Read every fact once."""
    hostname = _read(reads.real_path(str(root), "/etc/hostname")).strip() if str(root) != "/" else ""
    os_release = parse_os_release(_read(reads.real_path(str(root), "/etc/os-release")))
    if not os_release:
        os_release = parse_os_release(_read(reads.real_path(str(root), "/usr/lib/os-release")))
    return Facts(
        hostname=hostname or reads.node_name(),
        os_release=os_release,
        kernel=reads.kernel(),
        boot_id=reads.boot_id(boot_id_file),
        cpu_count=reads.fact("cpus"),
        memory_mb=reads.fact("memory_kb") // 1024,
    )
