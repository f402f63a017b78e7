"""The host-agent benchmarks: N ``File`` resources, Datum's passes against bare Python loops doing the same work.

Every figure is a whole process (interpreter start included), the median of
several runs, with Datum's bytecode compiled as an install has it: the
``datum`` package the command imports is compiled once before anything is
timed (``compiled_datum``). Without it (the work tree run with
``PYTHONDONTWRITEBYTECODE=1``, which this machine sets) every pass compiles
its ~40 modules again: about 0.06 s of CPU that an installed agent never pays. The bare loops run on the same interpreter, as a script of their
own: the idle one lstats, reads and compares every file; the first-pass one
makes the directories and writes every file atomically as Datum does
(temporary file, write, fchmod, fsync, rename, fsync of the directory).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from _common import (
    Timed,
    changed,
    datum_command,
    header,
    median,
    run_timed,
    snapshot,
    spread,
    verdict,
)

DIRS = 20


def relpath(i: int) -> str:
    return f"srv/bench/d{i % DIRS}/f{i}.conf"


def content(i: int) -> str:
    return f"setting_{i} = {i}\n"


def write_manifest(directory: Path, count: int, comment: str = "") -> Path:
    lines = [f"# {comment}"] if comment else []
    lines.append("resources:")
    for i in range(count):
        lines += [f"  - File[f{i}]:", f"      path: /{relpath(i)}", f'      content: "setting_{i} = {i}\\n"',
                  '      mode: "0644"']
    manifest = directory / "manifest.yaml"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


BARE_IDLE = f"""
import os, stat, sys
root, n, dirs = sys.argv[1], int(sys.argv[2]), {DIRS}
ok = 0
for i in range(n):
    path = f"{{root}}/srv/bench/d{{i % dirs}}/f{{i}}.conf"
    want = f"setting_{{i}} = {{i}}\\n".encode()
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 and st.st_size == len(want):
        with open(path, "rb") as f:
            ok += f.read() == want
