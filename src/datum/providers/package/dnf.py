"""``Package`` on RPM hosts: rpm's database read, dnf's one transaction for the packages of a pass.

Chosen for a root whose package database is rpm's (``datum.providers.package.choose``), or by
``provider: dnf`` on the resource. Observe and plan read the rpm database alone (one ``rpm -qa``
a pass, with ``--root`` and ``--dbpath``), never the network; ``latest`` also asks dnf's metadata
cache (``--cacheonly``) for the repository's newest. Versions are ``epoch:version-release``,
ordered and matched as rpm and dnf do (``datum.providers.package.rpmver``).

The changes of a pass are one transaction (``apply_together``; the executor batches them):
``dnf install`` with ``strict`` and ``best`` for every install, upgrade, pinned version (a
downgrade too) and local ``.rpm``, so one missing package or broken dependency fails them all
with dnf's own words and changes nothing; removals are one ``rpm -e`` (as Puppet's rpm-based
providers remove), which refuses a package another needs instead of removing that one too, as
``dnf remove`` would. They are tested (``rpm -e --test``) before anything is installed.

The rpm database's reads are recorded (``datum.providers.reads.answered_by``): its files'
signatures stand for ``rpm -qa``, so an unchanged host replays without running rpm or dnf.

A kernel, ``systemd`` or ``glibc`` that the transaction changed, one of the resource's own or
one pulled in with it, and what ``dnf needs-restarting -r`` names when dnf has the command,
say the host needs a reboot, naming the package. Groups and modules are not packages: the
name's pattern refuses ``@group`` and ``module:stream``.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from datum.core.packagewords import DNF, RPM
from datum.core.vocab import Action
from datum.providers import reads
from datum.providers.base import (
    Attributes,
    Beside,
    Change,
    Completed,
    HostContext,
    Provider,
    ProviderError,
)
from datum.providers.package.rpmver import compare, matches

if TYPE_CHECKING:
    from collections.abc import Sequence

# Where rpm keeps its database under a root (Fedora 36+ and openSUSE: sysimage, /var/lib/rpm a link to
# it), and the files that are the database: sqlite (rpm 4.16+) and its write-ahead log, ndb, Berkeley DB.
# Not sqlite's -shm nor Berkeley DB's __db.00N, which a query writes.
DBPATHS = ("/var/lib/rpm", "/usr/lib/sysimage/rpm")
DBFILES = ("rpmdb.sqlite", "rpmdb.sqlite-wal", "Packages.db", "Packages")
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
VERSION = re.compile(r"^[0-9][A-Za-z0-9._+~^:-]*$")
_QF = "%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"
_KERNEL = re.compile(r"^kernel(-rt|-uek|-lt|-ml|-64k)?(-core)?$")
_BOOT = frozenset({"systemd", "glibc"})  # loaded at boot: a new one runs only after a reboot
_NO_CACHE = "Cache-only enabled but no cache"


@dataclass(frozen=True, slots=True)
class RpmWant:
    name: str
    ensure: str
    version: str | None  # the version wanted (a pin, or the source's), as [epoch:]version[-release]
    source: Path | None
    reboot: bool | None  # reboot: as given; None: the package's name decides


@dataclass(frozen=True, slots=True)
class RpmHave:
    versions: tuple[str, ...]  # installed, oldest first (an install-only package, the kernel, has several)
    candidate: str | None = None  # the newest in dnf's metadata cache (asked for ensure: latest only)


def _env() -> dict[str, str]:
    """rpm and dnf's environment: a known PATH, C messages, and HOME (rpm reads ``~/.rpmmacros``)."""
    return {"PATH": PATH, "LC_ALL": "C", "HOME": os.environ.get("HOME") or "/root"}


def shown(evr: str) -> str:
    """An installed ``epoch:version-release`` as rpm shows it: the epoch only when it is not 0."""
    return evr[2:] if evr.startswith("0:") else evr


def which(name: str) -> str | None:
    """``name`` on the PATH rpm and dnf run with, found through recorded reads (a replay sees it go)."""
    for directory in PATH.split(":"):
        found = reads.stat(f"{directory}/{name}")
        if isinstance(found, tuple) and stat.S_ISREG(found[0]) and found[0] & 0o111:
            return f"{directory}/{name}"
    return None


