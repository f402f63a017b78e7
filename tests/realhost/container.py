"""A booted Debian under test: systemd-nspawn with systemd as PID 1, entered with nsenter.

``scripts/test-host build`` makes the root (debootstrap, cached for the machine
under ``/var/cache/datum-test/debian-root``, or ``.cache/debian-root`` for a
user other than root) and the wheelhouse (``.cache/wheelhouse``). A boot uses
``--volatile=overlay``: whatever a test does inside is gone at shutdown and the
cached root never changes. The container shares the host's network, so apt
reaches the mirror; nothing started inside may bind a port the machine's own
services use.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# where scripts/test-host keeps it (its default for root is the machine's; DATUM_TEST_ROOT moves it): asked there
ROOTFS = Path(subprocess.run([str(REPO / "scripts" / "test-host"), "root"], capture_output=True, text=True,
                             check=True).stdout.strip())
WHEELS = REPO / ".cache" / "wheelhouse"
WORK = REPO / ".cache" / "realhost-work"
# Datum's virtualenv, made inside a container by its own python3 from the wheelhouse, kept
# between boots (bound at /opt/datum-test) and remade whenever the wheelhouse is rebuilt.
VENV = REPO / ".cache" / "realhost-venv"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DATUM = "/opt/datum-test/bin/datum"


def unavailable() -> str | None:
    """Why a container cannot be booted here, or None."""
    if os.geteuid() != 0:
        return "the real-host tests need root (systemd-nspawn)"
    for tool in ("systemd-nspawn", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: run scripts/test-host build"
    if not (ROOTFS / ".datum-root-ok").exists():
        built = REPO / ".cache" / "test-host-build.log"  # ./scripts/test's build in the background, when it failed
        return f"no Debian root at {ROOTFS}: run scripts/test-host build (about a minute, once)" + (
            f"; the last build's log is {built}" if built.exists() else "")
    if not (WHEELS / ".stamp").exists() or not (WHEELS / ".deps").exists():
        return f"no wheelhouse at {WHEELS}: run scripts/test-host build"
    return None


@dataclass
class Done:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"{self.argv} exited {self.returncode}\n{self.stdout}\n{self.stderr}"


class Container:
    """One boot of the cached root. ``run`` executes inside, in every namespace of its PID 1."""

    def __init__(self, binds: dict[Path, str] | None = None) -> None:
        self.binds = binds or {}  # host directory -> where it is inside; kept across reboots
        self.name = f"datum-{uuid.uuid4().hex[:8]}"
        self.work = WORK / self.name  # bound at /srv/work inside
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid1: int | None = None
        self.boot_seconds = 0.0

    # --- life cycle ---------------------------------------------------------------------------

    def boot(self, timeout: float = 60) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        VENV.mkdir(parents=True, exist_ok=True)
        self.pid1 = None
        self.log = open(self.work.parent / f"{self.name}.console", "wb")  # noqa: SIM115
        start = time.monotonic()
        self.proc = subprocess.Popen(
            [
                "systemd-nspawn",
                "-b",
                "--register=no",
                "--keep-unit",
                "--volatile=overlay",
                "--quiet",
                "--console=passive",
                f"--machine={self.name}",
                "-D",
                str(ROOTFS),
                f"--bind-ro={WHEELS}:/opt/wheels",
                f"--bind={self.work}:/srv/work",
                f"--bind={VENV}:/opt/datum-test",
                *(f"--bind={src}:{dst}" for src, dst in self.binds.items()),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = start + timeout
        while self.pid1 is None:
            self._check_alive()
            self.pid1 = self._find_pid1()
            if time.monotonic() > deadline:
                raise RuntimeError("the container's PID 1 did not appear")
            time.sleep(0.02)
        while True:
            self._check_alive()
            done = self.run("systemctl", "is-system-running", check=False)
            if done.stdout.strip() in ("running", "degraded"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the container did not finish booting: {done.stdout.strip()}")
            time.sleep(0.05)
        self.boot_seconds = time.monotonic() - start

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            console = (self.work.parent / f"{self.name}.console").read_text(errors="replace")
            raise RuntimeError(f"systemd-nspawn exited {self.proc.returncode}:\n{console[-3000:]}")

    def _find_pid1(self) -> int | None:
        """The container's init: a descendant of nspawn whose pid in its own namespace is 1."""
        assert self.proc is not None
        children: dict[int, list[int]] = {}
        nspid: dict[int, list[str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            children.setdefault(int(fields.get("PPid", "0")), []).append(int(entry))
            nspid[int(entry)] = fields.get("NSpid", "").split()
        todo = [self.proc.pid]
        while todo:
            pid = todo.pop()
            ids = nspid.get(pid, [])
            if len(ids) > 1 and ids[-1] == "1":
                return pid
            todo.extend(children.get(pid, []))
        return None

    def rebooted(self, timeout: float = 60) -> None:
        """After a reboot asked for inside: nspawn exits 133 (its "reboot me" status), and the
        container boots again from the cached root; only ``binds`` and /srv/work carry over."""
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout)
        self.log.close()
        if code != 133:
            raise AssertionError(f"systemd-nspawn exited {code}, not 133 (a reboot)")
        self.boot()

    def shutdown(self, timeout: float = 30) -> float:
        """Power off (SIGRTMIN+4 to nspawn's init, as machinectl poweroff does); the seconds it took."""
        start = time.monotonic()
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        try:
            self.run("systemctl", "poweroff", "--no-block", check=False, timeout=10)
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)
        (self.work.parent / f"{self.name}.console").unlink(missing_ok=True)
        return time.monotonic() - start

    # --- inside --------------------------------------------------------------------------------

    def run(
        self,
        *argv: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120,
        env: dict[str, str] | None = None,
    ) -> Done:
        assert self.pid1 is not None
        environ = ["PATH=" + PATH, "LANG=C.UTF-8", "HOME=/root", *(f"{k}={v}" for k, v in (env or {}).items())]
        full = ["nsenter", "-t", str(self.pid1), "-a", "-r", "-w", "--", "env", "-i", *environ, *argv]
        proc = subprocess.Popen(
            full, stdin=subprocess.PIPE if input is not None else None,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + timeout
        pending = input
        while True:
            try:
                out, err = proc.communicate(pending, timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pending = None  # given once: communicate keeps sending it
                if time.monotonic() > deadline:
                    proc.kill()
                    out, err = proc.communicate()
                    raise subprocess.TimeoutExpired(full, timeout, out, err) from None
                _continue_if_stopped(proc.pid)
        done = Done(list(argv), proc.returncode, out, err)
        if check and done.returncode != 0:
            raise AssertionError(str(done))
        return done

    def sh(self, script: str, **kw) -> Done:
        return self.run("/bin/sh", "-ec", script, **kw)

    def write(self, path: str, text: str, mode: str = "0644") -> None:
        self.sh(f"mkdir -p \"$(dirname '{path}')\"; cat > '{path}'; chmod {mode} '{path}'", input=text)

    def install_datum(self) -> float:
        """A virtualenv at /opt/datum-test from the bound wheelhouse, no index; the seconds it took.

        Made once per wheelhouse (under a lock, for parallel workers), then reused.
        """
        import fcntl

        start = time.monotonic()
        deps = str((WHEELS / ".deps").stat().st_mtime_ns)
        own = str((WHEELS / ".stamp").stat().st_mtime_ns)
        with open(VENV.parent / "realhost-venv.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            made = VENV / ".from-wheelhouse"
            have = made.read_text().split() if made.exists() else []
            if len(have) != 2 or have[0] != deps:
                self.sh(
                    "find /opt/datum-test -mindepth 1 -delete && "
                    "python3 -m venv /opt/datum-test && "
                    "/opt/datum-test/bin/pip install -q --no-index --find-links /opt/wheels datum",
                    timeout=600,  # minutes on a machine busy with other work
                )
            elif have[1] != own:
                self.sh(
                    "/opt/datum-test/bin/pip install -q --no-index --no-deps --force-reinstall "
                    "/opt/wheels/datum-*.whl"
                )
            made.write_text(f"{deps} {own}")
        return time.monotonic() - start

    def apply(
        self, manifest: str, *, mode: str = "enforce", extra: tuple[str, ...] = ()
    ) -> tuple[int, dict]:
        """``datum apply --root / --json`` on ``manifest`` (YAML text); the exit code and the report."""
        path = f"/srv/work/manifest-{uuid.uuid4().hex[:8]}.yaml"
        (self.work / Path(path).name).write_text(manifest)
        done = self.run(
            DATUM, "apply", path, "--root", "/", "--mode", mode, "--json", *extra,
            check=False, env={"DATUM_HOME": "/var/lib/datum"},
        )
        try:
            report = json.loads(done.stdout)
        except ValueError as exc:
            raise AssertionError(f"datum apply printed no report: {done}") from exc
        return done.returncode, report


def _continue_if_stopped(pid: int) -> None:
    """SIGCONT to ``nsenter`` when it stopped itself, so that it goes on waiting for its command.

    A command that reboots the container (``systemctl reboot`` from a pass) may still be alive
    when systemd-shutdown freezes every process inside with ``kill(-1, SIGSTOP)`` before killing
    them. nsenter, waiting for it from outside the container's PID namespace, sees it stopped and
    stops itself too (util-linux passes a child's stop on to its parent), and is never continued:
    the container's SIGCONT does not reach it. Stopped, it never reaps its child, and the
    container's PID 1 cannot finish exiting while a process of its namespace is unreaped: the
    reboot hangs (nspawn never exits 133), and the command's caller with it. Seen about once in
    ten reboots from ``datum agent`` (tests/realhost/test_fleet_reboots.py).
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return
    if fields and fields[0] in ("T", "t"):
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def by_id(report: dict) -> dict[str, dict]:
    return {r["id"]: r for r in report["resources"]}


def summary(report: dict) -> str:
    """One line per resource, as the pass prints it: for assertion messages."""
    return "\n".join(
        f"{r['id']}: {r['state']} {r.get('action')} {r.get('reason') or r.get('error') or ''}"
        for r in report["resources"]
    ) + f"\nhost: {report['state']} {report.get('reason') or ''}"