sys.exit(0 if ok == n else 1)
"""

BARE_WRITE = f"""
import os, sys
root, n, dirs = sys.argv[1], int(sys.argv[2]), {DIRS}
for i in range(n):
    d = f"{{root}}/srv/bench/d{{i % dirs}}"
    path = f"{{d}}/f{{i}}.conf"
    os.makedirs(d, exist_ok=True)
    tmp = f"{{d}}/.tmp-f{{i}}.conf"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, f"setting_{{i}} = {{i}}\\n".encode())
    os.fchmod(fd, 0o644)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, path)
    dfd = os.open(d, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
"""


def compiled_datum(env: dict[str, str]) -> str:
    """Compile the bytecode of the ``datum`` package the ``datum`` command imports under ``env``
    (a no-op where it is compiled already); return where that package is."""
    find = "import datum, os; print(os.path.dirname(datum.__file__))"
    where = subprocess.run([sys.executable, "-c", find], env=env, capture_output=True, text=True, check=True)
    package = where.stdout.strip()
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return package


class Bench:
    """A temporary home and root with a manifest of ``count`` files (Datum's bytecode compiled)."""

    def __init__(self, base: Path, count: int) -> None:
        self.base = base
        self.count = count
        self.root = base / "root"
        self.root.mkdir(exist_ok=True)
        self.home = base / "home"
        self.home.mkdir(exist_ok=True)
        self.manifest = write_manifest(base, count)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DATUM_")}
        self.env["DATUM_HOME"] = str(self.home)
        compiled_datum(self.env)

    def apply(self, env: dict[str, str] | None = None, root: Path | None = None) -> Timed:
        argv = [*datum_command(), "apply", str(self.manifest), "--root", str(root or self.root)]
        return run_timed(argv, env or self.env)

    def bare(self, code: str, root: Path | None = None) -> Timed:
        script = self.base / "bare.py"
        script.write_text(code)
        return run_timed([sys.executable, str(script), str(root or self.root), str(self.count)], self.env)


def expect(t: Timed, codes: set[int], what: str) -> None:
    if t.returncode not in codes:
        raise SystemExit(f"{what} exited {t.returncode}, expected {sorted(codes)}: {t.stderr.strip()[-500:]}")


def idle_runs(b: Bench, runs: int, env_for: Callable[[int], dict[str, str]] | None = None,
              before: Callable[[int], None] | None = None) -> list[Timed]:
    """``runs`` idle passes, each checked to exit 0 and to change nothing under the root."""
    samples = []
    for k in range(runs):
        if before:
            before(k)
        snap = snapshot(b.root)
        t = b.apply(env_for(k) if env_for else None)
        expect(t, {0}, "an idle pass")
        if diff := changed(snap, snapshot(b.root)):
            raise SystemExit(f"the idle pass changed {diff[:3]}")
        samples.append(t)
    return samples


def args(doc: str, files: int, runs: int) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--files", type=int, default=files)
    ap.add_argument("--runs", type=int, default=runs)
    return ap.parse_args()


# -- the targets ---------------------------------------------------------------------


def idle(files: int = 1000, runs: int = 10, limit: float = 0.12, bare_factor: float | None = 2.0) -> bool:
    """Idle pass with the validated-manifest cache warm, against the bare stat-read-compare loop."""
    print(header(f"idle pass, {files} File"))
    with tempfile.TemporaryDirectory(prefix="datum-bench-host-") as tmp:
        b = Bench(Path(tmp), files)
        first = b.apply()
        expect(first, {2}, "the first pass")
        samples = idle_runs(b, runs)
        bare = []
        for _ in range(runs):
            t = b.bare(BARE_IDLE)
            expect(t, {0}, "the bare loop")
            bare.append(t)
    m, mb = median([t.wall for t in samples]), median([t.wall for t in bare])
    cpu, cpu_bare = median([t.cpu for t in samples]), median([t.cpu for t in bare])
    print(f"first pass:      {first.wall:.3f} s (creates every file, validates the manifest)")
    print(f"idle pass:       {spread([t.wall for t in samples])}, CPU {cpu:.3f} s")
    print(f"bare loop:       {spread([t.wall for t in bare])}, CPU {cpu_bare:.3f} s "
          "(a process that lstats, reads and compares the same files)")
    ok = m < limit and (bare_factor is None or m <= bare_factor * mb)
    against = f" and at most {bare_factor:g}x the bare loop" if bare_factor else ""
    print(f"idle {files} File: {m:.3f} s wall (CPU {cpu:.3f} s), {m / mb:.1f}x the bare loop ({mb:.3f} s; "
          f"CPU {cpu / cpu_bare:.1f}x), load {os.getloadavg()[0]:.2f}; target under {limit:g} s{against}: {verdict(ok)}")
    return ok


def nocache(files: int = 1000, runs: int = 10, limit: float = 0.3) -> bool:
    """The idle pass right after the manifest changed: no validated-manifest cache entry to hit."""
    print(header(f"idle pass after a manifest change, {files} File"))
    with tempfile.TemporaryDirectory(prefix="datum-bench-host-") as tmp:
        b = Bench(Path(tmp), files)
        expect(b.apply(), {2}, "the first pass")
        # each run changes the manifest (a comment), so each validates it in full; the files stay as they are
        samples = idle_runs(b, runs, before=lambda k: write_manifest(b.base, files, comment=f"change {k}"))
    m, cpu = median([t.wall for t in samples]), median([t.cpu for t in samples])
    print(f"idle pass, manifest changed: {spread([t.wall for t in samples])}, CPU {cpu:.3f} s")
    ok = m < limit
    print(f"idle {files} File after a manifest change (no cache): {m:.3f} s wall (CPU {cpu:.3f} s), "
          f"load {os.getloadavg()[0]:.2f}; target under {limit:g} s: {verdict(ok)}")
    return ok


def first(files: int = 1000, runs: int = 5, factor: float = 1.5) -> bool:
    """The first pass creating every file, against a bare loop of the same atomic writes."""
    print(header(f"first pass, {files} File"))
    with tempfile.TemporaryDirectory(prefix="datum-bench-host-") as tmp:
        b = Bench(Path(tmp), files)
        datum, datum_cached, bare, datum_cpu, bare_cpu = [], [], [], [], []
        for k in range(runs):
            root = b.base / f"root-{k}"
            root.mkdir()
            # Each timed run starts with the disk's dirty data written out (os.sync), so no run
            # pays in its fsyncs for what the one before it wrote or removed (the last round's
            # rmtree of 3,000 files landed in the next first pass's first fsync).
            os.sync()
            # a fresh cache directory: a first pass meets a manifest it never validated
            t = b.apply({**b.env, "DATUM_CACHE_DIR": str(b.base / f"cache-{k}")}, root)
            expect(t, {2}, "the first pass")
            datum.append(t.wall)
            datum_cpu.append(t.cpu)
            root = b.base / f"root-cached-{k}"
            root.mkdir()
            os.sync()
            t = b.apply(root=root)  # the shared cache: warm after the first run
            expect(t, {2}, "the first pass")
            datum_cached.append(t.wall)
            root = b.base / f"bare-{k}"
            root.mkdir()
            os.sync()
            t = b.bare(BARE_WRITE, root)
            expect(t, {0}, "the bare loop")
            bare.append(t.wall)
            bare_cpu.append(t.cpu)
            if snapshot(root).keys() != snapshot(b.base / f"root-{k}").keys():
                raise SystemExit("the bare loop and Datum made different trees")
            for d in (b.base / f"root-{k}", b.base / f"root-cached-{k}", root):
                shutil.rmtree(d)
    m, mc, mb = median(datum), median(datum_cached[1:] or datum_cached), median(bare)
    print(f"first pass:      {spread(datum)}, CPU {median(datum_cpu):.3f} s (manifest validated in the pass)")
    print(f"first pass, manifest cached: median {mc:.3f} s")
    print(f"bare loop:       {spread(bare)}, CPU {median(bare_cpu):.3f} s (mkdir, temporary file, write, fchmod, fsync, rename, fsync dir)")
    ok = m <= factor * mb
    print(f"first pass {files} File: {m:.3f} s, {m / mb:.2f}x the bare atomic-write loop ({mb:.3f} s; "
          f"{mc / mb:.2f}x with the manifest cached), load {os.getloadavg()[0]:.2f}; "
          f"target at most {factor:g}x: {verdict(ok)}")
    return ok
