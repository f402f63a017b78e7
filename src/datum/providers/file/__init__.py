"""``File``: a regular file's presence, content (inline, source or Jinja2 template), mode and owner."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from datum.core.vocab import Action
from datum.providers import fs, reads
from datum.providers.accounts import owner_ids
from datum.providers.base import (
    NO_CHANGE,
    Attributes,
    Beside,
    Change,
    HostContext,
    PathProvider,
    ProviderError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    import jinja2
    import jinja2.sandbox


@dataclass(frozen=True, slots=True)
class FileWant:
    host_path: str
    where: str  # the real path under the root, as a string (a pass builds no Path per file)
    ensure: str
    content: bytes | None
    mode: int | None
    uid: int | None
    gid: int | None
    sensitive: bool = False
    validate: str | None = None  # a command with %s for the candidate's path
    replace: bool = True  # type: ignore[assignment]  # False: content only when the file is created
    backups: int = 0  # how many backups of replaced content to keep (0: none)
    hidden: str | None = None  # the marker another resource at this path asks for (``ctx.hidden``)

    @property
    def real(self) -> Path:
        return Path(self.where)


@dataclass(frozen=True, slots=True)
class FileHave:
    kind: str
    content: bytes | None
    st: os.stat_result | None
    rejected: str | None = None  # why ``validate`` refused the new content


def validate_candidate(
    command: str, data: bytes, ctx: HostContext, *, suffix: str = "", sensitive: bool = False
) -> str | None:
    """Run ``command`` on a private copy of ``data`` (mode 0600, in the temporary directory,
    named with the destination's ``suffix``: ``systemd-analyze verify %s`` needs ``.service``;
    %s stands for its path); None when it succeeds, else why it refused.

    Why keeps the tail of the command's output (``Completed.tail``, the copy's name shown as
    %s), unless the content is ``sensitive``: a checker that prints the line it refused would
    put the secret in the report, so then only the exit status is said."""
    import dataclasses
    import shlex
    import tempfile

    fd, name = tempfile.mkstemp(prefix="datum-validate-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        done = ctx.runner([command.replace("%s", shlex.quote(name))], shell=True, timeout=300)
    finally:
        os.unlink(name)
    if done.returncode == 0:
        return None
    why = f"validate rejected the content: {command} exited {done.returncode}"
    if sensitive:
        return why + " (its output withheld: sensitive: true)"
    tail = dataclasses.replace(done, stdout=done.stdout.replace(name, "%s"), stderr=done.stderr.replace(name, "%s")).tail()
    return why + (f": {tail}" if tail else "")


def render_content(spec: Attributes, ctx: HostContext) -> bytes | None:
    """The desired bytes: inline, from the source file or from the rendered template."""
    if spec.content is not None:
        return spec.content.encode()
    if spec.source is not None:
        return _read_source(spec.source, ctx.manifest_dir)
    if spec.template is not None:
        options = (bool(getattr(spec, "trim_blocks", False)), bool(getattr(spec, "lstrip_blocks", False)))
        return _render(spec.template, spec.vars, ctx, options)
    return None


def _read_source(source: str, manifest_dir: Path) -> bytes:
    """A relative ``source`` must still resolve inside the manifest's directory (validation
    checked it; this catches a link swapped since). An absolute one was allowed explicitly
    (``--allow-source-outside``) and resolved by validation."""
    real = reads.realpath(os.path.join(manifest_dir, source))
    if not Path(source).is_absolute():
        top = reads.realpath(str(manifest_dir))
        if os.path.commonpath([top, real]) != top:
            raise ProviderError(f"source {source} resolves outside the manifest's directory")
    try:
        data = reads.read_bytes(real)
    except reads.NotRegular:
        raise ProviderError(f"cannot read source {source}: not a regular file") from None
    except OSError as exc:
        raise ProviderError(f"cannot read source {source}: {exc.strerror}") from exc
    if data is None:
        raise ProviderError(f"cannot read source {source}: No such file or directory")
    return data


# Templates never produce more than this (a `'x' * 10**10` is refused, not attempted).
MAX_RENDERED = 64 * 1024 * 1024


# The sandbox bounds what a template may touch, not how long it may loop:
# a template still rendering after this long fails its resource.
RENDER_SECONDS = 10.0


class _TooLong(Exception):
    pass


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise ``_TooLong`` in the block after ``seconds`` (main thread only; elsewhere no limit).

    The timer and handler in place before (a test's deadline, say) are put back after.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(_signum: int, _frame: object) -> None:
        raise _TooLong

    previous = signal.signal(signal.SIGALRM, expired)
    before, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if before:
            left = max(before - (time.monotonic() - started), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def _render(
    template: str,
    variables: dict[str, object],
    ctx: HostContext,
    options: tuple[bool, bool] = (False, False),
) -> bytes:
    """Render a Jinja2 template in a sandbox, the same in apply, plan and observe.

    The sandbox refuses Python internals (``''.__class__.__mro__``), loads templates and
    includes only from inside the manifest's directory (real paths, so a link out is refused),
    and bounds ``**`` and ``*`` on sequences; any error fails this resource with its reason.
    """
    import jinja2

    env = _sandbox(str(ctx.manifest_dir), options)
    facts = ctx.facts.as_dict()
    try:
        with _time_limit(RENDER_SECONDS):
            text = env.get_template(template).render({**variables, **facts, "facts": facts})
    except _TooLong as exc:
        raise ProviderError(
            f"template {template}: still rendering after {RENDER_SECONDS:g} s; refused"
        ) from exc
    except jinja2.TemplateNotFound as exc:
        raise ProviderError(f"template {template}: {exc.message or exc.name}") from exc
    except jinja2.sandbox.SecurityError as exc:
        raise ProviderError(f"template {template}: refused by the sandbox: {exc}") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise ProviderError(f"template {template}: line {exc.lineno}: {exc.message}") from exc
    except jinja2.TemplateError as exc:
        raise ProviderError(f"template {template}: {exc}") from exc
    except (RecursionError, MemoryError) as exc:
        raise ProviderError(f"template {template}: too deep or too large to render") from exc
    except Exception as exc:  # noqa: BLE001 - a template's own error (1/0, a bad filter argument)
        raise ProviderError(f"template {template}: {type(exc).__name__}: {exc}") from exc
    return text.encode()


_SANDBOXES: dict[str, object] = {}


def _sandbox(
    manifest_dir: str, options: tuple[bool, bool] = (False, False)
) -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    """One sandboxed environment per manifest directory and (trim_blocks, lstrip_blocks): it
    caches compiled templates, and one compiled with other options must not be reused."""
    key = f"{manifest_dir}\0{options}"
    env = _SANDBOXES.get(key)
    if env is None:
        env = _SANDBOXES[key] = _make_sandbox(manifest_dir, options)
    return env  # type: ignore[return-value]


def _make_sandbox(
    manifest_dir: str, options: tuple[bool, bool] = (False, False)
) -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    import operator

    import jinja2
    import jinja2.sandbox

    root = reads.realpath(manifest_dir)

    class InsideLoader(jinja2.FileSystemLoader):
        """Only files whose real path is inside the manifest's directory."""

        def get_source(
            self, environment: jinja2.Environment, template: str
        ) -> tuple[str, str | None, Callable[[], bool] | None]:
            try:
                parts = jinja2.loaders.split_template_path(template)
            except jinja2.TemplateNotFound:
                parts = None
            real = reads.realpath(os.path.join(root, *parts)) if parts else None
            if real is None or template.startswith("/") or os.path.commonpath([root, real]) != root:
                raise jinja2.TemplateNotFound(
                    template, f"{template} is outside the manifest's directory"
                )
            # Read as every read of a pass is (datum.providers.reads), never through a final
            # link nor blocking; a compiled template is reused while these bytes stay.
            data = _template_bytes(real)
            if data is None:
                raise jinja2.TemplateNotFound(template)
            return data.decode("utf-8"), real, lambda: _template_bytes(real) == data

    class Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["**", "*"])

        def call_binop(
            self, context: jinja2.runtime.Context, operator_: str, left: object, right: object
        ) -> object:
            if operator_ == "**":
                if isinstance(right, int) and isinstance(left, int) and abs(right) > 1000:
                    raise jinja2.sandbox.SecurityError("an exponent above 1000")
                return operator.pow(left, right)  # type: ignore[call-overload]
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, str | bytes | list | tuple) and isinstance(times, int):
                    if len(seq) * times > MAX_RENDERED:
                        raise jinja2.sandbox.SecurityError("a repetition larger than 64 MiB")
            return operator.mul(left, right)  # type: ignore[operator]

    return Sandbox(
        loader=InsideLoader(root),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=options[0],
        lstrip_blocks=options[1],
    )


