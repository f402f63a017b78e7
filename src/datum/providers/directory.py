"""``Directory``: a directory's presence, mode and owner; with ``purge`` it reaps unmanaged entries.

Purging goes through ``Converge`` with the manifest's managed paths as the
desired set, so a purge reports, per entry, what it removed or failed to.
Whatever can hold data is counted when observed and again when removed
(``datum.safefs``): without ``force`` only files, links and directories
holding nothing but empty directories go; with ``force`` a tree goes only if
nothing appeared in it since the pass decided. Links are never followed.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from datum import safefs
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
    # What each directory to be removed holds, counted by observe (None: it could
    # not be counted); ``SELF`` for the directory itself when it is to be absent.
    held: Mapping[str, safefs.Tally | None] = field(default_factory=dict)


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
        if kind != "directory" or not (want.purge or want.ensure == "absent"):
            return DirHave(kind, st, frozenset())
        # What each directory to be removed holds, counted now: apply counts again.
        try:
            fd = safefs.open_dir(want.real)
        except NotADirectoryError as exc:
            raise ProviderError(f"{want.host_path} changed while it was read; try again") from exc
        try:
            entries = frozenset(os.listdir(fd))
            held: dict[str, safefs.Tally | None] = {}
            if want.ensure == "absent":
                if want.force and entries:
                    held[SELF] = safefs.tally_fd(fd)
            else:
                for name in entries - want.keep:
                    held.update(_tally_entry(fd, name))
        finally:
            os.close(fd)
        return DirHave(kind, st, entries, held)

    def plan(self, want: DirWant, have: DirHave) -> Change:
        # What apply would refuse, plan refuses too (the pass line says why, not "update").
        fs.refuse_special(
            want.host_path, have.kind, "a directory" if want.ensure == "present" else "absent"
        )
        if want.ensure == "absent":
            if have.kind == "absent":
                return Change()
            if have.kind == "directory" and have.entries:
                if not want.force:
                    raise ProviderError(
                        f"{want.host_path} is not empty; set force: true to remove it"
                    )
                counted = have.held.get(SELF)
                if counted is None:
                    raise ProviderError(f"{want.host_path}: {UNCOUNTED}")
                return Change(
                    Action.DELETE,
                    (f"directory holding {safefs.entries_text(counted.entries)}, want absent",),
                )
            return Change(Action.DELETE, (f"{have.kind} present, want absent",))
        if have.kind == "absent":
            return Change(Action.CREATE, ("absent",))
        if have.kind != "directory":
            raise ProviderError(
                f"{want.host_path} is a {have.kind}; refusing to replace it with a directory"
            )
        differences = fs.meta_differences(have.st, want.mode, want.uid, want.gid)
        unmanaged = sorted(have.entries - want.keep) if want.purge else []
        refused = {n: why for n in unmanaged if (why := _refusal(have.held, n, want.force))}
        removed = [n for n in unmanaged if n not in refused]
        if removed:
            shown = ", ".join(removed[:5]) + (
                f" and {len(removed) - 5} more" if len(removed) > 5 else ""
            )
            differences.append(f"unmanaged entries: {shown}")
        if refused:
            refusal = _could_not(refused)
            if not differences:  # apply would do nothing but refuse: fail here as it would
                raise ProviderError(refusal)
            differences.append(refusal)
        return Change(Action.UPDATE, tuple(differences)) if differences else Change()

    def apply(self, want: DirWant, have: DirHave, change: Change, ctx: HostContext) -> str | None:
        self.plan(want, have)  # the same refusals, whoever calls
        if change.action is Action.DELETE:
            if want.real == ctx.root:
                raise ProviderError(f"{want.host_path} is the root; it is never removed")
            if have.kind == "directory":
                _remove_directory(want, have)
            else:
                fs.remove(want.real)  # a link is unlinked, its target stays
            return None
        if have.kind == "absent":
            want.real.mkdir(parents=True, exist_ok=True)
            fs.fsync_dir(want.real.parent)
        fs.set_meta(want.real, want.mode, want.uid, want.gid)
        if want.purge:
            purge(want, have)
        return None


SELF = "."  # in ``DirHave.held``: the directory itself (``ensure: absent``)
UNCOUNTED = "what it holds could not be counted; left alone"
CONTENT = "set force: true to purge directories with content"


def _tally_entry(fd: int, name: str) -> dict[str, safefs.Tally | None]:
    """``{name: what it holds}`` when ``name`` is a directory (None: it could not be counted), else ``{}``."""
    try:
        sub = safefs.open_dir(name, dir_fd=fd)
    except (NotADirectoryError, FileNotFoundError):
        return {}  # a file or a link (unlinked), or gone
    except OSError:
        return {name: None}
    try:
        return {name: safefs.tally_fd(sub)}
    except OSError:
        return {name: None}
    finally:
        os.close(sub)


def _refusal(held: Mapping[str, safefs.Tally | None], name: str, force: bool) -> str | None:
    """Why apply would leave the unmanaged entry ``name`` alone, or None when it removes it."""
    if name not in held:
        return None  # not a directory: unlinked
    counted = held[name]
    if counted is None:
        return UNCOUNTED
    if not force and counted.objects:
        return f"holds {safefs.entries_text(counted.entries)}; {CONTENT}"
    return None


def _could_not(refused: Mapping[str, str]) -> str:
    return "could not purge " + "; ".join(f"{n}: {why}" for n, why in sorted(refused.items()))


def _remove_directory(want: DirWant, have: DirHave) -> None:
    """``ensure: absent`` on a directory: ``rmdir``, or with ``force`` the tree if nothing appeared since observe."""
    parent = safefs.open_dir(want.real.parent)
    name = want.real.name
    try:
        if want.force:
            counted = have.held.get(SELF)
            safefs.remove_tree(parent, name, decided=counted.entries if counted else 0)
        else:
            os.rmdir(name, dir_fd=parent)
        os.fsync(parent)
    except (safefs.Appeared, safefs.OtherFilesystem) as exc:
        raise ProviderError(f"{want.host_path}: {exc}") from exc
    except NotADirectoryError as exc:
        raise ProviderError(
            f"{want.host_path} is no longer a directory since the pass decided; left alone"
        ) from exc
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise ProviderError(
                f"{want.host_path} is no longer empty (content appeared since the pass decided);"
                " left alone"
            ) from exc
        if exc.errno != errno.ENOENT:
            raise
    finally:
        os.close(parent)


def purge(want: DirWant, have: DirHave) -> None:
    """Reap the entries no resource manages, through Converge; raise naming those it could not.

    An entry that is not a directory is unlinked (a link's target stays). A
    directory is removed only if it holds nothing but empty directories
    (``rmdir`` bottom-up), or with ``force`` if it holds no more than observe
    counted; otherwise it is left alone and named with why.
    """
    # One pass, no confirmation and no breaker (an empty desired set included):
    # the manifest is the operator's explicit, validated decision, and a host
    # pass has no memory across runs.
    converge: Converge[str, str] = Converge(
        "directory-entry",
        ConvergeConfig(confirmation_ticks=1, breaker={}, drift_cap=10_000, allow_empty=True),
    )
    fd = safefs.open_dir(want.real)
    try:

        def reap(direction: Direction, name: str, _want: str | None, _have: str | None) -> None:
            if direction is Direction.REAP and name not in want.keep:
                _purge_entry(fd, name, have.held, want.force)

        kept = {n: n for n in have.entries & want.keep}
        result = converge.run(kept, {n: n for n in have.entries}, reap, {})
        os.fsync(fd)
    finally:
        os.close(fd)
    failed = {i.id: i.last_err or "failed" for i in result.items if i.reason is Reason.APPLY_FAILED}
    if failed:
        raise ProviderError(_could_not(failed))


def _purge_entry(fd: int, name: str, held: Mapping[str, safefs.Tally | None], force: bool) -> None:
    """Remove the unmanaged entry ``name`` of the directory open at ``fd``, as it is now."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=fd)  # a file, a link (never followed), a special file
        return
    if not force:
        try:
            safefs.remove_empty(fd, name)
        except safefs.Occupied as exc:
            try:
                now = safefs.tally(name, dir_fd=fd).entries
            except OSError:
                now = exc.objects
            raise ProviderError(f"holds {safefs.entries_text(now)}; {CONTENT}") from None
        return
    if name in held and held[name] is None:
        raise ProviderError(UNCOUNTED)
    counted = held.get(name)  # not a directory when observed: nothing was decided about content
    try:
        safefs.remove_tree(fd, name, decided=counted.entries if counted else 0)
    except (safefs.Appeared, safefs.OtherFilesystem) as exc:
        raise ProviderError(str(exc)) from None


PROVIDER = DirectoryProvider()
