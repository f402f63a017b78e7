#!/usr/bin/env python3
"""Benchmark: an idle ``datum apply`` over 10,000 File resources, whole process, the manifest unchanged.

Target (issue 14): under 1 s. Run: ``./scripts/bench host_10k``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _host import args, idle  # noqa: E402

if __name__ == "__main__":
    a = args(__doc__, 10_000, 5)
    idle(a.files, a.runs, limit=1.0, bare_factor=None)