def dbpath(ctx: HostContext) -> tuple[str, str] | None:
    """The rpm database under the root: (its path in the root for ``--dbpath``, its real path); None when
    there is none. Links are resolved inside the root (``/var/lib/rpm -> ../../usr/lib/sysimage/rpm``)."""
    found = ctx.cache.get("rpm:dbpath")
    if found is None:
        found = ctx.cache["rpm:dbpath"] = _find_dbpath(ctx) or ()
    return found or None


def _find_dbpath(ctx: HostContext) -> tuple[str, str] | None:
    top = os.path.abspath(ctx.root)
    for candidate in DBPATHS:
        try:
            real = ctx.real(candidate)
        except ProviderError:
            continue
        if any(reads.kind(f"{real}/{name}") == stat.S_IFREG for name in DBFILES):
            inside = "/" + os.path.relpath(real, top) if top != "/" else real
            return inside, real
    return None


def rpm(ctx: HostContext, *args: str) -> list[str]:
    """An rpm command line for this root and its database."""
    found = dbpath(ctx)
    where = [] if ctx.is_real_root else ["--root", str(ctx.root)]
    return [RPM, *where, *(["--dbpath", found[0]] if found else []), *args]


def dnf(ctx: HostContext, *args: str) -> list[str]:
    """A dnf command line for this root: never a prompt, and no transaction but the whole one asked for
    (``strict``: a package it cannot find fails it; ``best``: the newest or a failure, not an older one)."""
    root = [] if ctx.is_real_root else ["--installroot", str(ctx.root)]
    return [DNF, "-y", *root, "--setopt=strict=True", "--setopt=best=True", *args]


def installed(ctx: HostContext) -> dict[str, tuple[str, ...]]:
    """Every installed package with its versions, oldest first: one ``rpm -qa`` a pass (again after a
    change), recorded as what the database's files' ``lstat`` says of their content (``answered_by``)."""
    known: dict[str, tuple[str, ...]] | None = ctx.cache.get("rpm:installed")
    if known is not None:
        return known
    found = dbpath(ctx)
    if found is None:
        raise ProviderError(f"no rpm database at {' or '.join(DBPATHS)}")
    argv = rpm(ctx, "-qa", "--qf", _QF)
    done: Completed = reads.answered_by(
        [f"{found[1]}/{name}" for name in DBFILES], lambda: ctx.runner(argv, env=_env())
    )
    if done.returncode != 0:
        raise ProviderError(done.why())
    versions: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        name, _, evr = line.partition("\t")
        if evr and name != "gpg-pubkey":  # rpm's imported keys are not packages
            versions.setdefault(name, []).append(shown(evr))
    known = {name: _oldest_first(evrs) for name, evrs in versions.items()}
    ctx.cache["rpm:installed"] = known
    return known


def _oldest_first(evrs: list[str]) -> tuple[str, ...]:
    return tuple(sorted(set(evrs), key=functools.cmp_to_key(compare)))


def candidate(ctx: HostContext, name: str) -> str | None:
    """The newest version of ``name`` dnf's metadata cache knows, never the network; None when nothing
    is cached. The first asks for every ``latest`` package of the manifest: one ``dnf --cacheonly
    repoquery`` a pass (again after a change)."""
    known: dict[str, str | None] = ctx.cache.setdefault("dnf:candidates", {})
    if name not in known:
        names = {name} | {
            r.spec.name for r in getattr(ctx.manifest, "resources", ()) if r.type == "Package"
            and getattr(r.spec, "ensure", None) == "latest" and not getattr(r.spec, "source", None)
        }
        names -= known.keys()
        argv = dnf(ctx, "-q", "--cacheonly", "repoquery", "--available", "--latest-limit", "1",
                   "--qf", "%{name}\t%{epoch}:%{version}-%{release}\n", *sorted(names))
        done = ctx.runner(argv, env=_env())
        if done.returncode != 0 and _NO_CACHE not in done.stderr:
            raise ProviderError(done.why())
        known.update(dict.fromkeys(names))
        for line in done.stdout.splitlines():
            found, _, evr = line.strip().partition("\t")
            newest = known.get(found)
            if evr and found in names and (newest is None or compare(shown(evr), newest) > 0):
                known[found] = shown(evr)
    return known[name]


