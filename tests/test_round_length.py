"""`--round-length auto`: which length it picks and why (measured, not assumed), the option's
parser, and `rota simulate --round-length auto` end to end."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from test_trace import synthetic_table
from typer.testing import CliRunner

from planner.cli import app
from planner.cli.round_length import AUTO, parse_round_length
from planner.errors import InputError
from planner.formats.cluster import cluster_from_dict, read_cluster
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable, read_table
from planner.formats.trace import read_trace
from planner.modes.generator import GeneratorConfig, JobGenerator
from planner.modes.round_length import (
    DEFAULT_ROUND_S,
    NO_COST_REASON,
    TOLERANCE,
    CandidateMetrics,
    choose_for_simulation,
    choose_round_length,
    pick,
)
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.rounds.restart import charged_restarts

runner = CliRunner()


def _lab_like(n: int = 12):
    """A dozen one-GPU jobs time-sharing 8 GPUs: every switch is a restart."""
    table = synthetic_table()
    jobs = JobGenerator(table, GeneratorConfig(seed=4)).take(n)
    return table, cluster_from_dict({"worker_types": {"v100": 4, "k80": 4}}), jobs


def _choose(table, cluster, jobs, cost, policy="max_min_fairness_perf", **kwargs):
    restart = charged_restarts(table, cluster, cost, False, False)
    return choose_round_length(jobs, table, cluster, policy, restart, **kwargs)


def _one_job(restart_s: float = 100.0):
    """One job of 3600 steps at 1 step/s on one GPU that restarts in `restart_s`."""
    table = ThroughputTable.from_records([{"worker_type": "g", "model": "A", "scale_factor": 1, "throughput": 1.0}])
    cluster = cluster_from_dict({"worker_types": {"g": {"gpus": 1, "restart_s": restart_s}}})
    return table, cluster, [Job("a", JobType("A", None, 1), 3600.0)]


# --------------------------------------------------------------------------- the choice


def test_expensive_restarts_get_a_longer_round_than_the_default():
    table, cluster, jobs = _lab_like()
    choice = _choose(table, cluster, jobs, 300.0)
    by_length = {c.round_s: c for c in choice.candidates}
    base, chosen = by_length[DEFAULT_ROUND_S], by_length[choice.round_s]
    assert choice.round_s > DEFAULT_ROUND_S
    assert choice.objective == "avg JCT" and chosen.score == chosen.avg_jct_s
    assert chosen.goodput > base.goodput and chosen.restarts < base.restarts
    best = min(c.score for c in choice.candidates)
    assert chosen.score <= best * (1 + TOLERANCE) < base.score
    assert choice.reason.startswith(f"round length auto: {choice.round_s:g} s (goodput ")
    assert f"vs {base.goodput * 100:.1f} % at 360 s" in choice.reason and "\n" not in choice.reason
    # 120 s is not longer than a 300 s restart: skipped; 360 s, the baseline, always measured.
    assert sorted(by_length) == [360.0, 720.0, 1800.0, 3600.0]


def test_cheaper_restarts_never_get_a_longer_round():
    table, cluster, jobs = _lab_like()
    lengths = [_choose(table, cluster, jobs, cost).round_s for cost in (30.0, 120.0, 300.0)]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]


def test_candidate_metrics_are_what_the_simulation_of_that_length_measures():
    table, cluster, jobs = _lab_like()
    config = SimulationConfig(policy="max_min_fairness", seed=3, restart_cost_s=120.0)
    choice = choose_for_simulation(table, cluster, Workload(jobs=jobs), config)
    assert choice.horizon_s is not None
    for c in choice.candidates:
        run = run_simulation(table, cluster, Workload(jobs=jobs), replace(config, round_s=c.round_s))
        m = run.metrics
        assert c.finished_all and m["jobs_finished"] == len(jobs)
        assert c.avg_jct_s == pytest.approx(m["jct_s"]["mean"], rel=1e-12)
        assert c.makespan_s == pytest.approx(m["makespan_s"], rel=1e-12)
        assert (c.goodput, c.restarts, c.rounds) == (m["goodput"], m["restarts"], m["rounds"])


def test_a_job_alone_keeps_its_gpu_so_every_length_ties_and_the_shortest_wins():
    # Worked by hand: the first start loses 100 s, every later round extends the lease, so at
    # any length the job finishes at 3600 + 100 s, with 100 of 3700 busy GPU-seconds lost.
    table, cluster, jobs = _one_job(100.0)
    choice = _choose(table, cluster, jobs, None)
    assert [c.round_s for c in choice.candidates] == [120.0, 360.0, 720.0, 1800.0, 3600.0]
    for c in choice.candidates:
        assert (c.avg_jct_s, c.makespan_s, c.restarts) == (pytest.approx(3700.0), pytest.approx(3700.0), 1)
        assert c.goodput == pytest.approx(3600.0 / 3700.0)
    assert choice.round_s == 120.0
    assert choice.reason.startswith("round length auto: 120 s (goodput 97.3 % vs 97.3 % at 360 s")


@pytest.mark.parametrize(
    "costs",
    [
        None,  # nothing known: the table has no restart columns, the cluster no restart_s
        0.0,  # --restart-cost 0
    ],
)
def test_no_restart_cost_keeps_the_default_without_simulating(costs):
    table, cluster, jobs = _lab_like()
    choice = _choose(table, cluster, jobs, costs)
    assert choice.round_s == DEFAULT_ROUND_S and choice.candidates == () and choice.objective is None
    assert choice.reason == f"round length auto: 360 s ({NO_COST_REASON})"
    table, cluster, jobs = _one_job(0.0)  # the cluster's restart_s: 0
    assert _choose(table, cluster, jobs, None).reason == choice.reason


def test_makespan_policies_are_scored_on_the_makespan():
    table, cluster, jobs = _lab_like()
    choice = _choose(table, cluster, jobs, 120.0, policy="min_total_duration_perf")
    assert choice.objective == "makespan"
    for c in choice.candidates:
        assert c.makespan_s is not None and (c.score, c.tiebreak) == (c.makespan_s, c.avg_jct_s)


def test_the_horizon_counts_unfinished_jobs_up_to_it():
    # 5 rounds of the shortest candidate (120 s): 600 s, a sixth of the job.
    table, cluster, jobs = _one_job(100.0)
    choice = _choose(table, cluster, jobs, None, policy="min_total_duration_perf", horizon_rounds=5)
    assert choice.horizon_s == 600.0
    for c in choice.candidates:
        assert not c.finished_all and c.makespan_s is None and c.avg_jct_s == 600.0
    assert choice.objective == "avg JCT"  # no candidate finished: no makespan to compare
    assert choice.round_s == 120.0


def _candidate(round_s: float, score: float, tiebreak: float) -> CandidateMetrics:
    return CandidateMetrics(round_s, 1.0, 0, 0.0, score, None, True, 1, score, tiebreak)


def test_pick_takes_near_ties_on_the_score_then_the_tiebreak_then_the_shortest():
    at = {
        360.0: _candidate(360.0, 103.0, 50.0),  # 3 % off the best score: out
        720.0: _candidate(720.0, 100.9, 70.0),  # within 1 % but a worse tie-break: out
        1800.0: _candidate(1800.0, 100.0, 50.2),
        3600.0: _candidate(3600.0, 100.5, 50.0),
    }
    assert pick(list(at.values())) is at[1800.0]
    assert pick([at[360.0], at[3600.0]]) is at[3600.0]
    ties = [_candidate(s, math.inf, math.inf) for s in (3600.0, 720.0)]  # nothing to compare: the shorter
    assert pick(ties).round_s == 720.0


def test_same_inputs_same_choice():
    # max_min_fairness is heterogeneity-agnostic: the engine shuffles the types from the seed.
    table, cluster, jobs = _lab_like()
    config = SimulationConfig(policy="max_min_fairness", seed=7, restart_cost_s=60.0)
    first = choose_for_simulation(table, cluster, Workload(jobs=jobs), config)
    assert choose_for_simulation(table, cluster, Workload(jobs=list(jobs)), config) == first


def test_bad_candidates_are_refused():
    table, cluster, jobs = _lab_like()
    with pytest.raises(InputError, match="candidates"):
        _choose(table, cluster, jobs, 120.0, candidates=[0.0, 600.0])


# --------------------------------------------------------------------------- the option


@pytest.mark.parametrize(
    ("text", "value"),
    [("auto", AUTO), (" AUTO ", AUTO), ("360", 360.0), ("1", 1.0), ("1.5e3", 1500.0), ("2592000", 2592000.0)],
)
def test_round_length_option_accepts_auto_and_seconds(text, value):
    assert parse_round_length(text) == value


@pytest.mark.parametrize(
    "text", ["0", "0.5", "-360", "2592001", "1e300", "nan", "inf", "", "soon", "1_000", "３６０", "360s", "auto\n1"]
)
def test_round_length_option_refuses_other_values_in_one_line(text):
    with pytest.raises(InputError) as info:
        parse_round_length(text)
    message = str(info.value)
    assert message.startswith("field '--round-length': expected 'auto' or seconds, at least 1 and less than")
    assert "\n" not in message


# --------------------------------------------------------------------------- rota simulate


SIM = ["simulate", "-t", "data/throughputs.csv", "-c", "data/cluster.yaml", "--trace", "data/jobs.csv"]


def test_simulate_round_length_auto_prints_and_records_its_choice(tmp_path):
    res = runner.invoke(app, [*SIM, "--restart-cost", "120", "--round-length", "auto", "-o", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    table, cluster = read_table("data/throughputs.csv"), read_cluster("data/cluster.yaml")
    config = SimulationConfig(restart_cost_s=120.0)
    expected = choose_for_simulation(table, cluster, Workload(jobs=read_trace("data/jobs.csv", table, cluster)), config)
    assert expected.reason in res.output.splitlines()  # one line, not wrapped
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["round_length"] == json.loads(json.dumps(expected.to_json()))
    assert summary["config"]["round_s"] == expected.round_s
    res = runner.invoke(app, [*SIM, "--round-length", "auto", "--json", "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["round_length"]["reason"] == f"round length auto: 360 s ({NO_COST_REASON})"
    assert summary["config"]["round_s"] == 360.0


def test_simulate_without_auto_records_no_choice(tmp_path):
    res = runner.invoke(app, [*SIM, "--round-length", "720", "--json", "-o", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert "round_length" not in summary and summary["config"]["round_s"] == 720.0


def test_simulate_refuses_a_bad_round_length_before_writing(tmp_path):
    res = runner.invoke(app, [*SIM, "--round-length", "0", "-o", str(tmp_path / "a")])
    assert res.exit_code == 2
    assert res.output.startswith("error: field '--round-length': expected 'auto' or seconds")
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "a").exists()
