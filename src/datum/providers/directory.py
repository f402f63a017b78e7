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


def kept_paths(ctx: HostContext) -> frozenset[str]:
    """Every real path under the root that a resource of the manifest touches, or passes through.

    Line files, Exec ``creates``, File, Directory and Symlink paths, each with
    the links it resolves through and their targets (so ``/var/run/x`` keeps
    ``/run/x`` and the ``/var/run`` link), and the manifest's own files
    (``source``, ``template``, the manifest) by their real paths. Computed once a pass.
    """
    if ctx._kept is not None:
        return ctx._kept
    from datum.providers.registry import provider

    host_paths = set(ctx.managed_paths)
    local: set[str] = set()
    manifest = ctx.manifest
    if manifest is not None:
        for r in manifest.resources:
            host_paths.update(provider(r.type).touches(r.spec))
            for attr in ("source", "template"):
                if value := getattr(r.spec, attr, None):
                    local.add(os.path.realpath(os.path.join(manifest.dir, value)))
        if manifest.source and manifest.source.startswith("/"):
            local.add(os.path.realpath(manifest.source))
    kept: set[str] = set()
    for p in host_paths:
        kept |= fs.passes_through(ctx.root, p)
    for p in local:  # files on the running system: kept with every directory above them
        while p not in kept and p != "/":
            kept.add(p)
            p = os.path.dirname(p)
    ctx._kept = frozenset(kept)
    return ctx._kept


class DirectoryProvider(PathProvider["DirectorySpec", DirWant, DirHave]):
    type = "Directory"

    def desired(self, name: str, spec: DirectorySpec, ctx: HostContext) -> DirWant:
        uid, gid = owner_ids(ctx, spec.owner, spec.group)
        # Absent removes a link at the path, never the directory it points to.
        real = ctx.path(spec.path, follow_last=spec.ensure == "present")
        if spec.ensure == "absent" and real == ctx.root:
            raise ProviderError(f"{spec.path} is the root; it is never removed")
        keep: frozenset[str] = frozenset()
        if spec.purge and spec.ensure == "present":
            inside = str(real).rstrip("/") + "/"
            kept = kept_paths(ctx)
            keep = frozenset(
                p[len(inside) :].split("/", 1)[0] for p in kept if p.startswith(inside)
            )
        return DirWant(
            spec.path,
            real,
            spec.ensure,
            spec.mode,
            uid,
            gid,
            spec.purge,
            spec.force,
            keep,
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
        # What apply would refuse, plan refuses too (the pass line says why, not "update").
        fs.refuse_special(
            want.host_path, have.kind, "a directory" if want.ensure == "present" else "absent"
        )
        if want.ensure == "absent":
            if have.kind == "absent":
                return Change()
            if have.kind == "directory" and have.entries and not want.force:
                raise ProviderError(f"{want.host_path} is not empty; set force: true to remove it")
            return Change(Action.DELETE, (f"{have.kind} present, want absent",))
        if have.kind == "absent":
            return Change(Action.CREATE, ("absent",))
        if have.kind != "directory":
            raise ProviderError(
                f"{want.host_path} is a {have.kind}; refusing to replace it with a directory"
            )
        differences = fs.meta_differences(have.st, want.mode, want.uid, want.gid)
        unmanaged = sorted(have.entries - want.keep) if want.purge else []
        if unmanaged:
            shown = ", ".join(unmanaged[:5]) + (
                f" and {len(unmanaged) - 5} more" if len(unmanaged) > 5 else ""
            )
            differences.append(f"unmanaged entries: {shown}")
        return Change(Action.UPDATE, tuple(differences)) if differences else Change()

    def apply(self, want: DirWant, have: DirHave, change: Change, ctx: HostContext) -> str | None:
        self.plan(want, have)  # the same refusals, whoever calls
        if change.action is Action.DELETE:
            if want.real == ctx.root:
                raise ProviderError(f"{want.host_path} is the root; it is never removed")
            fs.remove(want.real)  # a link is unlinked, its target stays
            return None
        if have.kind == "absent":
            want.real.mkdir(parents=True, exist_ok=True)
            fs.fsync_dir(want.real.parent)
        fs.set_meta(want.real, want.mode, want.uid, want.gid)
        if want.purge:
            purge(want, have.entries)
        return None


def purge(want: DirWant, entries: frozenset[str]) -> None:
    """Reap the entries no resource manages, through Converge; raise naming those it could not."""
    # One pass, no confirmation and no breaker (an empty desired set included):
    # the manifest is the operator's explicit, validated decision, and a host
    # pass has no memory across runs.
    converge: Converge[str, str] = Converge(
        "directory-entry",
        ConvergeConfig(confirmation_ticks=1, breaker={}, drift_cap=10_000, allow_empty=True),
    )

    def reap(direction: Direction, name: str, _want: str | None, _have: str | None) -> None:
        if direction is Direction.REAP and name not in want.keep:
            fs.remove(want.real / name)  # no-follow: a link is unlinked, a tree walked by fd

    kept = {n: n for n in entries & want.keep}
    result = converge.run(kept, {n: n for n in entries}, reap, {})
    failed = [f"{i.id}: {i.last_err}" for i in result.items if i.reason is Reason.APPLY_FAILED]
    if failed:
        raise ProviderError("could not purge " + "; ".join(failed))


PROVIDER = DirectoryProvider()
