"""Soak: a real ``datum apply`` over ~200 Files is SIGKILLed at random moments, then the host's promises are checked.

Run it with ``./scripts/soak-host`` (``--help`` for the knobs); ``--smoke`` is
the few-second run the test suite makes. Each round flips the manifest between
two versions of every file (other content, other mode), starts ``datum apply``,
kills it (mostly while the pass runs, sometimes while it starts), and checks:

- every file is absent, entirely the old version or entirely the new one
  (never partial), with the mode of the version it holds;
- when the kill was mid-pass (the pass's lock record is still there, or some
  files moved to the new version and not all), ``datum status`` says
  ``unknown``; it never shows the previous pass as current;
- the next ``datum apply`` runs at once (never exit 69, never waits for a
  lease), ends converged with every file at the new version, and no
  ``.datum-tmp`` file is left anywhere under the root.

It exits 1 naming every broken promise, 0 otherwise, and prints a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DATUM = str(Path(sys.executable).with_name("datum"))
VERSIONS = {"A": 0o644, "B": 0o600}
DIRS = 4  # files spread over a few directories, as on a real host


@dataclass
class Soak:
    base: Path
    files: int
    rng: random.Random
    mid_pass_only: bool = False  # every kill aimed inside the pass (the smoke run)
    problems: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "state.db"

    @property
    def lock(self) -> Path:
        return Path(f"{self.state}.host-pass.lock")

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "DATUM_HOME": str(self.base / "home"),
            "DATUM_BOOT_ID_FILE": str(self.base / "boot_id"),
        }
        env.pop("DATUM_CONFIG", None)
        return env

    def host_path(self, i: int) -> str:
        return f"/etc/soak/d{i % DIRS}/f{i:04d}.conf"

    def content(self, version: str, i: int) -> bytes:
        """Each version of each file: distinct, 2-24 KiB, so a kill can land inside a write."""
        size = 2048 + (i * 7919 + (0 if version == "A" else 4099)) % (22 * 1024)
        line = f"{version} file {i} ".encode()
        return (line * (size // len(line) + 1))[:size] + b"\n"

    def setup(self) -> None:
        self.root.mkdir(parents=True)
        (self.base / "boot_id").write_text("soak-boot\n")
        for version, mode in VERSIONS.items():
            src = self.base / version
            src.mkdir()
            lines = ["resources:"]
            for i in range(self.files):
                (src / f"f{i:04d}").write_bytes(self.content(version, i))
                lines += [
                    f"  - File[{self.host_path(i)}]:",
                    f"      source: {version}/f{i:04d}",
                    f'      mode: "{mode:04o}"',
                ]
            (self.base / f"{version}.yaml").write_text("\n".join(lines) + "\n")

    def datum(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [DATUM, *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def apply_argv(self, version: str) -> list[str]:
        manifest = str(self.base / f"{version}.yaml")
        return [DATUM, "apply", manifest, "--root", str(self.root), "--state", str(self.state)]

    def status(self) -> dict[str, object]:
        done = self.datum("status", "--state", str(self.state), "--json")
        try:
            out = json.loads(done.stdout)
        except ValueError:
            return {"state": f"(not JSON: exit {done.returncode}: {done.stderr.strip()[-200:]})"}
        return out if isinstance(out, dict) else {"state": repr(out)}

    def versions(self) -> dict[int, str]:
        """What each file holds: ``A``, ``B``, ``absent``, or a description of what is wrong."""
        found = {}
        for i in range(self.files):
            path = self.root / self.host_path(i).lstrip("/")
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                found[i] = "absent"
                continue
            if not stat.S_ISREG(st.st_mode):
                found[i] = "not a regular file"
                continue
            data = path.read_bytes()
            which = next((v for v in VERSIONS if data == self.content(v, i)), None)
            if which is None:
                found[i] = f"partial or foreign content ({len(data)} bytes)"
            elif stat.S_IMODE(st.st_mode) != VERSIONS[which]:
                found[i] = f"{which} with mode {stat.S_IMODE(st.st_mode):04o}"
            else:
                found[i] = which
        return found

    def leftovers(self) -> list[str]:
        return [
            os.path.join(d, n)
            for d, dirs, names in os.walk(self.root)
            for n in names + dirs
            if "datum-tmp" in n
        ]

    def _finished_after(self, finished: str) -> bool:
        """Whether the stored report finished after the pass in the lock record started."""
        from datetime import datetime

        try:
            started = json.loads(self.lock.read_text())["startedAt"]
            return datetime.fromisoformat(finished) >= datetime.fromisoformat(started)
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def recording(self) -> bool:
        """Whether a pass's lock record is there (written before its first change, emptied after its report)."""
        try:
            return self.lock.stat().st_size > 0
        except FileNotFoundError:
            return False

    def converge(self, version: str, label: str) -> float:
        """Run ``datum apply`` to the end; check it ran at once and converged.

        Returns how long its lock record was there (the pass proper), for timing kills.
        """
        proc = subprocess.Popen(
            self.apply_argv(version),
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen = gone = None
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            now, recording = time.monotonic(), self.recording()
            if recording and seen is None:
                seen = now
            elif seen is not None and gone is None and not recording:
                gone = now
            time.sleep(0.002)
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate()
        end = time.monotonic()
        took = ((gone or end) - seen) if seen is not None else 0.0
        if proc.returncode == 69:
            self.problems.append(f"{label}: the next apply exited 69 (blocked): {err.strip()}")
        elif proc.returncode not in (0, 2):
            self.problems.append(
                f"{label}: apply exited {proc.returncode}: {out[-400:]}{err[-400:]}"
            )
        wrong = {i: v for i, v in self.versions().items() if v != version}
        if wrong:
            some = ", ".join(f"{self.host_path(i)}: {v}" for i, v in list(wrong.items())[:5])
            self.problems.append(
                f"{label}: {len(wrong)} files not at {version} after apply ({some})"
            )
        if left := self.leftovers():
            self.problems.append(f"{label}: temporary files left: {left[:5]}")
        state = self.status().get("state")
        if state != "converged":
            self.problems.append(f"{label}: status says {state!r} after a full apply")
        return took

    def kill_round(self, n: int, version: str, pass_seconds: float) -> None:
        label = f"round {n} ({version})"
        before = self.versions()
        started = sum(v == version for v in before.values())
        proc = subprocess.Popen(
            self.apply_argv(version),
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not self.mid_pass_only and self.rng.random() < 0.2:
            # Anywhere from start-up to the end (start-up, lock, report, exit included).
            time.sleep(self.rng.uniform(0, pass_seconds + 1.5))
        else:
            # Mid-pass: once its lock record is there, a random way into the pass.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None and not self.recording():
                time.sleep(0.002)
            time.sleep(self.rng.uniform(0, pass_seconds))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            self.stats["killed"] = self.stats.get("killed", 0) + 1
        else:
            self.stats["finished before the kill"] = (
                self.stats.get("finished before the kill", 0) + 1
            )
        proc.wait()
        after = self.versions()
        bad = {i: v for i, v in after.items() if v not in (*VERSIONS, "absent")}
        if bad:
            some = ", ".join(f"{self.host_path(i)}: {v}" for i, v in list(bad.items())[:5])
            self.problems.append(
                f"{label}: {len(bad)} files neither old nor new after the kill ({some})"
            )
        moved = {i for i, v in after.items() if v != before[i]}
        if wrong := [i for i in moved if after[i] != version]:
            self.problems.append(f"{label}: files moved away from {version}: {wrong[:5]}")
        done = sum(v == version for v in after.values())
        record = self.recording()
        mid_pass = record or (done > started and done < self.files)
        if mid_pass:
            self.stats["killed mid-pass"] = self.stats.get("killed mid-pass", 0) + 1
            said = self.status()
            # Killed after its report was stored, before it emptied its record: it did finish
            # (an idle pass spends a good part of its few milliseconds there).
            finished = record and self._finished_after(str(said.get("finishedAt")))
            if finished:
                self.stats["killed after its report"] = self.stats.get("killed after its report", 0) + 1
            elif said.get("state") != "unknown":
                self.problems.append(
                    f"{label}: killed mid-pass ({done}/{self.files} written, lock record "
                    f"{'present' if record else 'absent'}) but status says {said.get('state')!r}"
                )
            if done > started and not record:
                self.problems.append(f"{label}: files changed but no lock record was durable")
        self.converge(version, f"{label}, next apply")


def soak(
    files: int, kills: int, seed: int, keep: bool, mid_pass_only: bool = False
) -> dict[str, object]:
    base = Path(tempfile.mkdtemp(prefix="datum-soak-host-"))
    s = Soak(base, files, random.Random(seed), mid_pass_only)
    try:
        s.setup()
        # The first pass creates everything; its duration calibrates when to kill.
        pass_seconds = s.converge("A", "first pass")
        version = "A"
        for n in range(1, kills + 1):
            version = "B" if version == "A" else "A"
            s.kill_round(n, version, pass_seconds)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    return {
        "files": files,
        "rounds": kills,
        "seed": seed,
        "firstPassSeconds": round(pass_seconds, 3),
        **s.stats,
        "problems": s.problems,
        **({"kept": str(base)} if keep else {}),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--kills", type=int, default=40, help="rounds, each one apply killed at random")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--smoke", action="store_true", help="a few kills: what the test suite runs")
    args = ap.parse_args(argv)
    if args.smoke:
        args.files, args.kills = 60, 3
    result = soak(args.files, args.kills, args.seed, args.keep, mid_pass_only=args.smoke)
    print(json.dumps(result, indent=2))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
