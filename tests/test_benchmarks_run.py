"""The benchmarks that simulate still run: they patch planner internals (a policy factory,
the solver's loader), so a rename inside the planner can break them without any other test
noticing. Each runs its smallest configuration; what is checked is that it finishes and that
its results say what ran, never a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(name: str, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_bench_simulate_runs_its_main_point(tmp_path):
    out = tmp_path / "simulate.json"
    run_benchmark("bench_simulate.py", "--quick", "--gavel-samples", "1", "--out", str(out))
    (point,) = json.loads(out.read_text())["points"]
    assert point["status"] == "ok" and point["jobs_finished"] == 300
    assert point["highs_runs"] > 0 and point["gavel_recorded_sim_s"] > 0  # the recorder saw the solves
    # timed with the compiled round loop (numba is a test dependency), checked against the Python loop
    assert point["round_loop"] == "auto" and point["rounds_compiled"] == point["rounds"]
    assert point["python_loop"]["identical"] is True and point["python_loop"]["wall_s"] > 0
    # the default fast path (compiled interior point, --reuse-solves 3) ran side by side: the same
    # jobs, the same LP optima, its deltas computed; no LP of it went to HiGHS
    candidate = point["candidate"]
    assert candidate["solver_method"] == "compiled-ipm" and candidate["reuse_solves"] == 3
    assert candidate["jobs_finished"] == 300 and candidate["resolves_reused"] > 0
    assert candidate["highs_runs"] == 0 and candidate["speedup_ceiling_same_answers"] is None
    assert 0 < candidate["max_objective_gap"] < 1e-6  # its own optima, not HiGHS's
    # Issue #31's bounds hold for it on this point (recorded: -0.1 % average JCT), and the
    # benchmark says so: checked here from the two runs' own results.
    jct = candidate["avg_jct_h"] / point["avg_jct_h"] - 1
    span = candidate["makespan_h"] / point["makespan_h"] - 1
    assert abs(jct) <= 0.005 and abs(span) <= 0.01, (jct, span)
    assert candidate["within_bounds"] is True


def test_bench_solver_variants_runs_its_quick_point(tmp_path):
    out = tmp_path / "variants.json"
    run_benchmark("bench_solver_variants.py", "--quick", "--variants", "ipm-nopresolve", "--out", str(out))
    (point,) = json.loads(out.read_text())["points"]
    assert point["point"]["jobs"] == 100 and point["reference"]["highs_run_floor_s"] > 0
    variant = point["ipm-nopresolve"]
    # the variant really ran without presolve: its LPs reach the reference's optima
    assert 0 < variant["highs_run_floor_s"] and variant["max_objective_gap"] < 1e-6
    assert variant["within_bounds"] is True


def test_bench_sweep_throughput_runs_its_quick_sweep(tmp_path):
    out = tmp_path / "sweep.json"
    run_benchmark("bench_sweep_throughput.py", "--quick", "--no-ray", "--out", str(out))
    result = json.loads(out.read_text())
    assert [(r["backend"], r["workers"]) for r in result["rows"]] == [("process pool", 1), ("process pool", 2)]
    assert all(r["sims_per_minute"] > 0 for r in result["rows"])


def test_bench_reuse_classes_runs_and_counts_what_it_skipped(tmp_path):
    out = tmp_path / "reuse.json"
    run_benchmark("bench_reuse_classes.py", "--quick", "--variants", "any,row1,row1-scaled", "--out", str(out))
    (point,) = json.loads(out.read_text())["points"]
    assert point["point"]["jobs"] == 100
    any_, row1, scaled = (point["variants"][v] for v in ("any", "row1", "row1-scaled"))
    # the wrapper really skipped solves, and a limit on reuses in a row skips no more than none
    assert 0 < row1["skipped"] <= any_["skipped"] < any_["solved"] + any_["skipped"]
    # scaling the shares of grown classes changes which schedule comes out, not when it reuses
    assert scaled["skipped"] > 0 and scaled["avg_jct_change"] != row1["avg_jct_change"]
    for v in (any_, row1, scaled):  # the reported verdict follows from the reported changes
        assert v["within_bounds"] == (abs(v["avg_jct_change"]) <= 0.005 and abs(v["makespan_change"]) <= 0.01)
