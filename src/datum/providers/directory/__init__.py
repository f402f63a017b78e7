"""``Directory``: a directory's presence, mode and owner; with ``purge`` it reaps unmanaged entries.

Purging goes through ``Converge`` with the manifest's managed paths as the
desired set, so a purge reports, per entry, what it removed or failed to.
Whatever can hold data is counted when observed and again when removed
(``datum.safefs``): without ``force`` only files, links and directories
holding nothing but empty directories go; with ``force`` a tree goes only if
nothing appeared in it since the pass decided. Links are never followed.

With ``recurse`` the owner, group and mode apply below too, as ``chown -R``
and ``chmod -R`` would, walked through directory descriptors on the
directory's own filesystem (``safefs.below``): directories get the mode with
x added where it gives r (``0644`` makes them ``0755``, as Puppet does);
regular files get its permission bits (its setuid, setgid and sticky bits are
for directories); a link is ``lchown``-ed, never followed and never
``chmod``-ed; a FIFO, socket or device is left alone; a mount point is never
crossed. An entry another resource of the manifest gives a mode, owner or
group is left to it, and so is everything below a Directory that recurses
itself. Observe finds what differs (plan shows a bounded list); apply walks
again and changes only what differs then.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from datum.core.vocab import Action, Direction, Reason
from datum.providers import fs, reads
from datum.providers.accounts import owner_ids
from datum.providers.base import Attributes, Change, HostContext, PathProvider, ProviderError

if TYPE_CHECKING:
    from datum import safefs


@dataclass(frozen=True, slots=True)
class DirWant:
    """What a Directory resource wants.

    With ``recurse``: ``left`` are the entries below that another resource sets
    mode, owner or group on, and ``left_trees`` the trees a Directory below
    recurses over itself (paths from ``real``); ``file_mode`` is a regular
    file's mode below (the permission bits of ``mode``, x added where it gives r).
    """

    host_path: str
    real: Path
    ensure: str
    mode: int | None
    uid: int | None
    gid: int | None
    purge: bool
    force: bool
    keep: frozenset[str]
    recurse: bool = False
    left: frozenset[str] = frozenset()
    left_trees: frozenset[str] = frozenset()
    file_mode: int | None = None


@dataclass(frozen=True, slots=True)
class DirHave:
    """What observe found. ``held``: what each directory to be removed holds, counted by
    observe (None: it could not be counted), ``SELF`` for the directory itself when it is
    to be absent. ``below``: with ``recurse``, how many entries below differ, and the first few."""

    kind: str
    st: os.stat_result | None
    entries: frozenset[str]
    held: Mapping[str, safefs.Tally | None] = field(default_factory=dict)
    below: Below | None = None


@dataclass(frozen=True, slots=True)
class Below:
    """Entries below a recursing directory whose mode or ownership differ."""

    count: int
    shown: tuple[str, ...]

    def text(self) -> str:
        from datum import safefs

        listed = "; ".join(self.shown)
        more = f"; and {self.count - len(self.shown)} more" if self.count > len(self.shown) else ""
        differ = "differs" if self.count == 1 else "differ"
        return f"{safefs.entries_text(self.count)} below {differ}: {listed}{more}"


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
            for beside in provider(r.type).beside(r.spec):
                local.add(reads.realpath(os.path.join(manifest.dir, beside.path)))
        if manifest.source and manifest.source.startswith("/"):
            local.add(reads.realpath(manifest.source))
    kept: set[str] = set()
    for p in host_paths:
        kept |= reads.passes_through(str(ctx.root), p)
    for p in local:  # files on the running system: kept with every directory above them
        while p not in kept and p != "/":
            kept.add(p)
            p = os.path.dirname(p)
    ctx._kept = frozenset(kept)
    return ctx._kept


class DirectoryProvider(PathProvider[Attributes, DirWant, DirHave]):
    type = "Directory"
    reads_recorded = True  # through datum.providers.reads: the idle pass replays them
    spec = "datum.providers.directory.spec:DirectorySpec"
    namevar = "path"

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> DirWant:
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
        recurse = spec.recurse and spec.ensure == "present"
        left, left_trees = _left_to_others(ctx, real, spec) if recurse else ((), ())
        return DirWant(
            spec.path,
            real,
            spec.ensure,
            searchable(spec.mode) if recurse else spec.mode,
            uid,
            gid,
            spec.purge,
            spec.force,
            keep,
            recurse,
            frozenset(left),
            frozenset(left_trees),
            None if spec.mode is None or not recurse else spec.mode & 0o777,
        )

    def observe(self, want: DirWant, ctx: HostContext) -> DirHave:
        st = fs.lstat(want.real)
        kind = fs.kind(st)
        below = _observe_below(want) if want.recurse and kind == "directory" else None
        if kind != "directory" or not (want.purge or want.ensure == "absent"):
            return DirHave(kind, st, frozenset(), below=below)
        try:
            entries = frozenset(reads.listdir(str(want.real)))  # a read: what a replay lists again
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                raise ProviderError(f"{want.host_path} changed while it was read; try again") from exc
            raise
        held: dict[str, safefs.Tally | None] = {}
        doomed = entries - want.keep if want.ensure == "present" else entries if want.force else frozenset()
        if not doomed:
            return DirHave(kind, st, entries, held, below)
        # What each directory to be removed holds, counted now: apply counts again (a pass that
        # removes is never replayed by the idle pass; datum.safefs only for such a pass).
        from datum import safefs

        fd = _open_top(want, ctx)
        try:
            if want.ensure == "absent":
                held[SELF] = safefs.tally_fd(fd)
            else:
                for name in doomed:
                    held.update(_tally_entry(fd, name))
        finally:
            os.close(fd)
        return DirHave(kind, st, entries, held, below)

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
                from datum import safefs

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
        if have.below is not None and have.below.count:
            differences.append(have.below.text())
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
            with ctx.parent(str(want.real), want.host_path) as (parent, name):
                if have.kind == "directory":
                    _remove_directory(want, have, parent, name)
                else:
                    fs.remove_at(parent, name, want.host_path)  # a link is unlinked, its target stays
            return None
        # Everything below happens through this descriptor, opened without following a link.
        fd = _made(want, ctx) if have.kind == "absent" else _open_top(want, ctx)
        try:
            fs.set_meta(fd, os.fstat(fd), want.mode, want.uid, want.gid, want.host_path)
            try:
                if want.purge:
                    purge(want, have, fd)
            finally:
                if want.recurse:
                    _apply_below(want, fd)
        finally:
            os.close(fd)
        return None


SHOWN = 5  # entries below named in a plan line; the rest are counted


def searchable(mode: int | None) -> int | None:
    """A directory's mode under ``recurse``: x added for each of owner, group and others given r."""
    if mode is None:
        return None
    return mode | ((mode & 0o444) >> 2)


