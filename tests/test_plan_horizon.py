"""rota plan --rounds K / --horizon: plan only what was asked, estimate the rest from the policy run forward."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.cli.plan import SUMMARY_JOBS, parse_duration
from planner.errors import InputError
from planner.formats.cluster import cluster_from_dict
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.modes.plan import estimate_finishes
from planner.policies import make_policy
from planner.rounds.engine import Engine, EngineConfig

runner = CliRunner()
DEMO = ["--table", str(DATA / "throughputs.csv"), "--jobs", str(DATA / "jobs.csv")]
DEMO += ["--cluster", str(DATA / "cluster.yaml")]


def _plan(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    result = runner.invoke(app, ["plan", *DEMO, "--out", str(out), *extra])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), result.output


def test_k_rounds_are_the_full_plans_first_k_and_the_rest_is_estimated(tmp_path):
    full, _ = _plan(tmp_path, "full")
    short, printed = _plan(tmp_path, "short", "--rounds", "4")
    assert short["rounds"] == full["rounds"][:4]
    assert short["rounds_total"] == 4
    end = short["rounds"][-1]["end_s"]
    for jid, info in short["jobs"].items():
        exact = full["jobs"][jid]["expected_finish_s"]
        if info.get("finish_estimated"):  # planner.estimate.finish: close to the full plan's
            assert info["expected_finish_s"] > end and info["expected_finish_s"] == pytest.approx(exact, rel=0.25)
        else:  # finished inside the planned rounds: the planned finish itself
            assert info["expected_finish_s"] == exact <= end
    assert any(info.get("finish_estimated") for info in short["jobs"].values())
    assert short["makespan_s"] == max(info["expected_finish_s"] for info in short["jobs"].values())
    assert "~" in printed and "estimated: rounds simulated on" in printed


def test_until_done_keeps_exact_finishes(tmp_path):
    full, _ = _plan(tmp_path, "full")
    exact, _ = _plan(tmp_path, "exact", "--rounds", "4", "--until-done")
    assert exact["rounds"] == full["rounds"][:4] and exact["rounds_total"] == full["rounds_total"]
    assert exact["jobs"] == full["jobs"]


def test_horizon_is_rounds_of_the_round_length(tmp_path):
    by_horizon, _ = _plan(tmp_path, "h", "--horizon", "1h")  # 3600 s / 360 s
    assert len(by_horizon["rounds"]) == 10
    by_minutes, _ = _plan(tmp_path, "m", "--horizon", "25min", "--round-length", "600")
    assert len(by_minutes["rounds"]) == 3
    both = runner.invoke(app, ["plan", *DEMO, "--rounds", "2", "--horizon", "1h", "--out", str(tmp_path / "x.json")])
    assert both.exit_code == 2 and "not both" in both.output


def test_parse_duration():
    assert parse_duration("2h", "--horizon") == 7200
    assert parse_duration("1.5h", "--horizon") == 5400
    assert parse_duration("90min", "--horizon") == parse_duration("90m", "--horizon") == 5400
    assert parse_duration("3600s", "--horizon") == parse_duration("3600", "--horizon") == 3600
    for bad in ("", "h", "5ms", "-1h", "0", "nanh", "2 days"):
        with pytest.raises(InputError):
            parse_duration(bad, "--horizon")


def test_one_job_alone_is_estimated_exactly():
    """With nothing to share with, the allocation never changes: the estimate is the plan's finish."""
    jt = JobType("M", 8, 1)
    table = ThroughputTable.from_records(
        [{"worker_type": "g", "model": "M", "batch_size": 8, "scale_factor": 1, "throughput": 3.0, "status": "ok"}]
    )
    cluster = cluster_from_dict({"worker_types": {"g": {"gpus": 1}}})
    job = Job("only", jt, total_steps=3.0 * 3600 * 2.5)  # 2.5 h alone
    engine = Engine(table, cluster, make_policy("max_min_fairness_perf"), EngineConfig(max_rounds=3), [job])
    engine.run()
    estimate = estimate_finishes(engine)["only"]
    full = Engine(table, cluster, make_policy("max_min_fairness_perf"), EngineConfig(), [job]).run()
    assert estimate == pytest.approx(full.outcomes["only"].finish_s, rel=1e-9)
    assert estimate == pytest.approx(2.5 * 3600, rel=1e-9)


def test_summary_lists_the_last_finishing_jobs_only(tmp_path):
    jobs = tmp_path / "many.csv"
    lines = ["job_id,model,batch_size,scale_factor,duration_s"]
    lines += [f"j{i:02d},ResNet-18,64,1,{600 * (i + 1)}" for i in range(SUMMARY_JOBS + 5)]
    jobs.write_text("\n".join(lines) + "\n")
    args = ["plan", "--table", str(DATA / "throughputs.csv"), "--jobs", str(jobs)]
    result = runner.invoke(app, [*args, "--cluster", str(DATA / "cluster.yaml"), "--out", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    assert f"the {SUMMARY_JOBS} jobs finishing last, of {SUMMARY_JOBS + 5}" in result.output
    assert "j00" not in result.output and f"j{SUMMARY_JOBS + 4:02d}" in result.output
    assert len(json.loads((tmp_path / "s.json").read_text())["jobs"]) == SUMMARY_JOBS + 5
