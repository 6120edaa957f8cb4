"""--pairs reference:K and budget:SECONDS: which pairs get measured, and the estimate
that fills the rest (no torch needed)."""

from __future__ import annotations

import pytest

from planner.errors import InputError
from planner.formats.table import ThroughputTable, read_table, write_table
from profiler.cli import _estimate_rest
from profiler.devices import cpu_device
from profiler.plan import PairSample, Selection, build_plan, estimate_s, parse_pairs, reference_jobs, selected_jobs


def pair_tasks(tasks):
    return [t for t in tasks if len(t.jobs) == 2]


def test_parse_sampled_pairs():
    assert parse_pairs("reference:3") == PairSample("reference", 3.0)
    assert parse_pairs("budget:600") == PairSample("budget", 600.0)
    for bad in ("reference:x", "budget:-1", "reference:0"):
        with pytest.raises(InputError, match="--pairs"):
            parse_pairs(bad)


def test_references_cover_the_models_before_repeating_one():
    jobs = selected_jobs(Selection(models=("ResNet-18", "LM", "A3C")))
    refs = reference_jobs(jobs, 3)
    assert [r.model for r in refs] == ["ResNet-18", "LM", "A3C"]
    assert refs[0].batch_size == 64  # the middle of 16..256
    assert len(reference_jobs(jobs, 100)) == len(jobs)


def test_reference_mode_pairs_every_job_with_each_reference():
    selection = Selection(models=("ResNet-18", "LM"), pairs=PairSample("reference", 2.0))
    jobs = selected_jobs(selection)
    pairs = pair_tasks(build_plan([cpu_device()], selection))
    refs = set(reference_jobs(jobs, 2))
    assert all(set(t.jobs) & refs for t in pairs)
    # every job type meets every reference exactly once (unordered, self-pairs of references included)
    n, k = len(jobs), 2
    assert len(pairs) == n * k - k * (k - 1) // 2
    full = pair_tasks(build_plan([cpu_device()], Selection(models=("ResNet-18", "LM"), pairs="all")))
    assert len(pairs) < len(full)


def test_budget_mode_takes_the_most_references_that_fit():
    device = cpu_device()
    base = dict(models=("ResNet-18", "LM"), budget_s=5.0)
    one = pair_tasks(build_plan([device], Selection(pairs=PairSample("reference", 1.0), **base)))
    two = pair_tasks(build_plan([device], Selection(pairs=PairSample("reference", 2.0), **base)))
    budget = estimate_s(two, 5.0) + 1.0
    chosen = pair_tasks(build_plan([device], Selection(pairs=PairSample("budget", budget), **base)))
    assert len(chosen) >= len(two) and estimate_s(chosen, 5.0) <= budget
    with pytest.raises(InputError, match="one reference"):
        build_plan([device], Selection(pairs=PairSample("budget", estimate_s(one, 5.0) / 2), **base))


def test_estimate_rest_fills_the_unmeasured_pairs(tmp_path):
    rows = []
    solo = {"A": 10.0, "B": 20.0, "C": 5.0, "D": 8.0}
    for model, rate in solo.items():
        rows.append({"worker_type": "cpu", "model": model, "scale_factor": 1, "throughput": rate, "source": "measured"})
    # each job type measured against reference A only (and A with itself)
    for model in solo:
        rows.append(
            {
                "worker_type": "cpu",
                "model": model,
                "scale_factor": 1,
                "partner_model": "A",
                "throughput": solo[model] * 0.7,
                "source": "measured",
            }
        )
        if model != "A":
            rows.append(
                {
                    "worker_type": "cpu",
                    "model": "A",
                    "scale_factor": 1,
                    "partner_model": model,
                    "throughput": solo["A"] * 0.6,
                    "source": "measured",
                }
            )
    measured = tmp_path / "t.csv"
    write_table(ThroughputTable.from_records(rows), measured)

    class Quiet:
        def print(self, *args, **kwargs):
            pass

    target = _estimate_rest(Quiet(), measured)
    full = read_table(target)
    estimated = [r for r in full.rows if r["status"] == "estimated"]
    assert estimated and all(r["source"] == "estimated" for r in estimated)
    assert {(r["model"], r["partner_model"]) for r in estimated} >= {("B", "C"), ("C", "B"), ("B", "B")}
    for r in estimated:
        assert 0 < r["throughput"] <= solo[r["model"]] + 1e-9
    assert len(read_table(measured)) == len(rows)  # the measured table is untouched
