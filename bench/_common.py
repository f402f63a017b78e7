"""What the benchmarks share: the datum command, timed runs, file snapshots and the closing verdict line."""

from __future__ import annotations

import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

GNU_TIME = "/usr/bin/time"


def datum_command() -> list[str]:
    """The installed ``datum`` next to this interpreter, else the module."""
    exe = Path(sys.executable).with_name("datum")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from datum.cli.main import main; main()"]


def load() -> str:
    """The 1-, 5- and 15-minute load averages, as ``uptime`` prints them."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (``/proc``): what a busy machine does not stretch."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def header(what: str) -> str:
    return (
        f"{what}: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load {load()}"
    )


@dataclass
class Timed:
    """One process run: wall, user and system seconds, peak RSS, exit status."""

    wall: float
    user: float = 0.0
    system: float = 0.0
    max_rss_kib: int = 0
    returncode: int = 0
    stderr: str = ""

    @property
    def cpu(self) -> float:
        """User plus system seconds: what the run costs, less sensitive than wall time to a busy machine."""
        return self.user + self.system


def _clock(text: str) -> float:
    """``h:mm:ss`` or ``m:ss.ss`` as printed by GNU time."""
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def parse_gnu_time(text: str) -> dict[str, float]:
    """The fields of ``/usr/bin/time -v`` the benchmarks report."""
    out: dict[str, float] = {}
    for key, pattern in {
        "user": r"User time \(seconds\): ([\d.]+)",
        "system": r"System time \(seconds\): ([\d.]+)",
        "max_rss_kib": r"Maximum resident set size \(kbytes\): (\d+)",
    }.items():
        if m := re.search(pattern, text):
            out[key] = float(m.group(1))
    if m := re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text):
        out["wall"] = _clock(m.group(1))
    return out


def run_timed(argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
              gnu_time: bool = True, timeout: float | None = None) -> Timed:
    """Run ``argv``, under ``/usr/bin/time -v`` when asked and present; wall time from our own clock."""
    use_time = gnu_time and os.access(GNU_TIME, os.X_OK)
    report = None
    if use_time:
        fd, report = _tempname()
        os.close(fd)
        argv = [GNU_TIME, "-v", "-o", report, *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(list(argv), env=dict(env) if env is not None else None, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False, timeout=timeout)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time to the microsecond from our own rusage (GNU time prints hundredths)
    result = Timed(wall=wall, user=after.ru_utime - before.ru_utime, system=after.ru_stime - before.ru_stime,
                   returncode=done.returncode, stderr=done.stderr)
    if report is not None:
        fields = parse_gnu_time(Path(report).read_text())
        os.unlink(report)
        result.max_rss_kib = int(fields.get("max_rss_kib", 0))
    return result


def _tempname() -> tuple[int, str]:
    import tempfile

    return tempfile.mkstemp(prefix="datum-bench-time-")


def snapshot(directory: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every entry under ``directory``: (inode, mtime_ns, mode, size), by relative path."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            out[os.path.relpath(path, directory)] = (st.st_ino, st.st_mtime_ns, st.st_mode, st.st_size)
    return out


def changed(before: Mapping[str, tuple[int, ...]], after: Mapping[str, tuple[int, ...]]) -> list[str]:
    """What an idle pass changed: entries added, removed, or with another inode, mtime, mode or size."""
    names = sorted(set(before) | set(after))
    return [n for n in names if before.get(n) != after.get(n)]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float]) -> str:
    """``median m s (min-max over n runs)``."""
    return f"median {median(values):.3f} s ({min(values):.3f}-{max(values):.3f} over {len(values)} runs)"


def verdict(ok: bool) -> str:
    return "MEETS" if ok else "MISSES"


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


@contextmanager
def database(kind: str, home: Path) -> Iterator[str]:
    """The store's URL: a SQLite file in ``home``, or a fresh PostgreSQL database dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{home / 'datum.db'}"
        return
    admin_url = os.environ.get("DATUM_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    name = f"datum_bench_{uuid.uuid4().hex[:10]}"
    import sqlalchemy as sa

    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                         {"n": name})
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()
