"""Real RPM packages for tests: tiny noarch packages built by rpmbuild, a repository made by
createrepo_c, and an RPM root that dnf installs into with ``--installroot``.

The root is what an RPM host's root is to dnf: an rpm database at ``/var/lib/rpm``, its own
``/etc/dnf/dnf.conf`` and ``/etc/yum.repos.d`` (the test's local repository alone, gpgcheck off)
and ``/etc/dnf/vars/releasever``, which dnf --installroot reads before the host's. No network.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("rpm", "rpmbuild", "createrepo_c", "dnf")
MISSING = [tool for tool in TOOLS if shutil.which(tool) is None]
WHY = f"{', '.join(MISSING)} not installed (scripts/setup-rpm installs rpm, createrepo-c and dnf)"


@dataclass(frozen=True)
class Rpm:
    """One package to build: a name, [epoch:]version-release, what it requires, and whether it
    carries a file (``/usr/share/NAME/VERSION``, its version in it) or none."""

    name: str
    evr: str
    requires: tuple[str, ...] = ()
    file: bool = True
    provides: tuple[str, ...] = field(default=())

    @property
    def epoch(self) -> str | None:
        return self.evr.partition(":")[0] if ":" in self.evr else None

    @property
    def version(self) -> str:
        return self.evr.partition(":")[2].rpartition("-")[0] if ":" in self.evr else self.evr.rpartition("-")[0]

    @property
    def release(self) -> str:
        return self.evr.rpartition("-")[2]

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.release}.noarch.rpm"


def macros(home: Path) -> Path:
    """A HOME whose ``.rpmmacros`` puts rpm's database at ``/var/lib/rpm``, as an RPM host's rpm has it
    (Debian's rpm keeps ``~/.rpmdb``): rpm and dnf, run with this HOME, use the root's database."""
    home.mkdir(parents=True, exist_ok=True)
    (home / ".rpmmacros").write_text("%_dbpath /var/lib/rpm\n")
    return home


def build(workdir: Path, packages: list[Rpm]) -> Path:
    """Build every package with one rpmbuild (each a subpackage with its own version); the directory
    of the ``.rpm`` files."""
    out = workdir / "rpms"
    workdir.mkdir(parents=True, exist_ok=True)
    lines = [
        "Name: datum-test-packages", "Version: 0", "Release: 0", "Summary: packages built by the test suite",
        "License: MIT", "BuildArch: noarch", "%description", "Tiny packages for Datum's tests.",
    ]
    for p in packages:
        lines += [f"%package -n {p.name}", *([f"Epoch: {p.epoch}"] if p.epoch else []), f"Version: {p.version}",
                  f"Release: {p.release}", f"Summary: {p.name}", *[f"Requires: {r}" for r in p.requires],
                  *[f"Provides: {r}" for r in p.provides], f"%description -n {p.name}", p.name]
    lines.append("%install")
    for p in packages:
        if p.file:
            lines += [f"mkdir -p %{{buildroot}}/usr/share/{p.name}",
                      f"echo {p.evr} > %{{buildroot}}/usr/share/{p.name}/VERSION"]
    for p in packages:
        lines += [f"%files -n {p.name}", *([f"/usr/share/{p.name}/VERSION"] if p.file else [])]
    if len({(p.name) for p in packages}) != len(packages):  # one spec holds one version of a name
        raise ValueError("build each version of a name in a build of its own")
    spec = workdir / "datum-test-packages.spec"
    spec.write_text("\n".join(lines) + "\n")
    subprocess.run(
        ["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {workdir / 'rpmbuild'}", "--define", f"_rpmdir {out}",
         "--define", "_build_id_links none", str(spec)],
        check=True, capture_output=True, text=True,
    )
    return out / "noarch"


def repository(where: Path, rpms: list[Path]) -> Path:
    """A dnf repository of ``rpms`` at ``where`` (createrepo_c)."""
    where.mkdir(parents=True, exist_ok=True)
    for path in rpms:
        shutil.copy2(path, where / path.name)
    subprocess.run(["createrepo_c", "-q", "--update", str(where)], check=True, capture_output=True, text=True)
    return where


def rpm_root(root: Path, repo: Path) -> None:
    """An empty RPM root: its rpm database initialised, dnf configured for ``repo`` alone."""
    (root / "etc" / "yum.repos.d").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "dnf" / "vars").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "dnf" / "dnf.conf").write_text("[main]\ngpgcheck=0\ninstallonly_limit=3\n")
    (root / "etc" / "dnf" / "vars" / "releasever").write_text("1\n")
    (root / "etc" / "yum.repos.d" / "datum-test.repo").write_text(
        f"[datum-test]\nname=Datum's tests\nbaseurl=file://{repo}\ngpgcheck=0\nenabled=1\nmetadata_expire=0\n"
    )
    subprocess.run(["rpm", "--root", str(root), "--dbpath", "/var/lib/rpm", "--initdb"], check=True)


def makecache(root: Path) -> None:
    """What dnf-makecache.timer does on an RPM host: dnf's metadata cache made (again) from the repository."""
    subprocess.run(["dnf", "-q", "--installroot", str(root), "makecache"], check=True, capture_output=True, text=True)


def installed(root: Path) -> dict[str, str]:
    """name -> version-release of every package installed in ``root``, as rpm itself says."""
    done = subprocess.run(
        ["rpm", "--root", str(root), "--dbpath", "/var/lib/rpm", "-qa", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\n"],
        check=True, capture_output=True, text=True,
    )
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())
