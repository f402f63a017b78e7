"""``Symlink``: a symbolic link and its target. The link itself is managed, never followed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from datum.core.vocab import Action
from datum.providers import fs
from datum.providers.base import Change, HostContext, PathProvider, ProviderError

if TYPE_CHECKING:
    from datum.providers.specs import SymlinkSpec


@dataclass(frozen=True)
class LinkWant:
    host_path: str
    real: Path
    ensure: str
    target: str | None


@dataclass(frozen=True)
class LinkHave:
    kind: str
    target: str | None


class SymlinkProvider(PathProvider["SymlinkSpec", LinkWant, LinkHave]):
    type = "Symlink"

    def desired(self, name: str, spec: SymlinkSpec, ctx: HostContext) -> LinkWant:
        return LinkWant(spec.path, ctx.path(spec.path, follow_last=False), spec.ensure, spec.target)

    def observe(self, want: LinkWant, ctx: HostContext) -> LinkHave:
        kind = fs.kind(fs.lstat(want.real))
        return LinkHave(kind, os.readlink(want.real) if kind == "link" else None)

    def plan(self, want: LinkWant, have: LinkHave) -> Change:
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
        if have.kind == "directory":
            raise ProviderError(f"{want.host_path} is a directory; refusing to replace it")
        if change.action is Action.DELETE:
            fs.remove(want.real)
            return None
        assert want.target is not None
        want.real.parent.mkdir(parents=True, exist_ok=True)
        # A link made beside it and renamed over it: the path is never missing.
        tmp = want.real.with_name(f".{want.real.name}.datum-tmp")
        fs.remove(tmp)
        os.symlink(want.target, tmp)
        os.replace(tmp, want.real)
        fs.fsync_dir(want.real.parent)
        return None


PROVIDER = SymlinkProvider()
