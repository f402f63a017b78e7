"""``Package``: a Debian package through dpkg (a local ``.deb``) or apt (a repository).

Under ``--root`` dpkg runs with ``--root`` and dpkg-query with ``--admindir``,
so a sandbox root with its own dpkg database is managed like a host. A kernel
package that changes signals that the host needs a reboot; nothing reboots here.

Nothing ever waits on a prompt: apt and dpkg run with ``DEBIAN_FRONTEND=noninteractive``,
standard input from ``/dev/null`` and Debian's documented configuration-file policy
(``--force-confdef --force-confold``: a configuration file changed locally, by a
``File`` say, keeps its local version, which Datum then converges). A package dpkg
left half-installed or half-configured (a run killed, or one before Datum's) is
reported with dpkg's own words (``dpkg --audit``) and repaired: ``dpkg --configure -a``,
or a reinstall when dpkg requires one.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from datum.core.packagewords import APT_CACHE, APT_GET, DPKG, DPKG_DEB, DPKG_QUERY
from datum.core.vocab import Action
from datum.providers.base import Attributes, Beside, Change, HostContext, Provider, ProviderError

ADMINDIR = "/var/lib/dpkg"
VERSION = re.compile(r"^[0-9][A-Za-z0-9.+~:-]*$")
_KERNEL = re.compile(r"^linux-(image|modules)(-|$)")
_ENV = {
    "DEBIAN_FRONTEND": "noninteractive",
    "APT_LISTCHANGES_FRONTEND": "none",
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
}
# dpkg's configuration-file policy: keep a locally changed file, take the new one otherwise.
CONF_POLICY = ("--force-confdef", "--force-confold")
_APT_CONF_POLICY = tuple(arg for opt in CONF_POLICY for arg in ("-o", f"Dpkg::Options::={opt}"))
# dpkg's states of a package it did not finish installing (dpkg-query's ${Status}, last word).
UNFINISHED = frozenset({"half-installed", "unpacked", "half-configured", "triggers-awaited", "triggers-pending"})


@dataclass(frozen=True, slots=True)
class PkgWant:
    name: str
    ensure: str
    version: str | None  # the exact version wanted, when one is
    source: Path | None
    reboot: bool


@dataclass(frozen=True, slots=True)
class PkgHave:
    version: str | None  # None: not installed
    config_files: bool = False  # removed, its configuration files left (dpkg's config-files)
    candidate: str | None = None  # the version apt would install (asked for ensure: latest only)
    # dpkg did not finish installing it: its status (``half-configured``...) and dpkg's words.
    unfinished: tuple[str, str] | None = None


def apt_lists_empty(ctx: HostContext) -> bool:
    lists = ctx.path("/var/lib/apt/lists")
    return not lists.is_dir() or not any(lists.glob("*_Packages*"))


def apt_update(ctx: HostContext) -> None:
    """``apt-get update``, at most once per pass (recorded in the context's cache)."""
    if ctx.cache.get("apt:updated"):
        return
    done = ctx.runner([APT_GET, "update", "-q"], env=_ENV)
    if done.returncode != 0:
        raise ProviderError(done.why())
    ctx.cache["apt:updated"] = True


def apt_candidate(ctx: HostContext, name: str) -> str | None:
    """The version ``apt-get install`` would pick, from ``apt-cache policy``; None when unknown."""
    done = ctx.runner([APT_CACHE, "policy", name], env=_ENV)
    for line in done.stdout.splitlines():
        key, _, value = line.strip().partition(": ")
        if key == "Candidate" and value and value != "(none)":
            return value
    return None


def deb_fields(ctx: HostContext, deb: Path) -> dict[str, str]:
    done = ctx.runner([DPKG_DEB, "-f", str(deb), "Package", "Version"])
    if done.returncode != 0:
        raise ProviderError(f"cannot read {deb}: {done.why()}")
    return dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)


def dpkg(ctx: HostContext, *args: str) -> list[str]:
    """A dpkg command line for this root."""
    root = [] if ctx.is_real_root else [f"--root={ctx.root}", "--log=/dev/null"]
    return [DPKG, *root, *CONF_POLICY, *args]


def audit(ctx: HostContext, name: str, status: str) -> str:
    """dpkg's own words for a package it did not finish: the first sentence ``dpkg --audit`` says of it."""
    done = ctx.runner(dpkg(ctx, "--audit", name), env=_ENV)
    said = " ".join(done.stdout.split()).partition(". ")[0].strip().rstrip(".:")
    return said or f"dpkg status {status}"


def admindir(ctx: HostContext) -> Path:
    return ctx.path(ADMINDIR)


