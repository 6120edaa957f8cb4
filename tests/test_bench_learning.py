"""benchmarks/bench_learning.py: a wrong decision table that learns from progress reports.

The launcher of the benchmark reports the TRUE rates, so every observed median must be the
true rate; the hand-picked cells below are worked out from Gavel's table.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys

import pytest
from conftest import GAVEL_DIR, ROOT

from planner.estimate.observed import rate_ceiling
from planner.formats.cluster import parse_cluster
from planner.formats.jobs import Job
from planner.formats.table import JobType

spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "benchmarks" / "bench_learning.py")
assert spec is not None and spec.loader is not None
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_learning"] = bench  # dataclasses look their module up there
spec.loader.exec_module(bench)

R50_32 = JobType("ResNet-50", 32, 1)
TF_64 = JobType("Transformer", 64, 1)
LM_20 = JobType("LM", 20, 1)
R18_128 = JobType("ResNet-18", 128, 1)
# the v100 rows stay measured; ResNet-18 (128) keeps only its k80 row (1.81 steps/s there)
KEPT = {R50_32: "v100", TF_64: "v100", LM_20: "v100", R18_128: "k80"}


@pytest.fixture(scope="module")
def truth():
    return bench.true_table(GAVEL_DIR / "simulation_throughputs.csv")


@pytest.fixture(scope="module")
def runs(truth):
    """12 one-hour (on a v100) jobs, 3 of each estimated type, on 3 GPUs of each type."""
    decide = bench.cold_start_table(truth, KEPT)
    jobs = [
        Job(f"j{n}", jt, total_steps=truth.solo("v100", jt) * 3600.0)
        for n, jt in enumerate([t for t in KEPT for _ in range(3)])
    ]
    cluster = parse_cluster("3:3:3")
    out = {
        "oracle": bench.simulate(truth, truth, cluster, jobs, observed_min=3, round_s=360.0),
        "static": bench.simulate(truth, decide, cluster, jobs, observed_min=None, round_s=360.0),
        "learning": bench.simulate(truth, decide, cluster, jobs, observed_min=3, round_s=360.0),
    }
    return decide, jobs, out


def test_the_true_table_is_gavels_solo_rows_on_three_types(truth):
    assert truth.worker_types == ["k80", "p100", "v100"]
    assert len(truth.rows) == 26 * 3 and not truth.has_pairs()
    assert truth.solo("k80", R18_128) == pytest.approx(1.8065297880422846)  # data/gavel/simulation_throughputs.csv


def test_wrong_tables_estimate_exactly_the_cells_not_kept(truth):
    wanted = {(w, jt) for jt, kept in KEPT.items() for w in ("k80", "p100", "v100") if w != kept}
    cold = bench.cold_start_table(truth, KEPT)
    perturbed = bench.perturbed_table(truth, KEPT, random.Random(7))
    for table in (cold, perturbed):
        assert set(bench.estimated_cells(table)) == wanted
        assert len(table.rows) == len(truth.rows)
        for r in table.rows:
            cell = (r["worker_type"], JobType(r["model"], r["batch_size"], r["scale_factor"]))
            if cell not in wanted:
                assert r["throughput"] == truth.solo(*cell) and r["status"] == "ok"
    factors = [perturbed.solo(*c) / truth.solo(*c) for c in wanted]
    assert all(1 / 3 - 1e-12 <= f <= 3 + 1e-12 for f in factors) and len(set(factors)) == len(factors)


def test_a_cell_ten_times_faster_than_its_measured_cell_is_still_learnable(truth):
    # ResNet-18 (128) keeps k80 only, and runs 9.96x faster on a v100: above 3x its k80 rate, but
    # within 3x the k80 rate scaled by the largest v100/k80 ratio the table has measured.
    decide = bench.cold_start_table(truth, KEPT)
    facts = bench.table_facts(decide, truth)
    assert truth.solo("v100", R18_128) > 3 * truth.solo("k80", R18_128)
    ceiling = rate_ceiling(decide, bench.cell_key("v100", R18_128))
    assert ceiling is not None and ceiling > truth.solo("v100", R18_128)
    assert facts["unlearnable_cells"] == [] and facts["estimated_cells"] == 8


def test_every_job_finishes_no_sooner_than_its_fastest_gpu_allows(truth, runs):
    _, jobs, out = runs
    for run in out.values():
        assert run.ended and set(run.finish_s) == {j.job_id for j in jobs}
        for j in jobs:
            fastest = max(truth.solo(w, j.job_type) for w in truth.worker_types)
            assert run.finish_s[j.job_id] >= j.total_steps / fastest - 1e-6


def test_learning_replaces_cells_with_the_true_rate(truth, runs):
    decide, _, out = runs
    learning = out["learning"]
    assert len(learning.applied) >= 1
    for (w, jt), value in learning.applied.items():
        assert (w, jt) in bench.estimated_cells(decide)
        assert value == pytest.approx(truth.solo(w, jt), rel=1e-9)  # reports at the true rate
        assert bench.close_cells({(w, jt): value}, truth, [(w, jt)]) == 1
    # true rates are never refused as impossible, even 10x the measured cell's
    assert learning.rejected == 0
    timeline = [e["observed_cells"] for e in learning.timeline]
    assert timeline[0] == 0 and timeline == sorted(timeline)  # cells are learnt, never forgotten


def test_static_records_but_never_replaces_and_the_oracle_has_nothing_to_replace(runs):
    _, _, out = runs
    assert out["static"].applied == {} and any(n >= 3 for n in out["static"].reports.values())
    assert all(e["observed_cells"] == 0 for e in out["static"].timeline)
    assert out["oracle"].applied == {} and all(e["observed_cells"] == 0 for e in out["oracle"].timeline)
    assert out["oracle"].rejected == 0


def test_jobs_arrive_in_batches_with_their_v100_length(truth):
    setup = {"jobs": 10, "batches": 3, "batch_gap_h": 2.0, "hours": (0.5, 4.0)}
    jobs = bench.make_jobs(truth, setup, random.Random(1))
    # ceil(10 / 3) = 4 jobs per batch: 4 at 0 h, 4 at 2 h, 2 at 4 h
    assert [j.arrival_s for j in jobs] == [0.0] * 4 + [7200.0] * 4 + [14400.0] * 2
    for j in jobs:
        hours = j.total_steps / truth.solo("v100", j.job_type) / 3600.0
        assert 0.5 <= hours <= 4.0


def test_compact_json_keeps_strings_and_nests():
    payload = {"a": [1, 2.5, -3e-05], "names": ["x, y", "[1,\n  2]"], "rows": [[1, 2], {"k": [0.5]}]}
    text = bench.compact_json(payload)
    assert json.loads(text) == payload
    assert '"a": [1, 2.5, -3e-05]' in text and '"rows": [\n  [1, 2],\n  {\n   "k": [0.5]' in text


def test_quick_run_writes_its_results(tmp_path):
    out = tmp_path / "learning.json"
    assert bench.main(["--quick", "--out", str(out), "--no-plot"]) == 0
    data = json.loads(out.read_text())
    assert data["setup"]["jobs"] == 24 and data["setup"]["fraction"] == 0.3
    for ways in data["summary"].values():
        assert ways["static"]["all_finished"] and ways["learning"]["all_finished"]
        assert ways["static"]["estimated_cells_at_end"]["replaced"] == 0
        assert sum(ways["learning"]["estimated_cells_at_end"].values()) == 16  # 8 of 26 types x 2 cells
    oracle = data["seeds"][0]["oracle"]
    assert oracle["finished"] == 24 and math.isclose(oracle["ratio_to_oracle"], 1.0)
    assert data["seeds"][0]["oracle_observed_cells"] == 0
