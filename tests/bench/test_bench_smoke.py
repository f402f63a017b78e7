"""Small runs of the benchmarks, so they keep working; the targets live in ./scripts/bench (docs/performance.md)."""

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
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


def test_converge_is_timed_against_the_bare_set_diff():
    bench = load("bench_converge")
    out = bench.main(2_000, 1, runs=1)
    assert out["seconds"] > 0 and out["bare_setdiff_seconds"] > 0
    desired, actual = bench.data(2_000, 1)
    assert bench.bare_setdiff(desired, actual) == out["diverged"] == 20


@pytest.mark.parametrize("case", ["idle", "nocache", "first"])
def test_host_benchmarks_run_on_five_files(case, capsys):
    host = load("_host")
    getattr(host, case)(5, 2)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    # the last line is the figure and the verdict (on five files the fixed costs dominate either way)
    assert last.endswith(("MEETS", "MISSES")) and "5 File" in last


def test_peers_workload_is_one_workload_for_the_three_tools(tmp_path, capsys):
    """Without installing the peers: each tool's input is what the others' is, and Datum converges it."""
    peers = load("bench_peers")
    n = 5
    target = tmp_path / "target"
    target.mkdir()
    ansible = yaml.safe_load(peers.ansible_playbook(n, target))
    task = ansible[0]["tasks"][0]
    assert ansible[0]["gather_facts"] is False
    assert task["ansible.builtin.copy"]["content"] == peers.CONTENT
    assert task["ansible.builtin.copy"]["mode"] == "0644"
    assert task["loop"] == f"{{{{ range({n}) | list }}}}"
    deploy = peers.pyinfra_deploy(n, target)
    ast.parse(deploy)
    assert f"range({n})" in deploy and "mode='644'" in deploy and repr(peers.CONTENT) in deploy
    manifest = yaml.safe_load(peers.datum_manifest(n))["resources"]
    assert len(manifest) == n
    assert {tuple(r.values())[0]["content"] for r in manifest} == {peers.CONTENT}
    inventory = peers.workload("ansible", n, target, tmp_path / "a", tmp_path / "bin")
    assert "ansible_connection=local" in inventory.files[tmp_path / "a" / "inventory.ini"]
    assert peers.workload("pyinfra", n, target, tmp_path / "p", tmp_path / "bin").argv[1] == "@local"
    # Datum runs for real: the end state is checked, the idle pass changes nothing
    m = peers.measure("datum", n, tmp_path / "runs", tmp_path / "bin", repeat=1)
    assert m.problems == []
    assert peers.report([m]) == 0  # no peer ran: nothing to be slower than
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("peers: ")


def test_peers_end_state_check_finds_what_is_wrong(tmp_path):
    peers = load("bench_peers")
    for i in range(3):
        (tmp_path / peers.name(i)).write_text(peers.CONTENT)
        (tmp_path / peers.name(i)).chmod(0o644)
    assert peers.end_state(tmp_path, 3) == []
    (tmp_path / peers.name(1)).chmod(0o600)
    (tmp_path / peers.name(2)).write_text("other")
    (tmp_path / "stray").write_text("")
    problems = peers.end_state(tmp_path, 4)
    assert "missing f3.conf" in problems and "extra stray" in problems
    assert "f1.conf has mode 0600" in problems and "f2.conf has other content" in problems


def test_peers_default_plan_keeps_ansible_at_200():
    peers = load("bench_peers")
    assert ("ansible", 1000) not in peers.plan(None, list(peers.TOOLS))
    assert ("ansible", 200) in peers.plan(None, list(peers.TOOLS))
    assert ("ansible", 1000) in peers.plan([1000], ["ansible"])


def test_gnu_time_output_is_parsed():
    common = load("_common")
    text = (
        "\tUser time (seconds): 1.25\n\tSystem time (seconds): 0.50\n"
        "\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02.50\n\tMaximum resident set size (kbytes): 65536\n"
    )
    assert common.parse_gnu_time(text) == {"user": 1.25, "system": 0.5, "max_rss_kib": 65536, "wall": 62.5}


def test_intake_benchmark_posts_lists_and_fetches_manifests():
    bench = load("bench_intake")
    out = bench.main(hosts=20, resources=5, concurrency=2, list_runs=1, manifest_seconds=1,
                     manifest_concurrency=4, store="sqlite", pin=False)
    assert (out["reports"], out["errors"], out["listed"], out["walked"]) == (20, 0, 21, 21)
    assert out["reports_per_s"] > 0 and out["list_ms_median"] > 0
    assert out["manifest_requests"] > 0 and not out["manifest_errors"]


@pytest.mark.postgres
def test_coverage_counts_every_row_both_ways_on_both_backends():
    bench = load("bench_coverage")
    out = bench.main(3_000, runs=2, scan=True, writes=10)  # asserts the counted and the scanned totals are the rows written
    assert set(out) == {"sqlite", "postgresql"}
    assert all(counted > 0 and scanned > 0 for counted, scanned in out.values())


