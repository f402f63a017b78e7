"""``Symlink``: a symbolic link and its target. The link itself is managed, never followed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from datum.core.vocab import Action
from datum.providers import fs, reads
from datum.providers.base import Attributes, Change, HostContext, PathProvider, ProviderError


@dataclass(frozen=True, slots=True)
class LinkWant:
    host_path: str
    real: Path
    ensure: str
    target: str | None
    force: bool = False


@dataclass(frozen=True, slots=True)
class LinkHave:
    kind: str
    target: str | None


class SymlinkProvider(PathProvider[Attributes, LinkWant, LinkHave]):
    type = "Symlink"
    reads_recorded = True  # through datum.providers.reads: the idle pass replays them
    spec = "datum.providers.symlink.spec:SymlinkSpec"
    namevar = "path"

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> LinkWant:
        real = ctx.path(spec.path, follow_last=False)
        if real == ctx.root:
            raise ProviderError(f"{spec.path} is the root; a Symlink never removes or replaces it")
        return LinkWant(spec.path, real, spec.ensure, spec.target, spec.force)

    def observe(self, want: LinkWant, ctx: HostContext) -> LinkHave:
        kind = fs.kind(fs.lstat(want.real))
        return LinkHave(kind, reads.readlink(str(want.real)) if kind == "link" else None)

    def plan(self, want: LinkWant, have: LinkHave) -> Change:
        # What apply would refuse, plan refuses too (the pass line says why, not "update").
        fs.refuse_special(
            want.host_path, have.kind, "a link" if want.ensure == "present" else "absent"
        )
        if have.kind == "directory":
            raise ProviderError(f"{want.host_path} is a directory; refusing to replace it")
        if have.kind == "file" and not want.force:
            # A file's content would be lost: only on the manifest's explicit word (Ansible's force).
            what = "replace it with a link" if want.ensure == "present" else "remove it"
            raise ProviderError(f"{want.host_path} is a file; set force: true to {what}")
        if want.ensure == "absent":
            if have.kind == "absent":
                return Change()
            return Change(Action.DELETE, (f"{have.kind} present, want absent",))
        if have.kind == "absent":
            return Change(Action.CREATE, (f"absent, want -> {want.target}",))
        if have.kind != "link":
            return Change(Action.UPDATE, (f"is a {have.kind}, want a link to {want.target}",))
        if have.target != want.target:
            return Change(Action.UPDATE, (f"points to {have.target}, want {want.target}",))
        return Change()

    def apply(self, want: LinkWant, have: LinkHave, change: Change, ctx: HostContext) -> str | None:
        self.plan(want, have)  # the same refusals, whoever calls
        with ctx.parent(str(want.real), want.host_path, make=True) as (fd, name):
            if change.action is Action.DELETE:
                fs.remove_at(fd, name, want.host_path)
                return None
            assert want.target is not None
            fs.sweep_temporaries(fd)
            # A link made beside it (a short name, whatever the link's) and renamed over it:
            # the path is never missing.
            while True:
                tmp = fs.temporary_name()
                try:
                    os.symlink(want.target, tmp, dir_fd=fd)
                    break
                except FileExistsError:
                    continue
            try:
                _still(fd, name, want, have)
                # Where observe found nothing, only nothing is replaced (a file that appeared
                # since is never overwritten, force or not).
                fs.place(fd, tmp, name, replace=have.kind != "absent", host_path=want.host_path)
            except BaseException:
                os.unlink(tmp, dir_fd=fd)
                raise
            os.fsync(fd)
        return None


def _still(fd: int, name: str, want: LinkWant, have: LinkHave) -> None:
    """Refuse to replace what is at ``name`` now unless it is of the kind observe found: a file
    that took a link's place since is replaced only on ``force`` (a directory never)."""
    from datum.providers import held

    try:
        now = fs.kind(os.stat(name, dir_fd=fd, follow_symlinks=False))
    except FileNotFoundError:
        now = "absent"
    if now in (have.kind, "absent") or have.kind == "absent":
        return  # as observed, or gone; over nothing, ``place`` refuses what appeared
    if now == "file" and want.force:
        return
    raise held.appeared(want.host_path, f"a {now}")


PROVIDER = SymlinkProvider()