class PackageProvider(Provider[Attributes, PkgWant, PkgHave]):
    type = "Package"
    spec = "datum.providers.package.spec:PackageSpec"
    namevar = "name"

    def beside(self, spec: Attributes) -> list[Beside]:
        return [Beside("source", spec.source)] if spec.source else []

    def supported(self, ctx: HostContext) -> str | None:
        if shutil.which(DPKG) is None:
            return "dpkg is not installed on this host"
        if not (admindir(ctx) / "status").exists():
            return f"no dpkg database at {ADMINDIR}"
        return None

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> PkgWant:
        source = (ctx.manifest_dir / spec.source) if spec.source else None
        version = spec.ensure if VERSION.match(spec.ensure) else None
        if source is not None:
            if not source.is_file():
                raise ProviderError(f"source {spec.source} does not exist")
            fields = deb_fields(ctx, source)
            if fields.get("Package") != spec.name:
                raise ProviderError(
                    f"source {spec.source} is package {fields.get('Package')!r}, not {spec.name!r}"
                )
            if spec.ensure == "latest" or (version and version != fields.get("Version")):
                if version:
                    raise ProviderError(
                        f"source {spec.source} is version {fields.get('Version')}, not {version}"
                    )
                version = fields.get("Version")
        reboot = spec.reboot if spec.reboot is not None else bool(_KERNEL.match(spec.name))
        return PkgWant(spec.name, spec.ensure, version, source, reboot)

    def observe(self, want: PkgWant, ctx: HostContext) -> PkgHave:
        done = ctx.runner(
            [
                DPKG_QUERY,
                f"--admindir={admindir(ctx)}",
                "-W",
                "-f=${Status}\t${Version}\n",
                want.name,
            ],
            env=_ENV,
        )
        if done.returncode not in (0, 1):
            raise ProviderError(done.why())
        version, config_files, unfinished = None, False, None
        for line in done.stdout.splitlines():
            status, _, found = line.partition("\t")
            state = status.rpartition(" ")[2]
            if state == "installed":
                version = found
            elif state == "config-files":
                config_files = True
            elif state in UNFINISHED:
                unfinished = (state, audit(ctx, want.name, state))
        candidate = None
        if want.ensure == "latest" and want.source is None and ctx.is_real_root:
            candidate = apt_candidate(ctx, want.name)
        return PkgHave(version, config_files, candidate, unfinished)

    def plan(self, want: PkgWant, have: PkgHave) -> Change:
        if have.unfinished and want.ensure not in ("absent", "purged"):
            state, said = have.unfinished
            return Change(Action.UPDATE, (f"{state} ({said}), want {want.ensure}",))
        if want.ensure in ("absent", "purged"):
            if have.unfinished:
                return Change(Action.DELETE, (f"{have.unfinished[0]}, want {want.ensure}",))
            if have.version:
                return Change(Action.DELETE, (f"{have.version} installed, want {want.ensure}",))
            if want.ensure == "purged" and have.config_files:
                return Change(Action.DELETE, ("configuration files left, want purged",))
            return Change()
        if have.version is None:
            return Change(
                Action.CREATE,
                ("not installed" + (f", want {want.version}" if want.version else ""),),
            )
        if want.version and have.version != want.version:
            return Change(Action.UPDATE, (f"version {have.version}, want {want.version}",))
        if want.ensure == "latest" and have.candidate and have.candidate != have.version:
            return Change(
                Action.UPDATE, (f"version {have.version}, want latest {have.candidate}",)
            )
        return Change()

    def apply(self, want: PkgWant, have: PkgHave, change: Change, ctx: HostContext) -> str | None:
        if have.unfinished and change.action is not Action.DELETE:
            self._repair(want, have.unfinished[0], ctx)
            have = self.observe(want, ctx)
            change = self.plan(want, have)
            if change.action is Action.NONE:
                return self._reboot(want)
            if have.unfinished:
                raise ProviderError(f"dpkg left it {have.unfinished[0]} after the repair: {have.unfinished[1]}")
        if change.action is Action.DELETE:
            argv = dpkg(ctx, "--purge" if want.ensure == "purged" else "--remove", want.name)
        elif want.source is not None:
            argv = dpkg(ctx, "--install", str(want.source))
        elif ctx.is_real_root:
            return self._apt_install(want, change, ctx)
        else:
            raise ProviderError("installing from a repository under --root needs source: (a .deb)")
        done = ctx.runner(argv, env=_ENV)
        if done.returncode != 0:
            raise ProviderError(done.why())
        return self._reboot(want)

    def _repair(self, want: PkgWant, state: str, ctx: HostContext) -> None:
        """Finish what dpkg left: configure every package waiting (Debian's own recovery), or,
        half-installed, install it again (from its source, or apt's ``--reinstall``)."""
        if state != "half-installed":
            argv = dpkg(ctx, "--configure", "-a")
        elif want.source is not None:
            argv = dpkg(ctx, "--install", str(want.source))
        elif ctx.is_real_root:
            argv = [*self._apt(), "--reinstall", want.name]
        else:
            raise ProviderError("reinstalling from a repository under --root needs source: (a .deb)")
        done = ctx.runner(argv, env=_ENV)
        if done.returncode != 0:
            raise ProviderError(done.why())

    @staticmethod
    def _apt() -> list[str]:
        """``apt-get install`` that never asks: yes to apt, dpkg's configuration-file policy to dpkg."""
        return [APT_GET, "install", "-y", "-q", "--no-install-recommends", *_APT_CONF_POLICY]

    def _reboot(self, want: PkgWant) -> str | None:
        if not want.reboot:
            return None
        return "running kernel differs" if _KERNEL.match(want.name) else "reboot: true"

    def _apt_install(self, want: PkgWant, change: Change, ctx: HostContext) -> str | None:
        """From the repository: apt's lists are fetched when there are none, or once when apt
        does not know the package (or the version); apt's own message is the failure."""
        if apt_lists_empty(ctx):
            apt_update(ctx)
        version = want.version
        if want.ensure == "latest":
            version = apt_candidate(ctx, want.name)
        target = f"{want.name}={version}" if version else want.name
        argv = self._apt()
        if want.version:
            argv.append("--allow-downgrades")  # a pinned version below the installed one
        done = ctx.runner([*argv, target], env=_ENV)
        if done.returncode != 0 and not ctx.cache.get("apt:updated") and (
            "Unable to locate package" in done.stderr or "was not found" in done.stderr
        ):
            apt_update(ctx)
            done = ctx.runner([*argv, target], env=_ENV)
        if done.returncode != 0:
            raise ProviderError(done.why())
        return self._reboot(want)


PROVIDER = PackageProvider()
