"""``File``: a regular file's presence, content (inline, source or Jinja2 template), mode and owner."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from datum.core.vocab import Action
from datum.providers import fs
from datum.providers.accounts import owner_ids
from datum.providers.base import Change, HostContext, PathProvider, ProviderError

if TYPE_CHECKING:
    from datum.providers.specs import FileSpec


@dataclass(frozen=True)
class FileWant:
    host_path: str
    real: Path
    ensure: str
    content: bytes | None
    mode: int | None
    uid: int | None
    gid: int | None


@dataclass(frozen=True)
class FileHave:
    kind: str
    content: bytes | None
    st: os.stat_result | None


def render_content(spec: FileSpec, ctx: HostContext) -> bytes | None:
    """The desired bytes: inline, from the source file or from the rendered template."""
    if spec.content is not None:
        return spec.content.encode()
    if spec.source is not None:
        try:
            return (ctx.manifest_dir / spec.source).read_bytes()
        except OSError as exc:
            raise ProviderError(f"cannot read source {spec.source}: {exc.strerror}") from exc
    if spec.template is not None:
        import jinja2

        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(ctx.manifest_dir)),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            autoescape=False,
        )
        facts = ctx.facts.as_dict()
        try:
            return (
                env.get_template(spec.template).render(**facts, facts=facts, **spec.vars).encode()
            )
        except jinja2.TemplateError as exc:
            raise ProviderError(f"template {spec.template}: {exc}") from exc
    return None


class FileProvider(PathProvider["FileSpec", FileWant, FileHave]):
    type = "File"

    def desired(self, name: str, spec: FileSpec, ctx: HostContext) -> FileWant:
        uid, gid = owner_ids(ctx, spec.owner, spec.group)
        return FileWant(
            spec.path,
            ctx.path(spec.path),
            spec.ensure,
            render_content(spec, ctx) if spec.ensure == "present" else None,
            spec.mode,
            uid,
            gid,
        )

    def observe(self, want: FileWant, ctx: HostContext) -> FileHave:
        st = fs.lstat(want.real)
        kind = fs.kind(st)
        content = fs.read_bytes(want.real) if kind == "file" and want.content is not None else None
        return FileHave(kind, content, st)

    def plan(self, want: FileWant, have: FileHave) -> Change:
        if want.ensure == "absent":
            if have.kind == "absent":
                return Change()
            return Change(
                Action.DELETE,
                (f"{have.kind} present, want absent",),
                fs.unified(want.host_path, have.content, None),
            )
        if have.kind == "absent":
            return Change(
                Action.CREATE, ("absent",), fs.unified(want.host_path, None, want.content or b"")
            )
        if have.kind != "file":
            return Change(Action.UPDATE, (f"is a {have.kind}, want a file",))
        differences = []
        diff = None
        if want.content is not None and have.content != want.content:
            differences.append("content")
            diff = fs.unified(want.host_path, have.content, want.content)
        differences += fs.meta_differences(have.st, want.mode, want.uid, want.gid)
        return Change(Action.UPDATE, tuple(differences), diff) if differences else Change()

    def apply(self, want: FileWant, have: FileHave, change: Change, ctx: HostContext) -> str | None:
        if change.action is Action.DELETE:
            if have.kind == "directory":
                raise ProviderError(f"{want.host_path} is a directory; a File will not remove it")
            fs.remove(want.real)
            return None
        if have.kind not in ("absent", "file"):
            raise ProviderError(
                f"{want.host_path} is a {have.kind}; refusing to replace it with a file"
            )
        if have.kind == "absent" or (want.content is not None and have.content != want.content):
            data = want.content if want.content is not None else (have.content or b"")
            fs.write_atomic(
                want.real,
                data,
                mode=want.mode,
                uid=-1 if want.uid is None else want.uid,
                gid=-1 if want.gid is None else want.gid,
            )
        else:
            fs.set_meta(want.real, want.mode, want.uid, want.gid)
        return None


PROVIDER = FileProvider()
