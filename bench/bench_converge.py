"""Benchmark: one Converge pass over 1,000,000 desired items of which 1% diverge, against a bare dict set-diff.

Target (issue 14): the pass takes at most the time of a bare set-diff of the
same two dicts (``desired.keys() - actual.keys()``, the reverse, and the keys
in both whose values differ), and the memory the pass allocates (tracemalloc
peak above the inputs) follows the diverged items, not the desired ones.
Times are medians of ``--runs`` runs without tracemalloc; memory comes from
one more run with it. Run: ``./scripts/bench converge`` or
``python bench/bench_converge.py [--items N] [--percent P] [--runs R]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

from datum.core.converge import Converge, ConvergeConfig
from datum.core.memory import ItemMemory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, verdict  # noqa: E402


def data(total: int, percent: float) -> tuple[dict[str, int], dict[str, int]]:
    step = max(1, int(100 / percent))
    desired = {f"item-{n:07d}": n for n in range(total)}
    actual = {k: (v if v % step else -1) for k, v in desired.items()}
    return desired, actual


def engine() -> Converge[int, int]:
    return Converge("item", ConvergeConfig(confirmation_ticks=1, breaker={}), describe=str, describe_actual=str)


def bare_setdiff(desired: dict[str, int], actual: dict[str, int]) -> int:
    restore = desired.keys() - actual.keys()
    reap = actual.keys() - desired.keys()
    align = [k for k in desired.keys() & actual.keys() if desired[k] != actual[k]]
    return len(restore) + len(reap) + len(align)


def timed(fn, *args) -> float:  # type: ignore[no-untyped-def]
    gc.collect()
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def main(total: int = 1_000_000, percent: float = 1.0, runs: int = 0) -> dict[str, float]:
    desired, actual = data(total, percent)
    memory: dict[str, ItemMemory] = {}
    noop = lambda *a: None  # noqa: E731
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    result = engine().run(desired, actual, noop, memory)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out: dict[str, float] = {
        "desired": total,
        "diverged": result.drift,
        "pass_peak_mib": round((peak - base) / 2**20, 2),
        "bytes_per_diverged_item": round((peak - base) / max(result.drift, 1)),
        "remembered_items": len(result.memory),
    }
    if runs:
        converge, bare = [], []
        for _ in range(runs):  # interleaved, so both see the same machine
            converge.append(timed(engine().run, desired, actual, noop, memory))
            bare.append(timed(bare_setdiff, desired, actual))
        # Unrounded: a small run's bare set-diff takes under half a millisecond, which three decimals made 0
        # (and the ratio a division by zero); the line printed rounds.
        seconds, bare_seconds = statistics.median(converge), statistics.median(bare)
        out["seconds"] = seconds
        out["bare_setdiff_seconds"] = bare_seconds
        out["ratio"] = round(seconds / bare_seconds, 2)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--percent", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    print(header(f"Converge, {a.items} items, {a.percent:g}% diverged"))
    res = main(a.items, a.percent, max(1, a.runs))
    for key, value in res.items():
        print(f"{key:>24}: {value}")
    ok = res["ratio"] <= 1.0
    print(f"Converge {a.items} items {a.percent:g}% diverged: {res['seconds']:.3f} s, {res['ratio']:.2f}x the bare "
          f"set-diff ({res['bare_setdiff_seconds']:.3f} s), {res['pass_peak_mib']} MiB for {res['diverged']} diverged "
          f"items, load {os.getloadavg()[0]:.2f}; target at most 1x: {verdict(ok)}")
