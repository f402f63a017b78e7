"""``Directory``: a directory's presence, mode and owner; with ``purge`` it reaps unmanaged entries.

Purging goes through ``Converge`` with the manifest's managed paths as the
desired set, so a purge reports, per entry, what it removed or failed to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from datum.core.converge import Converge, ConvergeConfig
from datum.core.vocab import Action, Direction, Reason
from datum.providers import fs
from datum.providers.accounts import owner_ids
from datum.providers.base import Change, HostContext, PathProvider, ProviderError

if TYPE_CHECKING:
    from datum.providers.specs import DirectorySpec


@dataclass(frozen=True)
class DirWant:
    host_path: str
    real: Path
    ensure: str
    mode: int | None
    uid: int | None
    gid: int | None
    purge: bool
    force: bool
    keep: frozenset[str]


@dataclass(frozen=True)
class DirHave:
    kind: str
    st: os.stat_result | None
    entries: frozenset[str]


def managed_children(host_path: str, managed: frozenset[str]) -> frozenset[str]:
    """The names directly inside ``host_path`` that some resource manages, or leads to."""
    prefix = host_path.rstrip("/") + "/"
    return frozenset(p[len(prefix) :].split("/", 1)[0] for p in managed if p.startswith(prefix))


class DirectoryProvider(PathProvider["DirectorySpec", DirWant, DirHave]):
    type = "Directory"

    def desired(self, name: str, spec: DirectorySpec, ctx: HostContext) -> DirWant:
        uid, gid = owner_ids(ctx, spec.owner, spec.group)
        return DirWant(
            spec.path,
            ctx.path(spec.path),
            spec.ensure,
            spec.mode,
            uid,
            gid,
            spec.purge,
            spec.force,
            managed_children(spec.path, ctx.managed_paths),
        )

    def observe(self, want: DirWant, ctx: HostContext) -> DirHave:
        st = fs.lstat(want.real)
        kind = fs.kind(st)
        entries = (
            frozenset(os.listdir(want.real))
            if kind == "directory" and (want.purge or want.ensure == "absent")
            else frozenset()
        )
        return DirHave(kind, st, entries)

    def plan(self, want: DirWant, have: DirHave) -> Change:
        if want.ensure == "absent":
            if have.kind == "absent":
                return Change()
            return Change(Action.DELETE, (f"{have.kind} present, want absent",))
        if have.kind == "absent":
            return Change(Action.CREATE, ("absent",))
        if have.kind != "directory":
            return Change(Action.UPDATE, (f"is a {have.kind}, want a directory",))
        differences = fs.meta_differences(have.st, want.mode, want.uid, want.gid)
        unmanaged = sorted(have.entries - want.keep) if want.purge else []
        if unmanaged:
            shown = ", ".join(unmanaged[:5]) + (
                f" and {len(unmanaged) - 5} more" if len(unmanaged) > 5 else ""
            )
            differences.append(f"unmanaged entries: {shown}")
        return Change(Action.UPDATE, tuple(differences)) if differences else Change()

    def apply(self, want: DirWant, have: DirHave, change: Change, ctx: HostContext) -> str | None:
        if change.action is Action.DELETE:
            if have.kind == "directory" and have.entries and not want.force:
                raise ProviderError(f"{want.host_path} is not empty; set force: true to remove it")
            fs.remove(want.real)
            return None
        if have.kind not in ("absent", "directory"):
            raise ProviderError(
                f"{want.host_path} is a {have.kind}; refusing to replace it with a directory"
            )
        if have.kind == "absent":
            want.real.mkdir(parents=True, exist_ok=True)
            fs.fsync_dir(want.real.parent)
        fs.set_meta(want.real, want.mode, want.uid, want.gid)
        if want.purge:
            purge(want, have.entries)
        return None


def purge(want: DirWant, entries: frozenset[str]) -> None:
    """Reap the entries no resource manages, through Converge; raise naming those it could not."""
    # One pass, no confirmation and no breaker: the manifest is the operator's
    # explicit, validated decision, and a host pass has no memory across runs.
    converge: Converge[str, str] = Converge(
        "directory-entry", ConvergeConfig(confirmation_ticks=1, breaker={}, drift_cap=10_000)
    )

    def reap(direction: Direction, name: str, _want: str | None, _have: str | None) -> None:
        if direction is Direction.REAP:
            fs.remove(want.real / name)

    kept = {n: n for n in entries & want.keep}
    result = converge.run(kept, {n: n for n in entries}, reap, {})
    failed = [f"{i.id}: {i.last_err}" for i in result.items if i.reason is Reason.APPLY_FAILED]
    if failed:
        raise ProviderError("could not purge " + "; ".join(failed))


PROVIDER = DirectoryProvider()
