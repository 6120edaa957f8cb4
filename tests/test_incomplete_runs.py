"""Runs that end early are reported as incomplete: never a JCT that looks like the answer.

A saturated run, one stopped by --max-hours and one interrupted keep what they measured, but
their average JCT is only given as a lower bound, and that bound must hold against the full run.
Also: replayed traces' offered load, their jobs.csv (durations, entities, whole steps), and
the GPU time a job shorter than a round leaves idle.
"""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.formats.cluster import cluster_from_dict
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.modes.generator import GeneratorConfig, JobGenerator
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.modes.sweep import summary_rows

TABLE = "data/gavel/simulation_throughputs.csv"


@pytest.fixture(scope="module")
def gavel_table():
    from planner.formats.inputs import load_table

    return load_table(TABLE)


@pytest.fixture(scope="module")
def busy_trace(gavel_table):
    """300 jobs arriving faster than 3 GPUs serve them: a backlog that a cap of 40 calls saturated."""
    return JobGenerator(gavel_table, GeneratorConfig(seed=1, rate_per_hour=3.0)).take(120)


def small_cluster():
    return cluster_from_dict({"worker_types": {"v100": 1, "p100": 1, "k80": 1}})


def test_saturated_run_gives_a_bound_not_an_answer(gavel_table, busy_trace):
    cluster = small_cluster()
    capped = run_simulation(
        gavel_table, cluster, Workload(jobs=list(busy_trace)), SimulationConfig(policy="fifo_perf", max_active_jobs=40)
    )
    assert capped.status == "saturated"
    assert "jct_s" not in capped.metrics  # before: the finished jobs' mean, reported as the result
    censored = capped.metrics["censored_jct"]
    assert censored["finished"] < len(busy_trace)
    assert censored["finished"] + censored["unfinished"] + censored["not_arrived"] == len(busy_trace)
    full = run_simulation(
        gavel_table,
        cluster,
        Workload(jobs=list(busy_trace)),
        SimulationConfig(policy="fifo_perf", max_active_jobs=10_000),
    )
    assert full.status == "ok"
    answer = full.metrics["jct_s"]["mean"]
    assert censored["mean_lower_bound_s"] <= answer  # a bound that holds
    assert censored["finished_only_s"]["mean"] < answer  # what used to be printed: biased low
    assert censored["mean_lower_bound_s"] > censored["finished_only_s"]["mean"]


def test_time_limit_and_interrupt_are_incomplete(gavel_table, busy_trace):
    cluster = small_cluster()
    limited = run_simulation(
        gavel_table, cluster, Workload(jobs=list(busy_trace)), SimulationConfig(policy="fifo_perf", max_time_s=7200)
    )
    assert limited.status == "time_limit" and "jct_s" not in limited.metrics
    assert limited.metrics["makespan_s"] <= 7200 + 360 + 1e-6

    calls = []

    def stop(now, done, total, active, rounds):
        calls.append(rounds)
        if len(calls) == 2:
            raise KeyboardInterrupt

    interrupted = run_simulation(
        gavel_table,
        cluster,
        Workload(jobs=list(busy_trace)),
        SimulationConfig(policy="fifo_perf", max_active_jobs=10_000),
        progress=stop,
        stop_on_interrupt=True,
    )
    assert interrupted.status == "interrupted" and "jct_s" not in interrupted.metrics
    assert interrupted.metrics["censored_jct"]["mean_lower_bound_s"] > 0
    calls.clear()
    with pytest.raises(KeyboardInterrupt):  # a sweep handles Ctrl-C itself: not swallowed by default
        run_simulation(
            gavel_table,
            cluster,
            Workload(jobs=list(busy_trace)),
            SimulationConfig(policy="fifo_perf", max_active_jobs=10_000),
            progress=stop,
        )


def test_cli_saturated_run_exits_3_and_prints_no_average(tmp_path, gavel_table, busy_trace):
    from planner.formats.trace import write_trace

    trace = tmp_path / "busy.csv"
    write_trace(busy_trace, trace)
    out = tmp_path / "sim"
    args = ["simulate", "-t", TABLE, "-c", "1:1:1", "--trace", str(trace), "--policy", "fifo_perf"]
    result = CliRunner().invoke(app, [*args, "--max-active", "40", "-o", str(out)], terminal_width=200)
    assert result.exit_code == 3, result.output
    assert "incomplete, saturated" in result.output
    assert "average JCT, lower bound" in result.output
    assert "│ average JCT  " not in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and "jct_s" not in summary["metrics"]
    assert summary["metrics"]["offered_load"] > 1  # a replayed trace's load (before: 0.0)
    assert "offers" in result.output  # and the warning that says so up front

    full = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "full")], terminal_width=200)
    assert full.exit_code == 0, full.output
    assert json.loads((tmp_path / "full" / "summary.json").read_text())["complete"] is True

    limited = CliRunner().invoke(app, [*args, "--max-hours", "2", "-o", str(tmp_path / "lim")])
    assert limited.exit_code == 3 and "time_limit" in limited.output


