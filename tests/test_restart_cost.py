"""Restart (preemption) cost: the table's restart columns, the cluster's restart_s, which one
wins, and what the engine charges for a start on new GPUs (worked out by hand below)."""

from __future__ import annotations

import json
import math

import pytest
from test_trace import synthetic_table
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.formats.cluster import cluster_from_dict
from planner.formats.jobs import Job
from planner.formats.table import RESTART_COLUMNS, JobType, ThroughputTable, read_table, write_table
from planner.modes.generator import GeneratorConfig, JobGenerator
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.rounds.restart import RestartCosts, charged_restarts, restart_costs

A = JobType("A", None, 1)
SOLO = {"worker_type": "g", "model": "A", "scale_factor": 1, "throughput": 1.0}


def one_gpu(**cluster_spec):
    table = ThroughputTable.from_records([SOLO])
    return table, cluster_from_dict({"worker_types": {"g": {"gpus": 1, **cluster_spec}}})


def simulate(table, cluster, jobs, **config):
    return run_simulation(table, cluster, Workload(jobs=jobs), SimulationConfig(**config))


# --------------------------------------------------------------------------- the table's columns


def test_restart_columns_are_read_and_blank_is_unknown(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "worker_type,model,scale_factor,throughput,startup_s,checkpoint_save_s,checkpoint_load_s\n"
        "g,A,1,1.0,20.5,3,4\n"
        "h,A,1,2.0,,,\n"
    )
    table = read_table(path)
    by_type = {r["worker_type"]: r for r in table.rows}
    assert (by_type["g"]["startup_s"], by_type["g"]["checkpoint_save_s"], by_type["g"]["checkpoint_load_s"]) == (
        20.5,
        3.0,
        4.0,
    )
    assert all(by_type["h"][c] is None for c in RESTART_COLUMNS)  # type: ignore[literal-required]


@pytest.mark.parametrize(
    ("value", "message"),
    [("-1", "must not be negative"), ("inf", "inf"), ("nan", "NaN"), ("soon", "soon")],
)
def test_bad_restart_value_names_file_row_and_field(tmp_path, value, message):
    path = tmp_path / "t.csv"
    path.write_text(f"worker_type,model,scale_factor,throughput,checkpoint_load_s\ng,A,1,1.0,1\ng,B,1,1.0,{value}\n")
    with pytest.raises(InputError) as info:
        read_table(path)
    text = str(info.value)
    assert str(path) in text and "row 2" in text and "checkpoint_load_s" in text and message in text
    assert "\n" not in text


def test_restart_columns_belong_to_solo_rows():
    pair = {"worker_type": "g", "model": "A", "scale_factor": 1, "partner_model": "A", "throughput": 0.6}
    with pytest.raises(InputError, match="startup_s.*solo rows only"):
        ThroughputTable.from_records([SOLO, {**pair, "startup_s": 5}])


def test_tables_without_restart_times_are_written_as_before(tmp_path):
    plain, timed = tmp_path / "plain.csv", tmp_path / "timed.csv"
    write_table(ThroughputTable.from_records([SOLO]), plain)
    header = plain.read_text().splitlines()[0]
    assert not any(column in header for column in RESTART_COLUMNS)
    write_table(ThroughputTable.from_records([{**SOLO, "startup_s": 12.5}]), timed)
    assert read_table(timed).rows[0]["startup_s"] == 12.5
    assert read_table(timed).rows[0]["checkpoint_save_s"] is None


def test_cluster_restart_s_is_checked():
    assert one_gpu(restart_s=30)[1].worker_types["g"].restart_s == 30.0
    assert one_gpu()[1].worker_types["g"].restart_s is None
    for bad in (-1, "soon", float("inf")):
        with pytest.raises(InputError, match=r"worker_types\.g\.restart_s"):
            one_gpu(restart_s=bad)


# --------------------------------------------------------------------------- which cost applies


def test_precedence_option_then_table_then_cluster_then_zero():
    table = ThroughputTable.from_records(
        [
            {**SOLO, "checkpoint_save_s": 1, "startup_s": 10, "checkpoint_load_s": 2},
            {**SOLO, "worker_type": "h", "startup_s": 10},  # incomplete: not a measured cost
            {**SOLO, "worker_type": "k"},
        ]
    )
    spec = {"g": {"gpus": 1, "restart_s": 40}, "h": {"gpus": 1, "restart_s": 50}, "k": 1}
    cluster = cluster_from_dict({"worker_types": spec})
    costs = restart_costs(table, cluster)
    assert (costs.cost("g", A), costs.cost("h", A), costs.cost("k", A)) == (13.0, 50.0, 0.0)
    assert costs.known
    forced = restart_costs(table, cluster, override=7.0)
    assert (forced.cost("g", A), forced.cost("h", A), forced.cost("k", A)) == (7.0, 7.0, 7.0)
    assert not RestartCosts().known and RestartCosts().cost("g", A) == 0.0


def test_no_information_charges_nothing_and_gavel_compat_refuses_costs():
    table, cluster = one_gpu()
    assert charged_restarts(table, cluster, None, False, False) is None
    assert charged_restarts(table, cluster, 0.0, False, False) is not None  # asked for: reported
    assert charged_restarts(table, cluster, 0.0, False, True) is None
    with pytest.raises(InputError, match="--restart-cost"):
        charged_restarts(table, cluster, 30.0, False, True)
    with pytest.raises(InputError, match="--migration-aware"):
        charged_restarts(table, cluster, None, True, True)
    with pytest.raises(InputError, match="--restart-cost"):
        charged_restarts(table, cluster, math.nan, False, False)


# --------------------------------------------------------------------------- what the engine charges