def bench_script(*args: str) -> dict:
    """``./scripts/bench ARGS`` as the contract spells it, on this work tree: its one JSON line of figures."""
    done = subprocess.run(
        [str(BENCH.parent / "scripts" / "bench"), *args], capture_output=True, text=True, timeout=600,
        env={**os.environ, "DATUM_BENCH_TREE": "work"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, done.stdout  # one JSON line of figures per run
    return json.loads(lines[0])


def test_propagation_benchmark_wakes_fifty_waiting_agents():
    """50 simulated agents hold their waits against a real ``datum serve``; two changes reach every one."""
    out = bench_script("propagation", "--agents", "50", "--resources", "5", "--changes", "2", "--idle", "1", "--no-pin")
    assert (out["held"], out["fetched"], out["errors"]) == (50, 50, 0)
    assert len(out["all_fetched_s"]) == 2 and all(0 < s < 30 for s in out["all_fetched_s"])
    assert out["kib_per_agent"] is not None and out["idle_cpu_core_fraction"] >= 0


def test_propagation_benchmark_over_tls_wakes_twenty_waiting_agents():
    """``--tls``: the server makes its CA, every simulated agent holds its wait over a TLS connection trusting it."""
    out = bench_script(
        "propagation", "--agents", "20", "--resources", "5", "--changes", "1", "--idle", "1", "--no-pin", "--tls"
    )
    assert out["tls"] is True and (out["held"], out["fetched"], out["errors"]) == (20, 20, 0)


def test_rollout_benchmark_takes_twenty_waiting_agents_through_every_wave_and_an_abort():
    """20 simulated agents against a real ``datum serve`` with staged rollouts: every wave's hosts answered,
    the rollout done, the aborted canary answered again."""
    out = bench_script("rollout", "--hosts", "20", "--wait", "30")
    assert (out["ready"], out["errors"], out["rollout_state"]) == (20, 0, "done")
    assert [(t["act"], t["wave"]) for t in out["transitions"]] == [("started", 0), *(("released", w) for w in (1, 2, 3))]
    assert all(t["answered"] == t["hosts"] > 0 for t in out["transitions"]), out["transitions"]
    assert out["abort_to_canary_s"] is not None and 0 <= out["abort_to_canary_s"] < 30


@pytest.mark.postgres
def test_fleet_benchmark_fills_posts_a_burst_and_reads_on_two_replicas():
    """A fleet of 40 on two replicas: every report answered, every read timed, the failed ones listed apart."""
    out = bench_script("fleet", "--hosts", "40", "--replicas", "2", "--resources", "5", "--concurrency", "4",
                       "--burst-seconds", "1", "--read-runs", "1")
    assert out["errors"] == 0 and out["intake_rps"] > 0 and out["burst_p99_ms"] > 0
    assert all(out[f"{read}_ms_median"] > 0 for read in ("list_first", "list_deep", "list_failed", "overview", "metrics"))
    assert out["metrics_series"] > 0 and len(out["server_rss_mib"]) == 2 and out["database_mib"] > 0


@pytest.mark.postgres
def test_fleet_benchmark_over_tls_on_two_replicas_sharing_one_ca():
    """``--tls``: both replicas serve HTTPS from one CA; every report and read goes over TLS trusting it."""
    out = bench_script("fleet", "--hosts", "20", "--replicas", "2", "--resources", "5", "--concurrency", "2",
                       "--burst-seconds", "1", "--read-runs", "1", "--tls")
    assert out["tls"] is True and out["errors"] == 0 and out["intake_rps"] > 0 and out["list_first_ms_median"] > 0


@pytest.mark.postgres
def test_renewals_benchmark_renews_sessions_over_tls_and_scales_the_storm():
    """Ten identities renew twice each through the agent's own Session over TLS; the server's CPU is read and the
    storm's peak minute counted."""
    out = bench_script("renewals", "--identities", "10", "--rounds", "2", "--concurrency", "2", "--fleet", "1000")
    assert out["tls"] is True and out["renewals"] == 20 and out["server_cpu_ms_per_renewal"] > 0
    assert 1000 / 18 <= out["peak_minute_renewals"] < 1000  # 30-48 min: 18 minutes of renewals, never one


def test_the_storms_peak_minute_is_counted_over_the_agents_own_renewal_window():
    bench = load("bench_renewals")
    peak = bench.peak_minute(100_000, 3600)  # the agent's 50-80% of 1 h: 18 minutes
    assert 100_000 / 18 <= peak <= 100_000 / 18 * 1.1


@pytest.mark.postgres
def test_archive_benchmark_fills_reads_and_drops_a_day():
    """50 hosts x 3 days filled in SQL, read through a real ``datum serve``, the oldest day dropped whole."""
    bench = load("bench_archive")
    out = bench.main(hosts=50, days=3, resources=5, runs=2)
    assert abs(out["passes"] - 50 * 3 * 48) <= 50  # the last 72 hours' passes, one every 30 min
    assert out["events"] == out["reports"] - 50 and 0 < out["events"] < out["passes"] // 50
    assert out["page_rows"] == 100 and out["page_ms_median"] > 0 and out["events_ms_median"] > 0
    assert out["drop_day_passes"] == 50 * 48 and out["extrapolated"] is True  # a whole day's, at once


def test_audit_benchmark_counts_a_row_per_report_as_shipped_and_none_without():
    """Both variants of ``datum serve`` take their reports; the shipped one's chain is verified whole with a row for
    each (``run`` asserts it), the baseline's has none."""
    bench = load("bench_audit")
    out = bench.main("sqlite", hosts=20, resources=5, concurrency=4, runs=1, pin=False)
    assert out["errors"] == 0 and len(out["cpu_increase per pair"]) == 1
    assert all(v > 0 for v in out["cpu_ms median (none / shipped)"])