def _template_bytes(real: str) -> bytes | None:
    try:
        return reads.read_bytes(real)
    except OSError:
        return None


def keep_backup(dir_fd: int, name: str, old: bytes, st: os.stat_result | None, keep: int) -> None:
    """``old`` beside the file ``name`` (in the directory open at ``dir_fd``) as
    NAME.datum-backup-TIMESTAMP, with its mode and owner; then only the newest ``keep`` backups of
    it stay (links named like one are removed, never followed)."""
    from datetime import UTC, datetime

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o600
    uid, gid = (st.st_uid, st.st_gid) if st is not None else (-1, -1)
    prefix = f"{name}.datum-backup-"
    fs.write_at(dir_fd, prefix + stamp, old, mode=mode, uid=uid, gid=gid, replace=False)
    backups = sorted(n for n in os.listdir(dir_fd) if n.startswith(prefix))
    for backup in backups[:-keep]:
        try:
            os.unlink(backup, dir_fd=dir_fd)
        except (FileNotFoundError, IsADirectoryError):
            continue


class FileProvider(PathProvider[Attributes, FileWant, FileHave]):
    type = "File"
    reads_recorded = True  # through datum.providers.reads: the idle pass replays them
    spec = "datum.providers.file.spec:FileSpec"
    namevar = "path"
    defers_dir_sync = True

    def beside(self, spec: Attributes) -> list[Beside]:
        source = [Beside("source", spec.source)] if spec.source else []
        return source + ([Beside("template", spec.template, may_leave=False)] if spec.template else [])

    def secret(self, spec: Attributes) -> bool:
        # A source's bytes are not in the manifest, and may be readable by their owner alone.
        return bool(spec.sensitive or spec.source)

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> FileWant:
        owned = spec.owner is not None or spec.group is not None
        uid, gid = owner_ids(ctx, spec.owner, spec.group) if owned else (None, None)
        # Present writes through a final link (to its target inside the root);
        # absent removes the link itself, never what it points to.
        real = ctx.real(spec.path, follow_last=spec.ensure == "present")
        if real == str(ctx.root):
            raise ProviderError(f"{spec.path} is the root; a File never removes or replaces it")
        mode = spec.mode
        if not owned and mode is None and spec.ensure == "present" and ctx.manifest is not None:
            from datum.providers.directory import recursed_over

            # Below a recursing Directory, what it gives a file: the one pass converges.
            mode, uid, gid = recursed_over(ctx, real) or (None, None, None)
        hidden = ctx.hidden(spec.path, real)
        return FileWant(
            spec.path,
            real,
            spec.ensure,
            render_content(spec, ctx) if spec.ensure == "present" else None,
            mode,
            uid,
            gid,
            bool(getattr(spec, "sensitive", False)) or hidden == fs.REDACTED_SENSITIVE,
            getattr(spec, "validate_cmd", None),
            bool(getattr(spec, "replace", True)),
            int(getattr(spec, "backups", 5)) if getattr(spec, "backup", False) else 0,
            hidden,
        )

    def observe(self, want: FileWant, ctx: HostContext) -> FileHave:
        st = ctx.lstat(want.where)
        kind = fs.kind(st)
        content = (
            fs.read_file(want.where, st) if st is not None and kind == "file" and want.content is not None else None
        )
        rejected = None
        if want.validate and want.content is not None and content != want.content and (
            want.replace or kind == "absent"
        ):
            if kind in ("absent", "file"):  # observe and plan say what apply would refuse
                suffix = os.path.splitext(want.host_path)[1]
                rejected = validate_candidate(
                    want.validate, want.content, ctx, suffix=suffix, sensitive=want.sensitive
                )
        return FileHave(kind, content, st, rejected)

    @staticmethod
    def _refuse(want: FileWant, have: FileHave) -> None:
        """Raise what apply would refuse; plan raises it too (the pass line says why, not "update")."""
        fs.refuse_special(
            want.host_path, have.kind, "a file" if want.ensure == "present" else "absent"
        )
        if want.ensure == "absent" and have.kind == "directory":
            raise ProviderError(f"{want.host_path} is a directory; a File will not remove it")
        if want.ensure == "present" and have.kind not in ("absent", "file"):
            raise ProviderError(
                f"{want.host_path} is a {have.kind}; refusing to replace it with a file"
            )

    def plan(self, want: FileWant, have: FileHave) -> Change:
        self._refuse(want, have)
        if have.rejected and want.ensure == "present":
            raise ProviderError(have.rejected)
        if want.ensure == "absent":
            if have.kind == "absent":
                return NO_CHANGE
            return Change(Action.DELETE, (f"{have.kind} present, want absent",))
        if have.kind == "absent":
            return self._with_diff(Change(Action.CREATE, ("absent",)), want, have, None)
        content = want.content is not None and have.content != want.content and want.replace
        differences = ["content"] if content else []
        differences += fs.meta_differences(have.st, want.mode, want.uid, want.gid)
        if not differences:
            return NO_CHANGE
        change = Change(Action.UPDATE, tuple(differences))
        return self._with_diff(change, want, have, have.content) if content else change

    @staticmethod
    def _with_diff(change: Change, want: FileWant, have: FileHave, before: bytes | None) -> Change:
        """``change`` with the content diff, or the marker that stands for it where it must not be shown."""
        existing = stat.S_IMODE(have.st.st_mode) if have.st is not None else None
        marker = fs.redaction(want.sensitive, want.mode, existing) or want.hidden
        diff = marker or fs.unified(want.host_path, before, want.content or b"")
        return replace(change, diff=diff, sensitive=marker is not None)

    def apply(self, want: FileWant, have: FileHave, change: Change, ctx: HostContext) -> str | None:
        self._refuse(want, have)  # whoever calls
        # Through the directory's descriptor, reached without following a link: what a link
        # swapped in since observe leads to is never written, chowned nor chmodded.
        with ctx.parent(want.where, want.host_path, make=have.kind == "absent") as (fd, name):
            if change.action is Action.DELETE:
                fs.remove_at(fd, name, want.host_path)
            elif self._writes(want, have):
                data = want.content if want.content is not None else (have.content or b"")
                if want.backups and have.kind == "file" and have.content is not None:
                    keep_backup(fd, name, have.content, have.st, want.backups)
                # The directory's fsync waits for the end of the pass (fs.sync_dirs, run by the
                # executor before anything runs a command and before the report is stored).
                # Created: never over what appeared since observe (replace: false included).
                fs.write_at(
                    fd,
                    name,
                    data,
                    mode=want.mode,
                    uid=-1 if want.uid is None else want.uid,
                    gid=-1 if want.gid is None else want.gid,
                    replace=have.kind != "absent",
                    sync_dir=False,
                    directory=os.path.dirname(want.where),
                    host_path=want.host_path,
                )
            else:
                from datum.providers import held

                obj, st = held.open_object(fd, name, want.host_path, stat.S_IFREG)
                try:
                    fs.set_meta(obj, st, want.mode, want.uid, want.gid, want.host_path)
                finally:
                    os.close(obj)
        return None

    @staticmethod
    def _writes(want: FileWant, have: FileHave) -> bool:
        """Whether apply writes the whole file (created, or its content replaced)."""
        rewrite = want.content is not None and have.content != want.content and want.replace
        return have.kind == "absent" or rewrite

    def verify(self, want: FileWant, change: Change, ctx: HostContext) -> str | None:
        """A file ``write_atomic`` wrote is what it was given: its bytes, mode and owner were
        written to the temporary file, fsynced, then renamed into place, or it raised. Only a
        change of mode or owner alone, or a removal, is observed again."""
        if change.action is Action.CREATE or "content" in change.differences:
            return None
        return super().verify(want, change, ctx)


