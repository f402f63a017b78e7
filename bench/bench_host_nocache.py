#!/usr/bin/env python3
"""Benchmark: the idle ``datum apply`` over 1,000 File right after the manifest changed (no cache to hit).

Target (issue 14): under 0.3 s, whole process. Run: ``./scripts/bench host_nocache``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _host import args, nocache  # noqa: E402

if __name__ == "__main__":
    a = args(__doc__, 1000, 7)
    nocache(a.files, a.runs)
