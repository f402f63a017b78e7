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
        if change.action is Action.DELETE:
            fs.remove(want.real)
            return None
        assert want.target is not None
        want.real.parent.mkdir(parents=True, exist_ok=True)
        fs.sweep_temporaries(want.real.parent)
        # A link made beside it (a short name, whatever the link's) and renamed over it:
        # the path is never missing.
        while True:
            tmp = fs.temporary_name(want.real.parent)
            try:
                os.symlink(want.target, tmp)
                break
            except FileExistsError:
                continue
        try:
            os.replace(tmp, want.real)
        except BaseException:
            os.unlink(tmp)
            raise
        fs.fsync_dir(want.real.parent)
        return None


PROVIDER = SymlinkProvider()
