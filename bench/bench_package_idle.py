#!/usr/bin/env python3
"""Benchmark: ``datum apply`` over 200 installed ``Package`` resources on both providers, nothing to change.

dnf: 200 tiny noarch rpms (built once by rpmbuild into ``.cache/bench-rpms-N``, a repository made by
createrepo_c) installed into a temporary RPM root by Datum's first pass (one dnf transaction, timed
too); then the engine's unchanged pass (``rpm -qa`` once) and the idle pass, which replays the rpm
database's recorded files without rpm or dnf. apt: a dpkg status database with the same 200 entries
(no .debs: nothing is installed), whose unchanged pass is the engine's, ``dpkg-query`` once a package
(the Debian provider's reads are commands: no idle entry). Target (issue 41): the dnf idle pass under
0.12 s, as the 1,000-File idle pass. Run: ``./scripts/bench package_idle`` or ``python
bench/bench_package_idle.py [--packages N] [--runs R]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import datum_command, header, median, run_timed, spread, verdict  # noqa: E402
from _host import compiled_datum, expect  # noqa: E402

CACHE = Path(__file__).resolve().parent.parent / ".cache"
TOOLS = ("rpm", "rpmbuild", "createrepo_c", "dnf", "dpkg-query")


def name(i: int) -> str:
    return f"datum-bench-{i:03d}"


def manifest(where: Path, count: int) -> Path:
    path = where / "manifest.yaml"
    path.write_text("resources:\n" + "".join(f"  - Package[{name(i)}]: {{}}\n" for i in range(count)))
    return path


def rpms(count: int) -> Path:
    """A repository of ``count`` tiny noarch packages, built once (one rpmbuild, each a subpackage with a
    file of its own) and kept in ``.cache/bench-rpms-N``."""
    repo = CACHE / f"bench-rpms-{count}"
    if (repo / "repodata" / "repomd.xml").exists():
        return repo
    work = Path(tempfile.mkdtemp(prefix="datum-bench-rpmbuild-"))
    try:
        lines = ["Name: datum-bench", "Version: 0", "Release: 0", "Summary: bench", "License: MIT",
                 "BuildArch: noarch", "%description", "bench"]
        for i in range(count):
            lines += [f"%package -n {name(i)}", "Version: 1.0", "Release: 1", f"Summary: {name(i)}",
                      f"%description -n {name(i)}", name(i)]
        lines.append("%install")
        lines += [f"mkdir -p %{{buildroot}}/usr/share/{name(i)} && echo {i} > %{{buildroot}}/usr/share/{name(i)}/N"
                  for i in range(count)]
        for i in range(count):
            lines += [f"%files -n {name(i)}", f"/usr/share/{name(i)}/N"]
        (work / "bench.spec").write_text("\n".join(lines) + "\n")
        staging = Path(f"{repo}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        subprocess.run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {work}", "--define", f"_rpmdir {staging}",
                        "--define", "_build_id_links none", str(work / "bench.spec")], check=True, capture_output=True,
                       env={**os.environ, "HOME": str(work)})  # Debian's rpm makes ~/.rpmdb: the build's own
        subprocess.run(["createrepo_c", "-q", str(staging)], check=True, capture_output=True)
        staging.rename(repo)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return repo


def rpm_root(root: Path, repo: Path, env: dict[str, str]) -> None:
    """An empty RPM root whose dnf knows ``repo`` alone (its own dnf.conf, repos and releasever)."""
    (root / "etc/yum.repos.d").mkdir(parents=True)
    (root / "etc/dnf/vars").mkdir(parents=True)
    (root / "etc/dnf/dnf.conf").write_text("[main]\ngpgcheck=0\n")
    (root / "etc/dnf/vars/releasever").write_text("1\n")
    (root / "etc/yum.repos.d/bench.repo").write_text(f"[bench]\nname=bench\nbaseurl=file://{repo}\ngpgcheck=0\n")
    subprocess.run(["rpm", "--root", str(root), "--dbpath", "/var/lib/rpm", "--initdb"], check=True, env=env)


def dpkg_root(root: Path, count: int) -> None:
    """A dpkg database that says ``count`` packages are installed (their files are not there: dpkg-query
    reads the status file only)."""
    admin = root / "var/lib/dpkg"
    for sub in ("info", "updates"):
        (admin / sub).mkdir(parents=True)
    (admin / "status").write_text("".join(
        f"Package: {name(i)}\nStatus: install ok installed\nPriority: optional\nSection: misc\n"
        f"Maintainer: Datum bench <bench@datum.invalid>\nArchitecture: all\nVersion: 1.0-1\n"
        f"Description: a package the benchmark says is installed\n\n" for i in range(count)
    ))


def forget_idle(home: Path) -> None:
    for entry in home.rglob("idle-*.bin"):
        entry.unlink()


def main() -> bool:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packages", type=int, default=200)
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        print(f"skipped: {', '.join(missing)} not installed (scripts/setup-rpm installs rpm, createrepo-c and dnf)")
        return True
    n, runs, limit = a.packages, a.runs, 0.12
    print(header(f"unchanged passes, {n} Package (dnf and apt)"))
    started = time.perf_counter()
    repo = rpms(n)
    built = time.perf_counter() - started
    with tempfile.TemporaryDirectory(prefix="datum-bench-package-") as tmp:
        base = Path(tmp)
        home = base / "home"
        (base / "rpmhome").mkdir()
        (base / "rpmhome/.rpmmacros").write_text("%_dbpath /var/lib/rpm\n")  # an RPM host's rpm (Debian's: ~/.rpmdb)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DATUM_")}
        env.update(DATUM_HOME=str(home), HOME=str(base / "rpmhome"))
        compiled_datum(env)
        plan = manifest(base, n)

        def apply(root: Path, state: str):
            return run_timed([*datum_command(), "apply", str(plan), "--root", str(root), "--state", str(base / state)], env)

        rpm_r = base / "rpm-root"
        rpm_root(rpm_r, repo, env)
        first = apply(rpm_r, "rpm.db")
        expect(first, {2}, "the first dnf pass")
        time.sleep(1.2)  # the rpm database's last change older than a pass's racy window: the next pass remembers
        expect(apply(rpm_r, "rpm.db"), {0}, "the dnf engine's unchanged pass")
        idle = [apply(rpm_r, "rpm.db") for _ in range(runs)]
        engine = []
        for _ in range(runs):
            forget_idle(home)
            engine.append(apply(rpm_r, "rpm.db"))
        deb_r = base / "deb-root"
        dpkg_root(deb_r, n)
        apt = [apply(deb_r, "deb.db") for _ in range(runs)]
        for t in (*idle, *engine, *apt):
            expect(t, {0}, "an unchanged pass")
    m_idle, m_engine, m_apt = (median([t.wall for t in ts]) for ts in (idle, engine, apt))
    print(f"{n} rpms built and indexed: {built:.1f} s ({'cached' if built < 1 else 'built now'}, {repo})")
    print(f"dnf first pass:         {first.wall:.3f} s (one dnf transaction installing {n} packages)")
    print(f"dnf idle pass:          {spread([t.wall for t in idle])}, CPU {median([t.cpu for t in idle]):.3f} s "
          "(the rpm database's files replayed: no rpm, no dnf)")
    print(f"dnf engine, unchanged:  {spread([t.wall for t in engine])}, CPU {median([t.cpu for t in engine]):.3f} s "
          "(no idle entry: rpm -qa once)")
    print(f"apt engine, unchanged:  {spread([t.wall for t in apt])}, CPU {median([t.cpu for t in apt]):.3f} s "
          f"(dpkg-query {n} times; the Debian provider makes no idle entry)")
    ok = m_idle < limit
    print(f"idle {n} Package: dnf {m_idle:.3f} s (engine {m_engine:.3f} s), apt {m_apt:.3f} s (engine: no idle pass), "
          f"load {os.getloadavg()[0]:.2f}; target dnf idle under {limit:g} s: {verdict(ok)}")
    return ok


if __name__ == "__main__":
    main()
