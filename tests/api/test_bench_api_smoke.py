"""A tiny run of bench/bench_api.py, so the benchmark keeps working; the targets are measured by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_api.py"


def test_bench_api_runs_small():
    spec = importlib.util.spec_from_file_location("bench_api", BENCH)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(items=300, cap=50, requests=400, concurrency=8, tool="python", rounds=2)
    assert (result["drift"], result["items"], result["dropped"], result["driftCap"]) == (300, 50, 250, 50)
    assert result["errors"] == 0 and result["requests"] >= 400
    assert result["p99_ms_worst_round"] > 0