_RECURSING: list[object] = [None, ()]  # [the manifest, its recursing Directory specs]: found once per manifest


def recursed_over(ctx: HostContext, where: str) -> tuple[int | None, int | None, int | None] | None:
    """What the nearest ``recurse`` Directory of the manifest above ``where`` (a real path) gives a
    regular file below it, as ``(mode, uid, gid)``; None when no such Directory covers it.

    A ``File`` that sets none of these itself is created with them: without it, a File made
    after its recursing Directory (the order its path implies) was created 0644 and changed by
    the next pass, so a first pass said converged on a host that was not."""
    manifest = ctx.manifest
    if manifest is None:
        return None
    if _RECURSING[0] is not manifest:
        found = tuple(
            r.spec for r in manifest.resources
            if r.type == "Directory" and getattr(r.spec, "recurse", False) and r.spec.ensure == "present"
        )
        _RECURSING[:] = [manifest, found]
    best: tuple[int, Attributes] | None = None
    for spec in _RECURSING[1]:  # type: ignore[attr-defined]
        try:
            top = str(ctx.path(spec.path)).rstrip("/") + "/"
        except ProviderError:
            continue
        if where.startswith(top) and (best is None or len(top) > best[0]):
            best = (len(top), spec)
    if best is None:
        return None
    spec = best[1]
    uid, gid = owner_ids(ctx, spec.owner, spec.group)
    return (None if spec.mode is None else spec.mode & 0o777), uid, gid


