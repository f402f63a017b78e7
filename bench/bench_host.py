#!/usr/bin/env python3
"""Benchmark: an idle ``datum apply`` over 1,000 File resources, wall time including interpreter start.

Target (issue 3): under 0.5 s on the project's 2-core machine. Prints the
measured numbers; run as ``.venv/bin/python bench/bench_host.py [--files N] [--runs R]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

TARGET_SECONDS = 0.5


def datum_command() -> list[str]:
    exe = Path(sys.executable).with_name("datum")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "datum.cli.main"]


def write_manifest(directory: Path, count: int) -> Path:
    lines = ["resources:"]
    for i in range(count):
        lines += [
            f"  - File[f{i}]:",
            f"      path: /srv/bench/d{i % 20}/f{i}.conf",
            f'      content: "setting_{i} = {i}\\n"',
            '      mode: "0644"',
        ]
    manifest = directory / "manifest.yaml"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    return time.perf_counter() - start, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = base / "root"
        root.mkdir()
        manifest = write_manifest(base, args.files)
        env = {**os.environ, "DATUM_HOME": str(base / "home")}
        argv = [*datum_command(), "apply", str(manifest), "--root", str(root)]
        first, rc = timed(argv, env)
        if rc != 2:
            print(f"first pass exited {rc}, expected 2 (changed)", file=sys.stderr)
            return 1
        samples = []
        for _ in range(args.runs):
            seconds, rc = timed(argv, env)
            if rc != 0:
                print(f"idle pass exited {rc}, expected 0", file=sys.stderr)
                return 1
            samples.append(seconds)
        floor, _ = timed([sys.executable, "-c", "pass"], env)
    median = statistics.median(samples)
    print(f"date:            {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"machine:         {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"resources:       {args.files} File")
    print(f"first pass:      {first:.3f} s (creates every file)")
    print(f"idle pass:       median {median:.3f} s, min {min(samples):.3f} s, max {max(samples):.3f} s over {args.runs} runs")
    print(f"bare python -c pass: {floor:.3f} s")
    verdict = "meets" if median < TARGET_SECONDS else "MISSES"
    print(f"target:          < {TARGET_SECONDS} s wall, including interpreter start: {verdict} it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