def test_one_job_pays_its_first_start_once():
    # 1000 steps at 1 step/s, rounds of 360 s, 60 s per start: 300 steps in round 0 (the start),
    # then lease extensions: 360, then the last 340; finish at 720 + 340 = 1060 s.
    table, cluster = one_gpu()
    result = simulate(table, cluster, [Job("a", A, 1000.0)], policy="fifo_perf", restart_cost_s=60.0)
    assert result.jobs[0]["jct_s"] == 1060.0
    m = result.metrics
    assert (m["restarts"], m["restart_gpu_s"]) == (1, 60.0)
    assert m["goodput"] == pytest.approx(1000 / 1060)


def test_every_new_start_is_charged_and_the_cost_stops_at_one_round():
    # a (720 steps) runs 300 + 360 + 60 steps, finishing at 780; b (360 steps) then starts: 300 + 60,
    # finishing at 1200. Two starts, 120 GPU-seconds lost of 1200 busy.
    table, cluster = one_gpu()
    jobs = [Job("a", A, 720.0), Job("b", A, 360.0)]
    result = simulate(table, cluster, jobs, policy="fifo_perf", restart_cost_s=60.0)
    assert {r["job_id"]: r["jct_s"] for r in result.jobs} == {"a": 780.0, "b": 1200.0}
    assert result.metrics["goodput"] == pytest.approx(0.9)
    # A start longer than a round takes the whole round, plus the one step every round runs
    # (ending at 361); then 360 steps and the last 39: finish at 721 + 39 = 760.
    result = simulate(table, cluster, [Job("c", A, 400.0)], policy="fifo_perf", restart_cost_s=500.0)
    assert result.jobs[0]["jct_s"] == 760.0
    assert result.metrics["restart_gpu_s"] == 360.0


def test_cluster_default_applies_without_the_option():
    table, cluster = one_gpu(restart_s=60)
    result = simulate(table, cluster, [Job("a", A, 1000.0)], policy="fifo_perf")
    assert result.jobs[0]["jct_s"] == 1060.0
    assert (
        simulate(table, cluster, [Job("a", A, 1000.0)], policy="fifo_perf", restart_cost_s=0.0).jobs[0]["jct_s"]
        == 1000.0
    )


def _workload():
    table = synthetic_table()
    jobs = JobGenerator(table, GeneratorConfig(seed=4, rate_per_hour=3.0, multi_gpu=True)).take(40)
    return table, cluster_from_dict({"worker_types": {"v100": 8, "k80": 8}}), jobs


@pytest.mark.parametrize("policy", ["max_min_fairness", "max_min_fairness_perf", "finish_time_fairness_perf"])
def test_cost_zero_reproduces_the_run_exactly(policy):
    table, cluster, jobs = _workload()
    base = simulate(table, cluster, jobs, policy=policy)
    zero = simulate(table, cluster, jobs, policy=policy, restart_cost_s=0.0)
    assert zero.jobs == base.jobs
    assert {k: v for k, v in zero.metrics.items() if "wall" not in k and k != "solver_s"} == {
        k: v for k, v in base.metrics.items() if "wall" not in k and k != "solver_s"
    } | {
        "restarts": zero.metrics["restarts"],
        "restarts_across_types": zero.metrics["restarts_across_types"],
        "restart_gpu_s": 0.0,
        "goodput": 1.0,
    }
    assert "restart_cost_s" not in base.config and zero.config["restart_cost_s"] == 0.0


def test_restart_accounting_adds_up():
    # Every start of a one-GPU job shorter than a round loses exactly the cost on one GPU.
    table, cluster, jobs = _workload()
    single = [j for j in jobs if j.scale_factor == 1]
    result = simulate(table, cluster, single, policy="max_min_fairness_perf", restart_cost_s=30.0)
    m = result.metrics
    assert m["restarts"] >= len(single)  # every job starts at least once
    assert m["restart_gpu_s"] == pytest.approx(30.0 * m["restarts"])
    busy = sum(u * cluster.capacity(w) * m["makespan_s"] for w, u in m["utilisation"].items() if w != "all")
    assert m["goodput"] == pytest.approx(1 - m["restart_gpu_s"] / busy)
    base = simulate(table, cluster, single, policy="max_min_fairness_perf")
    assert m["jct_s"]["mean"] > base.metrics["jct_s"]["mean"]


# --------------------------------------------------------------------------- the commands


def test_plan_and_simulate_report_restarts(tmp_path):
    runner = CliRunner()
    plan = ["plan", "-t", "data/throughputs.csv", "-j", "data/jobs.csv", "-c", "data/cluster.yaml"]
    res = runner.invoke(app, [*plan, "-o", str(tmp_path / "s.json"), "--restart-cost", "30", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["restarts"] > 0 and 0 < summary["goodput"] < 1
    assert json.loads((tmp_path / "s.json").read_text())["policy"]["options"]["restart_cost_s"] == 30.0
    res = runner.invoke(app, [*plan, "-o", str(tmp_path / "t.json")])
    assert res.exit_code == 0 and "restarts:" not in res.output
    assert "restart cost unknown, assumed 0 s" in " ".join(res.output.split())  # said, not charged
    res = runner.invoke(app, [*plan, "-o", str(tmp_path / "u.json"), "--restart-cost", "30"])
    assert res.exit_code == 0 and "restarts:" in res.output and "goodput" in res.output
    sim = ["simulate", "-t", "data/throughputs.csv", "-c", "data/cluster.yaml", "--num-jobs", "6", "--gavel-compat"]
    res = runner.invoke(app, [*sim, "--restart-cost", "30", "-o", str(tmp_path / "sim")])
    assert res.exit_code == 2 and "Gavel's simulator charges no restart cost" in res.output
