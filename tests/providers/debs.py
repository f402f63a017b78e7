"""Real Debian packages for tests: a tiny .deb built with dpkg-deb, and an empty dpkg database."""

from __future__ import annotations

import subprocess
from pathlib import Path


def build_deb(
    workdir: Path, package: str, version: str, files: dict[str, str] | None = None, conffiles: tuple[str, ...] = ()
) -> Path:
    """A real, tiny .deb built with dpkg-deb --build; ``conffiles`` are its configuration files."""
    tree = workdir / f"{package}_{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: Datum tests <tests@datum.invalid>\nDescription: a package built by the test suite\n"
    )
    for path, content in (files or {f"/usr/share/{package}/VERSION": version + "\n"}).items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    if conffiles:
        (tree / "DEBIAN" / "conffiles").write_text("".join(f"{c}\n" for c in conffiles))
    deb = workdir / f"{package}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(tree), str(deb)], check=True, capture_output=True)
    return deb


def dpkg_root(root: Path) -> None:
    """An empty dpkg database under ``root``, as a fresh Debian root has."""
    admin = root / "var" / "lib" / "dpkg"
    for sub in ("info", "updates"):
        (admin / sub).mkdir(parents=True, exist_ok=True)
    (admin / "status").touch()
