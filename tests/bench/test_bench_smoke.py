"""Small runs of the benchmarks, so they keep working; the targets live in ./scripts/bench."""

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_converge_memory_follows_diverged_items_not_desired_ones():
    bench = load("bench_converge")
    one = bench.main(20_000, 1)
    five = bench.main(20_000, 5)
    assert (one["diverged"], one["remembered_items"]) == (200, 200)
    assert five["remembered_items"] == 1000
    # five times the diverged items costs about five times the memory; the desired count did not change
    assert 3 < five["pass_peak_mib"] / one["pass_peak_mib"] < 8
