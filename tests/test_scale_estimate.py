"""Missing scale factors (GPU counts the table has no row for): estimated from the job type's other
data-parallel rows by a power law per worker type (planner/estimate/scaling.py), used by the job
list and trace readers of `rota plan` and `rota jobs validate` with a warning, refused with
--strict-cells, beyond --max-scale-extrapolation, and (by default) from one measured scale factor."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.estimate.scaling import (
    DEFAULT_MAX_FACTOR,
    HOLDOUT_P90,
    ScaleOptions,
    extend_table,
    fit_power_law,
    holdout_errors,
    read_jobs_scaled,
    read_trace_scaled,
)
from planner.estimate.sensitivity import band
from planner.formats.cluster import cluster_from_dict
from planner.formats.jobs import read_jobs
from planner.formats.table import JobType, ThroughputTable, is_estimate, read_table, write_table
from planner.formats.trace import read_gavel_trace

runner = CliRunner()
GAVEL = DATA / "gavel" / "simulation_throughputs.csv"
RESNET = JobType("ResNet-50", 64, 16)  # Gavel measures ResNet-50 (batch size 64) at 1, 2, 4 and 8 GPUs


def synthetic_table(alpha: float = 0.8, t1: float = 10.0, scales=(1, 2, 4, 8)) -> ThroughputTable:
    """A job type 'net' (batch size 32) scaling exactly as t1 * k**alpha on 'gpu' (and at half that on 'slow')."""
    records = [
        {
            "worker_type": worker,
            "model": "net",
            "batch_size": 32,
            "scale_factor": k,
            "throughput": speed * t1 * k**alpha,
        }
        for worker, speed in (("gpu", 1.0), ("slow", 0.5))
        for k in scales
    ]
    return ThroughputTable.from_records(records, path="synthetic.csv")


def _cluster(
    tmp_path: Path, text: str = "worker_types:\n  v100: {gpus: 16, gpus_per_node: 8}\n  k80: {gpus: 16}\n"
) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def _jobs(tmp_path: Path, rows: list[str], name: str = "jobs.csv") -> Path:
    path = tmp_path / name
    path.write_text("job_id,model,batch_size,scale_factor,duration_s\n" + "\n".join(rows) + "\n")
    return path


# --------------------------------------------------------------------------- the fit


def test_the_fit_recovers_a_known_power_law():
    scales = [1, 2, 4, 8]
    curve = fit_power_law(scales, [10.0 * k**0.8 for k in scales])
    assert curve.alpha == pytest.approx(0.8) and math.exp(curve.log_t1) == pytest.approx(10.0)
    assert curve.residual == pytest.approx(0.0, abs=1e-12)
    assert curve.throughput(16) == pytest.approx(10.0 * 16**0.8)
    # with 5 % multiplicative noise the exponent is still close, and the residual says how noisy
    rng = np.random.default_rng(0)
    noisy = [10.0 * k**0.8 * math.exp(rng.normal(0, 0.05)) for k in scales]
    fitted = fit_power_law(scales, noisy)
    assert fitted.alpha == pytest.approx(0.8, abs=0.08) and 0 < fitted.residual < 0.1


def test_the_exponent_is_clipped_to_no_slowdown_and_no_superlinear_speedup():
    assert fit_power_law([1, 2, 4], [10.0, 25.0, 70.0]).alpha == 1.0
    flat = fit_power_law([1, 2, 4], [10.0, 9.0, 8.0])
    assert flat.alpha == 0.0 and flat.throughput(16) == pytest.approx(math.exp(np.mean(np.log([10, 9, 8]))))


def test_extend_table_estimates_the_missing_scale_factor_per_worker_type():
    table = synthetic_table()
    extended, notes = extend_table(table, [JobType("net", 32, 16)])
    jt = JobType("net", 32, 16)
    assert extended.solo("gpu", jt) == pytest.approx(10.0 * 16**0.8)
    assert extended.solo("slow", jt) == pytest.approx(5.0 * 16**0.8)
    assert len(extended) == len(table) + 2 and len(table) == 8  # the input table is not changed
    (note,) = notes
    assert note.job_type == jt and [w.worker_type for w in note.workers] == ["gpu", "slow"]
    assert (
        "estimated from its x1, x2, x4, x8 rows" in note.describe()
        and "(k^0.80 on gpu, slow; p90 error 55 %)" in note.describe()
    )


def test_estimated_rows_are_marked_with_their_method_and_band(tmp_path):
    extended, _ = extend_table(synthetic_table(), [JobType("net", 32, 16)])
    new = [r for r in extended.rows if r["scale_factor"] == 16]
    assert len(new) == 2
    for row in new:
        assert row["status"] == "estimated" and row["source"] == "estimated" and is_estimate(row)
        assert row["partner_model"] is None  # solo rows only: an estimated job type does not pack
        assert row["device_name"].startswith("estimated: power law k^0.80 from x1, x2, x4, x8")
        assert band(row) == pytest.approx(1.0 * HOLDOUT_P90)  # 16 is 2x beyond 8: the hold-out band
    # the extended table is a valid table: written and read back unchanged
    path = tmp_path / "full.csv"
    write_table(extended, path)
    back = read_table(path)
    assert back.solo("gpu", JobType("net", 32, 16)) == pytest.approx(extended.solo("gpu", JobType("net", 32, 16)))


def test_the_band_grows_with_the_reach_beyond_2x():
    extended, notes = extend_table(synthetic_table(), [JobType("net", 32, 64)])
    row = next(r for r in extended.rows if r["scale_factor"] == 64)
    assert band(row) == pytest.approx(3 * HOLDOUT_P90)  # 64 = 8 x 8: log2(8) x the 2x band
    assert notes[0].band == pytest.approx(3 * HOLDOUT_P90)


def test_never_beyond_the_stated_factor_of_the_largest_measured_scale_factor():
    table = synthetic_table()
    assert DEFAULT_MAX_FACTOR == 8
    extend_table(table, [JobType("net", 32, 64)])  # 8 x 8: the limit itself is allowed
    with pytest.raises(InputError) as caught:
        extend_table(table, [JobType("net", 32, 128)])
    text = str(caught.value)
    assert "\n" not in text and caught.value.field == "scale_factor"
    assert "cannot estimate net (batch size 32) x128" in text
    assert "x128 is 16x beyond its measured x8, more than --max-scale-extrapolation 8" in text
    extended, _ = extend_table(table, [JobType("net", 32, 128)], 16)  # a larger factor, when asked
    assert extended.solo("gpu", JobType("net", 32, 128)) > 0
    with pytest.raises(InputError, match="more than --max-scale-extrapolation 1"):
        extend_table(table, [JobType("net", 32, 16)], 1)  # 1: interpolation only
    interpolated, _ = extend_table(table, [JobType("net", 32, 3)], 1)
    assert interpolated.solo("gpu", JobType("net", 32, 3)) == pytest.approx(10.0 * 3**0.8)


def test_one_measured_scale_factor_is_refused_unless_an_efficiency_is_assumed():
    table = synthetic_table(scales=(1,))
    jt = JobType("net", 32, 4)
    with pytest.raises(InputError) as caught:
        extend_table(table, [jt])
    assert "measured at x1 only, and a scaling curve needs two scale factors" in str(caught.value)
    assert "--scale-efficiency" in str(caught.value)
    extended, (note,) = extend_table(table, [jt], efficiency=0.7)
    assert extended.solo("gpu", jt) == pytest.approx(0.7 * 4 * 10.0)
    row = next(r for r in extended.rows if r["scale_factor"] == 4 and r["worker_type"] == "gpu")
    assert "assumed 0.7 x linear scaling" in row["device_name"] and is_estimate(row)
    assert band(row) == pytest.approx(0.7 / 0.38 - 1, abs=0.01)  # how far 0.7 is from Gavel's p10 efficiency
    assert "assumed 0.7 x linear scaling (--scale-efficiency) on gpu, slow" in note.describe()
    with pytest.raises(InputError, match="more than --max-scale-extrapolation 8"):
        extend_table(table, [JobType("net", 32, 16)], efficiency=0.7)  # 16 from 1: the factor still holds


def test_a_gang_that_cannot_run_at_its_largest_measured_size_cannot_run_larger():
    records = [
        {"worker_type": "gpu", "model": "net", "batch_size": 32, "scale_factor": k, "throughput": 10.0 * k}
        for k in (1, 2)
    ] + [{"worker_type": "gpu", "model": "net", "batch_size": 32, "scale_factor": 4, "status": "oom"}]
    extended, (note,) = extend_table(ThroughputTable.from_records(records), [JobType("net", 32, 8)])
    row = next(r for r in extended.rows if r["scale_factor"] == 8)
    assert (row["status"], row["source"], row["throughput"]) == ("failed", "estimated", 0.0)
    assert extended.has("gpu", JobType("net", 32, 8)) and extended.solo("gpu", JobType("net", 32, 8)) == 0.0
    assert "cannot run (x4: oom)" in note.describe()


def test_bad_options_are_refused():
    with pytest.raises(InputError, match="--max-scale-extrapolation"):
        extend_table(synthetic_table(), [JobType("net", 32, 16)], 0.5)
    with pytest.raises(InputError, match="--scale-efficiency"):
        extend_table(synthetic_table(), [JobType("net", 32, 16)], efficiency=1.5)


# --------------------------------------------------------------------------- accuracy on Gavel's table


def test_holdout_of_gavels_8_gpu_rows_matches_the_documented_error():
    # docs/estimation.md, "Missing scale factors": the 8-GPU rows of k80, p100 and v100 predicted from 1, 2, 4
    table = read_table(GAVEL)
    errors = holdout_errors(table, (1, 2, 4), 8, ["k80", "p100", "v100"])
    assert len(errors) == 56
    assert float(np.median(errors)) == pytest.approx(0.140, abs=0.001)
    assert float(np.percentile(errors, 90)) == pytest.approx(0.478, abs=0.001)
    pooled = np.concatenate(
        [
            holdout_errors(table, train, target, ["k80", "p100", "v100"])
            for train, target in (((1, 2, 4), 8), ((2, 4), 8), ((1, 2), 4))
        ]
    )
    assert float(np.percentile(pooled, 90)) == pytest.approx(HOLDOUT_P90, abs=0.005)  # the stated band


# --------------------------------------------------------------------------- job lists and traces


def test_a_job_list_needing_a_missing_scale_factor_used_to_be_refused_and_now_reads(tmp_path):
    table = read_table(GAVEL)
    cluster = cluster_from_dict({"worker_types": {"v100": {"gpus": 16}, "k80": {"gpus": 16}}})
    jobs = _jobs(tmp_path, ["big,ResNet-50,64,16,3600", "big2,ResNet-50,64,16,7200", "small,ResNet-50,64,1,3600"])
    with pytest.raises(InputError, match=r"no row for 'ResNet-50 \(batch size 64\) x16'"):
        read_jobs(jobs, table=table, cluster=cluster)  # the plain reader (and rota plan before) refuses it
    read = read_jobs_scaled(jobs, table=table, cluster=cluster)
    assert [j.job_id for j in read.jobs] == ["big", "big2", "small"]
    assert read.jobs[0].job_type == RESNET and read.table.solo("v100", RESNET) > read.table.solo(
        "v100", JobType("ResNet-50", 64, 8)
    )
    # only the cluster's worker types get rows, and the table given is not changed
    assert {r["worker_type"] for r in read.table.rows if r["scale_factor"] == 16} == {"k80", "v100"}
    assert not table.has("v100", RESNET)
    (warning,) = read.warnings  # once per job type, with its job count
    assert warning.startswith("ResNet-50 (batch size 64) x16 (2 jobs) has no row in the table: estimated from its x1")
    assert "p90 error 55 %" in warning and "rota profile --scale-factors 16" in warning
    assert read.to_json()[0]["jobs"] == 2 and set(read.to_json()[0]["worker_types"]) == {"k80", "v100"}


def test_every_error_of_the_list_at_once_with_why_a_type_was_not_estimated(tmp_path):
    table = read_table(GAVEL)
    cluster = cluster_from_dict({"worker_types": {"v100": {"gpus": 128}}})
    jobs = _jobs(
        tmp_path,
        ["a,ResNet-50,64,16,3600", "b,ResNet-50,64,128,3600", "a,LM,20,1,3600", "c,A3C,,4,3600", "d,Unknown,1,1,5"],
    )
    with pytest.raises(InputError) as caught:
        read_jobs_scaled(jobs, table=table, cluster=cluster)
    lines = str(caught.value).splitlines()
    assert lines[0].endswith("4 problems in the job list:")
    assert "row 2: field 'scale_factor'" in lines[1] and "x128 is 16x beyond its measured x8" in lines[1]
    assert "row 3: field 'job_id': duplicate job id 'a'" in lines[2]
    assert "row 4: field 'scale_factor'" in lines[3] and "measured at x1 only" in lines[3]
    assert "row 5: field 'model'" in lines[4]


def test_a_gavel_trace_with_a_missing_scale_factor(tmp_path):
    line = "{label}\tpython main.py\t.\t--steps\t1\t1000\t{scale}\t1\t-1.000000\t{arrival}\n"
    path = tmp_path / "philly.trace"
    path.write_text(
        line.format(label="ResNet-50 (batch size 64)", scale=1, arrival=0)
        + line.format(label="ResNet-50 (batch size 64)", scale=16, arrival=10)
        + line.format(label="LM (batch size 20)", scale=2, arrival=20)
    )
    table = read_table(GAVEL)
    cluster = cluster_from_dict({"worker_types": {"v100": {"gpus": 16}, "p100": {"gpus": 16}}})
    with pytest.raises(InputError) as caught:
        read_gavel_trace(path, table, cluster)
    assert caught.value.field == "scale_factor" and caught.value.row == 2
    assert "(it has scale factors 1, 2, 4, 8)" in str(caught.value)
    read = read_trace_scaled(path, table, cluster)
    assert [(j.job_id, j.job_type.scale_factor) for j in read.jobs] == [("0", 1), ("1", 16), ("2", 2)]  # Gavel's ids
    assert len(read.estimates) == 1 and read.estimates[0].jobs == 1
    with pytest.raises(InputError, match="not estimated: --strict-cells"):
        read_trace_scaled(path, table, cluster, ScaleOptions(strict=True))


# --------------------------------------------------------------------------- the commands


def test_rota_plan_plans_a_16_gpu_job_of_a_model_measured_at_1_2_4_8_with_a_warning(tmp_path):
    jobs = _jobs(tmp_path, ["big,ResNet-50,64,16,3600", "small,ResNet-18,64,1,3600"])
    out = tmp_path / "out" / "schedule.json"
    args = ["plan", "--table", str(GAVEL), "--jobs", str(jobs), "--cluster", str(_cluster(tmp_path)), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stderr.count("warning: ResNet-50 (batch size 64) x16 (1 job) has no row in the table: estimated") == 1
    side = tmp_path / "out" / "schedule.table.csv"  # the table planned with, named by the schedule
    assert side.exists() and f"note: planned with {side}" in result.stdout
    schedule = json.loads(out.read_text())
    assert schedule["inputs"]["table"]["path"] == str(side)
    assert schedule["jobs"]["big"]["scale_factor"] == 16 and schedule["jobs"]["big"]["expected_finish_s"] > 0
    assert read_table(side).has("v100", RESNET)
    report = runner.invoke(app, [*args, "--json"])
    assert report.exit_code == 0, report.output
    summary = json.loads(report.stdout)
    assert summary["planned_table"] == str(side) and summary["estimated_scale_factors"][0]["scale_factor"] == 16
    assert any(w.startswith("ResNet-50 (batch size 64) x16 (1 job)") for w in summary["warnings"])


def test_rota_plan_with_strict_cells_refuses_it(tmp_path):
    jobs = _jobs(tmp_path, ["big,ResNet-50,64,16,3600"])
    out = tmp_path / "schedule.json"
    args = ["plan", "-t", str(GAVEL), "-j", str(jobs), "-c", str(_cluster(tmp_path)), "-o", str(out), "--strict-cells"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and not out.exists() and not (tmp_path / "schedule.table.csv").exists()
    assert "row 1: field 'scale_factor': no row for 'ResNet-50 (batch size 64) x16'" in result.stderr
    assert (
        "not estimated: --strict-cells (without it, it would be estimated from its x1, x2, x4, x8 rows)"
        in result.stderr
    )


def test_rota_plan_and_a_type_measured_at_one_gpu_only(tmp_path):
    jobs = _jobs(tmp_path, ["rl,A3C,,4,3600"])
    args = ["plan", "-t", str(GAVEL), "-j", str(jobs), "-c", str(_cluster(tmp_path)), "-o", str(tmp_path / "s.json")]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2
    assert "no row for 'A3C x4'" in refused.stderr and "(it has scale factors 1)" in refused.stderr
    assert "measured at x1 only, and a scaling curve needs two scale factors (--scale-efficiency E" in refused.stderr
    assumed = runner.invoke(app, [*args, "--scale-efficiency", "0.7", "--json"])
    assert assumed.exit_code == 0, assumed.output
    (estimate,) = json.loads(assumed.stdout)["estimated_scale_factors"]
    v100 = estimate["worker_types"]["v100"]
    assert v100["throughput"] == pytest.approx(0.7 * 4 * read_table(GAVEL).solo("v100", JobType("A3C", None, 1)))
    assert v100["from"] == "assumed 0.7 x linear scaling (--scale-efficiency)"
    bad = runner.invoke(app, [*args, "--scale-efficiency", "0"])
    assert bad.exit_code == 2 and "--scale-efficiency" in bad.stderr


def test_rota_jobs_validate_warns_and_says_it_in_json(tmp_path):
    jobs = _jobs(tmp_path, ["big,ResNet-50,64,16,3600", "big2,ResNet-50,64,16,3600", "huge,ResNet-50,64,16,3600"])
    cluster = _cluster(tmp_path)
    base = ["jobs", "validate", str(jobs), "--table", str(GAVEL), "--cluster", str(cluster)]
    result = runner.invoke(app, base)
    assert result.exit_code == 0, result.output
    assert (
        f"warning: {jobs}: rows 1, 2, 3: field 'scale_factor': ResNet-50 (batch size 64) x16 has no row"
        in result.stderr
    )
    assert "fix: measure it to replace the estimate (rota profile --scale-factors 16)" in result.stderr
    report = json.loads(runner.invoke(app, [*base, "--json"]).stdout)
    assert report["valid"] and report["estimated_scale_factors"][0]["jobs"] == 3
    strict = runner.invoke(app, [*base, "--strict-cells"])
    assert strict.exit_code == 2 and "not estimated: --strict-cells" in strict.stderr
    capped = runner.invoke(app, [*base, "--max-scale-extrapolation", "1.5"])
    assert capped.exit_code == 2 and "more than --max-scale-extrapolation 1.5" in capped.stderr


def test_plan_next_warns_on_the_call_that_adds_the_job_and_keeps_planning_it(tmp_path):
    jobs = _jobs(tmp_path, ["big,ResNet-50,64,16,3600", "small,ResNet-18,64,1,3600"])
    state = tmp_path / "state.json"
    args = ["plan-next", "--state", str(state), "-t", str(GAVEL), "-j", str(jobs), "-c", str(_cluster(tmp_path))]
    first = runner.invoke(app, [*args, "--out", str(tmp_path / "r1.json"), "--json"])
    assert first.exit_code == 0, first.output
    assert any(
        w.startswith("ResNet-50 (batch size 64) x16 (1 job) has no row") for w in json.loads(first.stdout)["warnings"]
    )
    assert (tmp_path / "state.table.csv").exists()
    # the state names the table with the estimated rows; a later call without --table plans from it, silently
    second = runner.invoke(app, ["plan-next", "--state", str(state), "--out", str(tmp_path / "r2.json"), "--json"])
    assert second.exit_code == 0, second.output
    assert not any("x16" in w for w in json.loads(second.stdout)["warnings"])
    # and with the original table again: the state's job type is estimated again, without a warning
    third = runner.invoke(
        app, ["plan-next", "--state", str(state), "-t", str(GAVEL), "--out", str(tmp_path / "r3.json"), "--json"]
    )
    assert third.exit_code == 0, third.output
    assert not any("x16" in w for w in json.loads(third.stdout)["warnings"])
    rounds = json.loads((tmp_path / "r3.json").read_text())["rounds"]
    assert any("big" in a["jobs"] for r in rounds for a in r["assignments"]) or rounds == []