def _left_to_others(ctx: HostContext, real: Path, spec: Attributes) -> tuple[set[str], set[str]]:
    """Paths below ``real`` other resources set mode, owner or group on, and trees recursing Directories below cover."""
    left: set[str] = set()
    trees: set[str] = set()
    manifest = ctx.manifest
    if manifest is None:
        return left, trees
    inside = str(real).rstrip("/") + "/"
    for r in manifest.resources:
        path = getattr(r.spec, "path", None)
        if r.spec is spec or not isinstance(path, str):
            continue
        if all(getattr(r.spec, a, None) is None for a in ("mode", "owner", "group")):
            continue
        try:
            there = str(ctx.path(path))
        except ProviderError:
            continue
        if not there.startswith(inside):
            continue
        (trees if getattr(r.spec, "recurse", False) else left).add(there[len(inside) :])
    return left, trees


def _wanted_below(
    want: DirWant, st: os.stat_result
) -> tuple[int | None, int | None, int | None] | None:
    """The mode, owner and group an entry below should have (None each: not managed), or None: left alone."""
    if stat.S_ISDIR(st.st_mode):
        return want.mode, want.uid, want.gid
    if stat.S_ISREG(st.st_mode):
        return want.file_mode, want.uid, want.gid
    if stat.S_ISLNK(st.st_mode):
        return None, want.uid, want.gid  # lchown only: a link has no mode of its own
    return None  # a FIFO, socket or device: never touched


def _walk_below(
    want: DirWant, entries: Iterable[safefs.Below]
) -> Iterator[tuple[safefs.Below, tuple[int | None, int | None, int | None]]]:
    """Each of ``entries`` (``safefs.below``) that recurse manages, with what it should have; trees
    left to others are skipped."""
    skipping: str | None = None
    for e in entries:
        if skipping is not None and e.path.startswith(skipping):
            continue
        skipping = None
        if e.path in want.left_trees:
            skipping = e.path + "/"
            continue
        if e.path in want.left:
            continue
        wanted = _wanted_below(want, e.st)
        if wanted is not None:
            yield e, wanted


def _open_top(want: DirWant, ctx: HostContext) -> int:
    """The directory, reached from the root by descriptors without following a link (``held``)."""
    from datum.providers import held

    return held.open_directory(str(ctx.root), str(want.real), want.host_path)


def _made(want: DirWant, ctx: HostContext) -> int:
    """Make the directory observe found absent (its parents too) and open it. It is made 0700
    and given its owner, then its mode (the umask's when none is given), on its descriptor: no
    one opens it while it has a mode it was not meant to have. One made by someone else since
    observe is taken as it is, unless it is not a directory now."""
    from datum.providers import held

    with ctx.parent(str(want.real), want.host_path, make=True) as (parent, name):
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
            fd, st = held.open_object(parent, name, want.host_path, stat.S_IFDIR)
            mode = want.mode if want.mode is not None else 0o777 & ~held.umask()
            fs.set_meta(fd, st, mode, want.uid, want.gid, want.host_path)
        except FileExistsError:
            fd, _ = held.open_object(parent, name, want.host_path, stat.S_IFDIR)
        os.fsync(parent)
    return fd


def _observe_below(want: DirWant) -> Below:
    """What differs below, walked as one read of the tree (``datum.providers.reads.tree``)."""
    from datum import safefs

    count = 0
    shown: list[str] = []
    try:
        for e, (mode, uid, gid) in _walk_below(want, reads.tree(str(want.real), safefs.below)):
            differs = fs.meta_differences(e.st, mode, uid, gid)
            if differs:
                count += 1
                if len(shown) < SHOWN:
                    shown.append(f"{e.path} {', '.join(differs)}")
    except NotADirectoryError as exc:
        raise ProviderError(f"{want.host_path} changed while it was read; try again") from exc
    return Below(count, tuple(shown))