def test_replayed_jobs_csv_has_durations_entities_and_whole_steps(tmp_path):
    table = ThroughputTable.from_records([{"worker_type": "g", "model": "A", "scale_factor": 1, "throughput": 2.0}])
    cluster = cluster_from_dict({"worker_types": {"g": 2}})
    a = JobType("A", None, 1)
    jobs = [Job("0", a, 720.0, entity="vision"), Job("1", a, 1440.0, arrival_s=100.0, entity="nlp")]
    trace = tmp_path / "jobs.csv"
    from planner.formats.trace import write_trace

    write_trace(jobs, trace)
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text("worker_types:\n  g: {gpus: 2}\n")
    table_file = tmp_path / "t.csv"
    table_file.write_text("worker_type,model,scale_factor,throughput\ng,A,1,2.0\n")
    out = tmp_path / "sim"
    result = CliRunner().invoke(
        app,
        ["simulate", "-t", str(table_file), "-c", str(cluster_file), "--trace", str(trace), "-o", str(out)],
    )
    assert result.exit_code == 0, result.output
    with (out / "jobs.csv").open() as f:
        rows = {r["job_id"]: r for r in csv.DictReader(f)}
    assert rows["0"]["entity"] == "vision" and rows["1"]["entity"] == "nlp"
    assert float(rows["0"]["duration_s"]) == 360.0 and float(rows["1"]["duration_s"]) == 720.0
    assert rows["0"]["total_steps"] == "720" and rows["0"]["steps_done"] == "720"
    summary = json.loads((out / "summary.json").read_text())
    # 2 jobs over 100 s, each needing its duration on one GPU, over 2 GPUs
    expected = (1 / 100 * 3600) / 3600 * ((360 + 720) / 2) / 2
    assert summary["metrics"]["offered_load"] == pytest.approx(expected)
    del table, cluster


def test_short_jobs_leave_gpus_idle_for_the_rest_of_the_round():
    # Two GPUs: a needs 100 s, b runs the whole 360 s round. a's GPU idles 260 s.
    table = ThroughputTable.from_records([{"worker_type": "g", "model": "A", "scale_factor": 1, "throughput": 1.0}])
    cluster = cluster_from_dict({"worker_types": {"g": 2}})
    a = JobType("A", None, 1)
    result = run_simulation(
        table, cluster, Workload(jobs=[Job("a", a, 100.0), Job("b", a, 720.0)]), SimulationConfig(policy="fifo_perf")
    )
    assert result.metrics["idle_after_finish_gpu_s"] == pytest.approx(260.0)


def test_compare_marks_incomplete_policies_and_takes_max_active(tmp_path, gavel_table, busy_trace):
    from planner.formats.trace import write_trace

    trace = tmp_path / "busy.csv"
    write_trace(busy_trace, trace)
    args = ["compare", "--jobs", str(trace), "-c", "1:1:1", "-t", TABLE, "--policies", "fifo,fifo_perf"]
    capped = CliRunner().invoke(app, [*args, "--max-active", "40", "-o", str(tmp_path / "c.json")], terminal_width=200)
    assert capped.exit_code == 3, capped.output  # no policy finished: no answer
    assert "incomplete, saturated" in capped.output and "not a result" in capped.output
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["recommended"] is None
    for row in doc["policies"]:
        assert row["status"] == "saturated" and row["jct_mean_s"] is None and row["jct_lower_bound_s"] > 0
    fine = CliRunner().invoke(app, args, terminal_width=200)
    assert fine.exit_code == 0, fine.output
    assert "incomplete" not in fine.output


def test_sweep_rows_of_incomplete_points_carry_a_bound_only():
    record = {
        "policy": "fifo",
        "seed": 0,
        "rate": 9.0,
        "num_jobs": None,
        "status": "saturated",
        "metrics": {"jobs_finished": 3, "censored_jct": {"mean_lower_bound_s": 7200.0}, "makespan_s": 3600.0},
    }
    row = summary_rows([record])[0]
    assert row["avg_jct_h"] is None and row["jct_lower_bound_h"] == 2.0 and row["jobs_finished"] == 3