def rpm_file(ctx: HostContext, path: Path) -> tuple[str, str]:
    """(name, version) of a ``.rpm`` file, read by rpm and recorded as the file's signature."""
    real = reads.realpath(str(path))
    if reads.kind(real) != stat.S_IFREG:
        raise ProviderError(f"{path} is not a file")
    argv = rpm(ctx, "-qp", "--nosignature", "--nodigest", "--qf", _QF, real)
    done: Completed = reads.answered_by([real], lambda: ctx.runner(argv, env=_env()))
    name, _, evr = done.stdout.strip().partition("\t")
    if done.returncode != 0 or not evr:
        raise ProviderError(f"cannot read {path}: {done.why()}")
    return name, shown(evr)


class DnfProvider(Provider[Attributes, RpmWant, RpmHave]):
    type = "Package"
    spec = "datum.providers.package.spec:PackageSpec"
    namevar = "name"
    reads_recorded = True  # through datum.providers.reads: the idle pass replays them

    def beside(self, spec: Attributes) -> list[Beside]:
        return [Beside("source", spec.source)] if spec.source else []

    def supported(self, ctx: HostContext) -> str | None:
        if which(RPM) is None:
            return "rpm is not installed on this host"
        if dbpath(ctx) is None:
            return f"no rpm database at {' or '.join(DBPATHS)}"
        return None

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> RpmWant:
        source = (ctx.manifest_dir / spec.source) if spec.source else None
        version = spec.ensure if VERSION.match(spec.ensure) else None
        if source is not None:
            found, evr = rpm_file(ctx, source)
            if found != spec.name:
                raise ProviderError(f"source {spec.source} is package {found!r}, not {spec.name!r}")
            if version and not matches(version, evr):
                raise ProviderError(f"source {spec.source} is version {evr}, not {version}")
            if version or spec.ensure == "latest":
                version = evr
        return RpmWant(spec.name, spec.ensure, version, source, spec.reboot)

    def observe(self, want: RpmWant, ctx: HostContext) -> RpmHave:
        versions = installed(ctx).get(want.name, ())
        newest = candidate(ctx, want.name) if want.ensure == "latest" and want.source is None else None
        return RpmHave(versions, newest)

    def plan(self, want: RpmWant, have: RpmHave) -> Change:
        if want.ensure in ("absent", "purged"):
            if have.versions:
                return Change(Action.DELETE, (f"{', '.join(have.versions)} installed, want {want.ensure}",))
            return Change()
        if not have.versions:
            return Change(Action.CREATE, ("not installed" + (f", want {want.version}" if want.version else ""),))
        newest = have.versions[-1]
        if want.version and not any(matches(want.version, v) for v in have.versions):
            return Change(Action.UPDATE, (f"version {newest}, want {want.version}",))
        if want.ensure == "latest" and have.candidate and compare(have.candidate, newest) > 0:
            return Change(Action.UPDATE, (f"version {newest}, want latest {have.candidate}",))
        return Change()

    def batch(self, want: RpmWant) -> str | None:
        return "dnf"

    def apply(self, want: RpmWant, have: RpmHave, change: Change, ctx: HostContext) -> str | None:
        (result,) = self.apply_together([(want, have, change)], ctx)
        if isinstance(result, Exception):
            raise result
        return result

    def apply_together(
        self, changes: Sequence[tuple[RpmWant, RpmHave, Change]], ctx: HostContext
    ) -> list[str | Exception | None]:
        """Removals tested, then every install in one dnf transaction, then the removals in one rpm one;
        a failure before the last step changes nothing and fails them all."""
        removals = [w for w, _h, c in changes if c.action is Action.DELETE]
        installs = [(w, h) for w, h, c in changes if c.action is not Action.DELETE]
        before = installed(ctx)
        if removals:
            self._run(ctx, rpm(ctx, "-e", "--test", "--allmatches", *[w.name for w in removals]))
        if installs:
            self._check_dbpath(ctx)
            self._run(ctx, dnf(ctx, "install", *[self._target(w, h) for w, h in installs]))
        removed: Exception | None = None
        if removals:
            try:
                self._run(ctx, rpm(ctx, "-e", "--allmatches", *[w.name for w in removals]))
            except ProviderError as exc:  # what was installed stays installed, and is said so
                removed = exc
        ctx.changed()
        after = installed(ctx)
        reboots = self._reboots([w for w, _h in installs], before, after, ctx) if installs else {}
        return [removed if c.action is Action.DELETE and removed else reboots.get(w.name) for w, _h, c in changes]

    @staticmethod
    def _target(want: RpmWant, have: RpmHave) -> str:
        """What ``dnf install`` is given: the ``.rpm``, ``name-version`` (a pin, or the newest the plan
        saw: dnf's ``install`` of an installed name does nothing), or the name."""
        if want.source is not None:
            return str(want.source)
        version = want.version or (have.candidate if want.ensure == "latest" and have.versions else None)
        return f"{want.name}-{version}" if version else want.name

    @staticmethod
    def _run(ctx: HostContext, argv: list[str]) -> Completed:
        done = ctx.runner(argv, env=_env())
        if done.returncode != 0:
            raise ProviderError(done.why())
        return done

    @staticmethod
    def _check_dbpath(ctx: HostContext) -> None:
        """dnf writes the database at rpm's ``%_dbpath`` under the root: refused unless that is the
        database observe read (Debian's rpm says ``~/.rpmdb``; an RPM host's, its own)."""
        found = dbpath(ctx)
        done = ctx.runner([RPM, "--eval", "%{_dbpath}"], env=_env())
        said = done.stdout.strip()
        try:
            same = found is not None and said.startswith("/") and ctx.real(said) == found[1]
        except ProviderError:
            same = False
        if not same:
            where = found[0] if found else DBPATHS[0]
            raise ProviderError(
                f"dnf would use the rpm database at {said or '?'} (rpm's %_dbpath), not the root's {where}: "
                f"set %_dbpath {where} in /etc/rpm/macros.dbpath or ~/.rpmmacros"
            )

    def _reboots(
        self, wants: list[RpmWant], before: dict[str, tuple[str, ...]], after: dict[str, tuple[str, ...]],
        ctx: HostContext,
    ) -> dict[str, str]:
        """Why each changed package needs a reboot, by its name: its own kernel, systemd or glibc (or its
        ``reboot: true``); the first one's also those the transaction pulled in, and what
        ``needs-restarting -r`` names."""
        changed = {name: evrs[-1] for name, evrs in after.items() if before.get(name) != evrs}
        mine = {w.name for w in wants}
        reasons: dict[str, list[str]] = {}
        for w in wants:
            if w.name not in changed:
                continue
            if w.reboot:
                reasons.setdefault(w.name, []).append("reboot: true")
            elif w.reboot is None and _KERNEL.match(w.name):
                reasons.setdefault(w.name, []).append("running kernel differs")
            elif w.reboot is None and w.name in _BOOT:
                reasons.setdefault(w.name, []).append(f"{w.name} {changed[w.name]} runs after a reboot")
        first = next((w.name for w in wants if w.name in changed), None)
        if first is None:
            return {}
        pulled = [f"{n} {v}" for n, v in sorted(changed.items()) if n not in mine and (_KERNEL.match(n) or n in _BOOT)]
        if pulled:
            reasons.setdefault(first, []).append(f"with it {', '.join(pulled)}, which run after a reboot")
        said = needs_restarting(ctx)
        if said:
            reasons.setdefault(first, []).append(f"needs-restarting -r: {', '.join(said)}")
        return {name: ", ".join(why) for name, why in reasons.items()}


def needs_restarting(ctx: HostContext) -> list[str]:
    """What ``dnf needs-restarting -r`` names as updated since boot when it says a reboot is needed; []
    when it does not, or dnf has no such command (dnf-plugins-core is not installed)."""
    done = ctx.runner(dnf(ctx, "-q", "needs-restarting", "-r"), env=_env())
    if done.returncode != 1 or "No such command" in done.stderr:
        return []
    names = [line.strip()[2:].strip() for line in done.stdout.splitlines() if line.strip().startswith("* ")]
    return names or ["a reboot is required"]


PROVIDER = DnfProvider()
