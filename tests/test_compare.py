"""rota compare: one job list under several policies, with a recommendation."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.formats.cluster import cluster_from_dict, read_cluster
from planner.formats.jobs import read_jobs
from planner.formats.table import read_table
from planner.modes.compare import (
    PolicyOutcome,
    compare_policies,
    default_policies,
    gpu_cost,
    heterogeneity_ratios,
    recommend,
)
from planner.modes.simulate import SimulationConfig, Workload, run_simulation


@pytest.fixture(scope="module")
def demo():
    table = read_table(DATA / "throughputs.csv")
    cluster = read_cluster(DATA / "cluster.yaml")
    return table, cluster, read_jobs(DATA / "jobs.csv", table=table, cluster=cluster)


def test_each_row_is_the_simulation_of_that_policy_and_the_best_is_recommended(demo):
    table, cluster, jobs = demo
    policies = ["fifo", "fifo_perf", "max_min_fairness", "max_min_fairness_perf"]
    result = compare_policies(table, cluster, jobs, policies)
    direct = {}
    for name in policies:
        m = run_simulation(table, cluster, Workload(jobs=list(jobs)), SimulationConfig(policy=name)).metrics
        direct[name] = m["jct_s"]["mean"]
    assert [o.policy for o in result.outcomes] == policies
    for o in result.outcomes:
        assert o.status == "ok" and o.jobs_finished == len(jobs)
        assert o.jct_mean_s == pytest.approx(direct[o.policy], rel=1e-12)
    assert result.recommended == min(direct, key=direct.get)
    assert result.ratios["fifo_perf"] == pytest.approx(direct["fifo"] / direct["fifo_perf"])
    assert result.ratios["max_min_fairness_perf"] == pytest.approx(
        direct["max_min_fairness"] / direct["max_min_fairness_perf"]
    )


def test_policy_that_refuses_the_jobs_is_reported_not_fatal(demo):
    table, cluster, jobs = demo  # the demo has multi-GPU jobs; AlloX schedules single-GPU jobs only
    result = compare_policies(table, cluster, jobs, ["allox", "max_min_fairness_perf"])
    allox = result.outcomes[0]
    assert allox.status == "cannot run" and "single-GPU" in allox.reason
    assert result.recommended == "max_min_fairness_perf"


def test_default_policies_add_packing_only_with_pair_rows(demo, gavel_dir):
    table, _, _ = demo
    assert "max_min_fairness_packed" in default_policies(table)
    solo_only = table.__class__([r for r in table.rows if r["partner_model"] is None], path="solo")
    assert "max_min_fairness_packed" not in default_policies(solo_only)


def test_gpu_cost_prices_busy_gpu_hours():
    cluster = cluster_from_dict(
        {"worker_types": {"a": {"gpus": 2, "cost_per_gpu_hour": 3.0}, "b": {"gpus": 4, "cost_per_gpu_hour": 1.0}}}
    )
    metrics = {"makespan_s": 7200.0, "utilisation": {"a": 0.5, "b": 0.25, "all": 0.33}}
    # a: 2 GPUs x 2 h x 50 % = 2 GPU-h at $3; b: 4 x 2 h x 25 % = 2 GPU-h at $1
    assert gpu_cost(metrics, cluster) == pytest.approx(8.0)
    unpriced = cluster_from_dict({"worker_types": {"a": {"gpus": 2}}})
    assert gpu_cost({"makespan_s": 10.0, "utilisation": {"a": 0.5}}, unpriced) is None
    assert gpu_cost({"makespan_s": 10.0, "utilisation": {"a": 0.0}}, unpriced) == 0.0


def _ok(name, jct, makespan=10.0, cost=None, finished=3):
    return PolicyOutcome(name, "ok", jct_mean_s=jct, makespan_s=makespan, cost=cost, jobs_finished=finished)


def test_recommend_ranks_by_the_objective_among_policies_that_finished_everything():
    outcomes = [
        _ok("a", 100.0, makespan=50.0, cost=9.0),
        _ok("b", 80.0, makespan=60.0, cost=5.0),
        _ok("c", 10.0, finished=2),  # fastest, but left a job unfinished
        PolicyOutcome("d", "saturated", "too many jobs"),
    ]
    assert recommend(outcomes, "jct")[0] == "b"
    assert recommend(outcomes, "makespan")[0] == "a"
    assert recommend(outcomes, "cost")[0] == "b"
    best, reason = recommend(outcomes, "jct")
    assert "20.0 % below the next best, a" in reason
    assert recommend([_ok("x", 1.0), _ok("y", 1.0)], "jct")[1].endswith("tied with y (0.000278 h)")
    assert recommend([PolicyOutcome("d", "saturated")], "jct") == (None, "no policy finished the jobs")


def test_ratios_only_where_both_versions_finished():
    outcomes = [_ok("fifo", 30.0), _ok("fifo_perf", 10.0), _ok("max_min_fairness_perf", 5.0)]
    assert heterogeneity_ratios(outcomes) == {"fifo_perf": pytest.approx(3.0)}


def test_bad_requests_are_input_errors(demo):
    table, cluster, jobs = demo
    with pytest.raises(InputError, match="unknown policy 'nope'"):
        compare_policies(table, cluster, jobs, ["nope"])
    with pytest.raises(InputError, match="objective"):
        compare_policies(table, cluster, jobs, ["fifo"], objective="speed")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="empty"):
        compare_policies(table, cluster, [], ["fifo"])


def test_cli_json_plot_and_errors(tmp_path):
    runner = CliRunner()
    args = ["compare", "--jobs", str(DATA / "jobs.csv"), "--cluster", str(DATA / "cluster.yaml")]
    args += ["--table", str(DATA / "throughputs.csv"), "--policies", "fifo,max_min_fairness_perf"]
    result = runner.invoke(app, [*args, "--json", "--plot", str(tmp_path / "c.png"), "--out", str(tmp_path / "c.json")])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed == json.loads((tmp_path / "c.json").read_text())
    assert printed["format"] == "rota.comparison/v1" and printed["recommended"] == "max_min_fairness_perf"
    assert [p["policy"] for p in printed["policies"]] == ["fifo", "max_min_fairness_perf"]
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = runner.invoke(app, [*args, "--objective", "speed"])
    assert bad.exit_code == 2 and "unknown objective 'speed'" in bad.output and "Traceback" not in bad.output
