#!/usr/bin/env python3
"""Benchmark: the first ``datum apply`` creating 1,000 files, against a bare loop of the same atomic writes.

Target (issue 14): at most 1.5x the bare loop (temporary file, write, fchmod,
fsync, rename, fsync of the directory), both whole processes. Run:
``./scripts/bench host_first``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _host import args, first  # noqa: E402

if __name__ == "__main__":
    a = args(__doc__, 1000, 5)
    first(a.files, a.runs)
