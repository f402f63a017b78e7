"""``Package``: a Debian package through dpkg (a local ``.deb``) or apt (a repository).

Under ``--root`` dpkg runs with ``--root`` and dpkg-query with ``--admindir``,
so a sandbox root with its own dpkg database is managed like a host. A kernel
package that changes signals that the host needs a reboot; nothing reboots here.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from datum.core.vocab import Action
from datum.providers.base import Change, HostContext, Provider, ProviderError

if TYPE_CHECKING:
    from datum.providers.specs import PackageSpec


ADMINDIR = "/var/lib/dpkg"
VERSION = re.compile(r"^[0-9][A-Za-z0-9.+~:-]*$")
_KERNEL = re.compile(r"^linux-(image|modules)(-|$)")
_ENV = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


@dataclass(frozen=True)
class PkgWant:
    name: str
    ensure: str
    version: str | None  # the exact version wanted, when one is
    source: Path | None
    reboot: bool


@dataclass(frozen=True)
class PkgHave:
    version: str | None  # None: not installed


def deb_fields(ctx: HostContext, deb: Path) -> dict[str, str]:
    done = ctx.runner(["dpkg-deb", "-f", str(deb), "Package", "Version"])
    if done.returncode != 0:
        raise ProviderError(f"cannot read {deb}: {done.why()}")
    return dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)


def dpkg(ctx: HostContext, *args: str) -> list[str]:
    """A dpkg command line for this root."""
    root = [] if ctx.is_real_root else [f"--root={ctx.root}", "--log=/dev/null"]
    return ["dpkg", *root, "--force-confdef", "--force-confold", *args]


def admindir(ctx: HostContext) -> Path:
    return ctx.path(ADMINDIR)


class PackageProvider(Provider["PackageSpec", PkgWant, PkgHave]):
    type = "Package"

    def supported(self, ctx: HostContext) -> str | None:
        if shutil.which("dpkg") is None:
            return "dpkg is not installed on this host"
        if not (admindir(ctx) / "status").exists():
            return f"no dpkg database at {ADMINDIR}"
        return None

    def desired(self, name: str, spec: PackageSpec, ctx: HostContext) -> PkgWant:
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
                "dpkg-query",
                f"--admindir={admindir(ctx)}",
                "-W",
                "-f=${Status}\t${Version}\n",
                want.name,
            ],
            env=_ENV,
        )
        if done.returncode not in (0, 1):
            raise ProviderError(done.why())
        for line in done.stdout.splitlines():
            status, _, version = line.partition("\t")
            if status.endswith(" installed"):
                return PkgHave(version)
        return PkgHave(None)

    def plan(self, want: PkgWant, have: PkgHave) -> Change:
        if want.ensure in ("absent", "purged"):
            return (
                Change(Action.DELETE, (f"{have.version} installed, want absent",))
                if have.version
                else Change()
            )
        if have.version is None:
            return Change(
                Action.CREATE,
                ("not installed" + (f", want {want.version}" if want.version else ""),),
            )
        if want.version and have.version != want.version:
            return Change(Action.UPDATE, (f"version {have.version}, want {want.version}",))
        return Change()

    def apply(self, want: PkgWant, have: PkgHave, change: Change, ctx: HostContext) -> str | None:
        if change.action is Action.DELETE:
            argv = dpkg(ctx, "--purge" if want.ensure == "purged" else "--remove", want.name)
        elif want.source is not None:
            argv = dpkg(ctx, "--install", str(want.source))
        elif ctx.is_real_root:
            target = f"{want.name}={want.version}" if want.version else want.name
            argv = ["apt-get", "install", "-y", "-q", "--no-install-recommends", target]
        else:
            raise ProviderError("installing from a repository under --root needs source: (a .deb)")
        done = ctx.runner(argv, env=_ENV)
        if done.returncode != 0:
            raise ProviderError(done.why())
        return "running kernel differs" if want.reboot else None


PROVIDER = PackageProvider()
