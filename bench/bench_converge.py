"""Benchmark: one Converge pass over 1,000,000 desired items of which 1% diverge.

Reports wall time and the memory the pass itself allocates (tracemalloc peak
above the inputs), which must grow with the diverged items, not the desired
ones. Run: ``./scripts/bench converge`` or ``python bench/bench_converge.py [N] [PERCENT]``.
"""

from __future__ import annotations

import sys
import time
import tracemalloc

from datum.core.converge import Converge, ConvergeConfig
from datum.core.memory import ItemMemory


def main(total: int = 1_000_000, percent: float = 1.0) -> dict[str, float]:
    step = max(1, int(100 / percent))
    desired = {f"item-{n:07d}": n for n in range(total)}
    actual = {k: (v if v % step else -1) for k, v in desired.items()}
    engine: Converge[int, int] = Converge(
        "item", ConvergeConfig(confirmation_ticks=1, breaker={}), describe=str, describe_actual=str
    )
    memory: dict[str, ItemMemory] = {}
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    started = time.perf_counter()
    result = engine.run(desired, actual, lambda *a: None, memory)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    diverged = result.drift
    out = {
        "desired": total,
        "diverged": diverged,
        "seconds": round(elapsed, 3),
        "pass_peak_mib": round((peak - base) / 2**20, 2),
        "bytes_per_diverged_item": round((peak - base) / max(diverged, 1)),
        "remembered_items": len(result.memory),
    }
    return out


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:]]
    n = int(args[0]) if args else 1_000_000
    pct = args[1] if len(args) > 1 else 1.0
    for key, value in main(n, pct).items():
        print(f"{key:>24}: {value}")
