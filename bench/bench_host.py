#!/usr/bin/env python3
"""Benchmark: an idle ``datum apply`` over 1,000 File resources, whole process, the manifest unchanged.

Target (issue 14): under 0.12 s, and at most 2x a bare Python process that
lstats, reads and compares the same files. Run: ``./scripts/bench host`` or
``python bench/bench_host.py [--files N] [--runs R]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _host import args, idle  # noqa: E402

if __name__ == "__main__":
    a = args(__doc__, 1000, 10)
    idle(a.files, a.runs)