def _apply_below(want: DirWant, fd: int) -> None:
    """Walk again (from ``fd``, the directory itself) and change, entry by entry, what differs
    now; raise naming those that failed."""
    from datum import safefs

    failed: list[str] = []
    count = 0
    for e, wanted in _walk_below(want, safefs.below(fd)):
        if not fs.meta_differences(e.st, *wanted):
            continue
        try:
            _fix(e, *wanted)
        except (OSError, ProviderError) as exc:
            count += 1
            if len(failed) < SHOWN:
                failed.append(f"{e.path}: {exc.strerror if isinstance(exc, OSError) else exc}")
    if count:
        more = f"; and {count - len(failed)} more" if count > len(failed) else ""
        raise ProviderError(
            f"could not change {safefs.entries_text(count)} below: {'; '.join(failed)}{more}"
        )


def _fix(e: safefs.Below, mode: int | None, uid: int | None, gid: int | None) -> None:
    """Set what differs on the entry ``e``: owner first, then the mode (``fs.set_meta``), on the
    object the walk found, never on what a link swapped in for it leads to."""
    from datum.providers import held

    if stat.S_ISLNK(e.st.st_mode):
        os.chown(e.name, _id(uid), _id(gid), dir_fd=e.parent, follow_symlinks=False)
        return
    if e.fd is not None:  # a directory, through the descriptor the walk opened
        fs.set_meta(e.fd, e.st, mode, uid, gid, e.path)
        return
    fd = os.open(e.name, held.OBJECT, dir_fd=e.parent)  # a link swapped in is refused (ELOOP)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (e.st.st_dev, e.st.st_ino):
            return  # replaced since it was listed: left for the next pass
        fs.set_meta(fd, now, mode, uid, gid, e.path)
    finally:
        os.close(fd)


def _id(value: int | None) -> int:
    return -1 if value is None else value


SELF = "."  # in ``DirHave.held``: the directory itself (``ensure: absent``)
UNCOUNTED = "what it holds could not be counted; left alone"
CONTENT = "set force: true to purge directories with content"


def _tally_entry(fd: int, name: str) -> dict[str, safefs.Tally | None]:
    """``{name: what it holds}`` when ``name`` is a directory (None: it could not be counted), else ``{}``."""
    from datum import safefs

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
    from datum import safefs

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


def _remove_directory(want: DirWant, have: DirHave, parent: int, name: str) -> None:
    """``ensure: absent`` on the directory ``name`` of the directory open at ``parent``: ``rmdir``,
    or with ``force`` the tree if nothing appeared since observe."""
    from datum import safefs

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


def purge(want: DirWant, have: DirHave, fd: int) -> None:
    """Reap the entries no resource manages, through Converge; raise naming those it could not.

    An entry that is not a directory is unlinked (a link's target stays). A
    directory is removed only if it holds nothing but empty directories
    (``rmdir`` bottom-up), or with ``force`` if it holds no more than observe
    counted; otherwise it is left alone and named with why.
    """
    from datum.core.converge import Converge, ConvergeConfig

    # One pass, no confirmation and no breaker (an empty desired set included):
    # the manifest is the operator's explicit, validated decision, and a host
    # pass has no memory across runs.
    converge: Converge[str, str] = Converge(
        "directory-entry",
        ConvergeConfig(confirmation_ticks=1, breaker={}, drift_cap=10_000, allow_empty=True),
    )

    def reap(direction: Direction, name: str, _want: str | None, _have: str | None) -> None:
        if direction is Direction.REAP and name not in want.keep:
            _purge_entry(fd, name, have.held, want.force)

    kept = {n: n for n in have.entries & want.keep}
    result = converge.run(kept, {n: n for n in have.entries}, reap, {})
    os.fsync(fd)
    failed = {i.id: i.last_err or "failed" for i in result.items if i.reason is Reason.APPLY_FAILED}
    if failed:
        raise ProviderError(_could_not(failed))


def _purge_entry(fd: int, name: str, held: Mapping[str, safefs.Tally | None], force: bool) -> None:
    """Remove the unmanaged entry ``name`` of the directory open at ``fd``, as it is now."""
    from datum import safefs

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