PROVIDER = FileProvider()


def template_closure(manifest_dir: str, templates: list[str]) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    """Every file the ``templates`` load, themselves included: ``{name: real path}`` and findings.

    Found with Jinja2's own parser (``jinja2.meta.find_referenced_templates`` on each parsed
    template, recursively) and resolved by the sandbox's own loader, so only files whose real
    path is inside ``manifest_dir`` count. A finding is ``(template, what is wrong)``: a name
    that cannot be resolved statically (``{% include name %}``), one outside the directory or
    missing (unless ``ignore missing`` or one of a list of alternatives), a syntax error.
    The names are the loader's (``a/./b.j2`` is ``a/b.j2``), as the agent must lay them out.
    """
    import jinja2
    import jinja2.meta
    import jinja2.nodes

    env = _sandbox(manifest_dir)
    loader = env.loader
    assert loader is not None
    found: dict[str, Path] = {}
    problems: list[tuple[str, str]] = []
    todo: list[tuple[str, str | None, bool]] = [(t, None, False) for t in templates]
    while todo:
        name, by, optional = todo.pop(0)
        try:
            key = "/".join(jinja2.loaders.split_template_path(name))
        except jinja2.TemplateNotFound:
            key = name
        if key in found:
            continue
        try:
            source, filename, _ = loader.get_source(env, name)
        except jinja2.TemplateNotFound as exc:
            if not optional:
                what = exc.message if exc.message and exc.message != name else f"no template {name}"
                problems.append((by or name, what if by is None else f"loads {name}: {what}"))
            continue
        found[key] = Path(filename or os.path.join(manifest_dir, key))
        try:
            ast = env.parse(source, name, filename)
        except jinja2.TemplateSyntaxError as exc:
            problems.append((key, f"line {exc.lineno}: {exc.message}"))
            continue
        alternatives: set[str] = set()
        for node in ast.find_all((jinja2.nodes.Include, jinja2.nodes.Extends, jinja2.nodes.Import, jinja2.nodes.FromImport)):
            target = node.template  # type: ignore[attr-defined]
            if isinstance(target, jinja2.nodes.Const) and isinstance(target.value, str):
                if isinstance(node, jinja2.nodes.Include) and node.ignore_missing:
                    alternatives.add(target.value)
            elif isinstance(target, jinja2.nodes.Tuple | jinja2.nodes.List):
                alternatives.update(
                    i.value for i in target.items if isinstance(i, jinja2.nodes.Const) and isinstance(i.value, str)
                )
        for ref in jinja2.meta.find_referenced_templates(ast):
            if ref is None:
                problems.append((
                    key,
                    "loads a template whose name cannot be resolved statically "
                    "({% include %}, {% import %} or {% extends %} of an expression); "
                    "name it with a string so its file can be sent",
                ))
            else:
                todo.append((ref, key, ref in alternatives))
    return found, problems
