"""Simulator: hand-checked JCTs, conservation, windows, saturation, Gavel's §11.3 numbers, CLI."""

from __future__ import annotations

import json

import pytest
from test_trace import cli_app, synthetic_table
from typer.testing import CliRunner

from planner.errors import InputError
from planner.formats.cluster import cluster_from_dict, parse_cluster
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.modes.generator import GeneratorConfig, JobGenerator
from planner.modes.metrics import LeaseCounter, distribution, utilisation
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.rounds.engine import Placement, RoundRecord

A = JobType("A", None, 1)


def one_gpu():
    table = ThroughputTable.from_records([{"worker_type": "g", "model": "A", "scale_factor": 1, "throughput": 1.0}])
    return table, cluster_from_dict({"worker_types": {"g": 1}})


def two_jobs():
    return [Job("a", A, 720.0), Job("b", A, 360.0)]


def simulate(table, cluster, jobs, **config):
    return run_simulation(table, cluster, Workload(jobs=jobs), SimulationConfig(**config))


def test_two_jobs_one_gpu_fifo():
    # a (720 steps at 1 step/s) runs two full rounds, then b runs one: JCTs 720 s and 1080 s.
    table, cluster = one_gpu()
    result = simulate(table, cluster, two_jobs(), policy="fifo_perf")
    jct = {r["job_id"]: r["jct_s"] for r in result.jobs}
    assert jct == {"a": 720.0, "b": 1080.0}
    assert result.metrics["jct_s"]["mean"] == 900.0
    assert result.metrics["makespan_s"] == 1080.0
    assert result.metrics["utilisation"]["g"] == pytest.approx(1.0)
    # a keeps its GPU in round 2; after it finishes, b's round offers no extension.
    assert (result.metrics["lease_extensions"], result.metrics["lease_opportunities"]) == (1, 1)


def test_two_jobs_one_gpu_isolated():
    # Equal shares: a runs first (tie, arrival order), then b (it has received less), then a alone.
    table, cluster = one_gpu()
    result = simulate(table, cluster, two_jobs(), policy="isolated")
    jct = {r["job_id"]: r["jct_s"] for r in result.jobs}
    assert jct == {"a": 1080.0, "b": 720.0}
    assert result.metrics["resolves"] == 2  # at t = 0 and when b finishes


def test_gavel_compat_waits_for_the_resolve_interval():
    # Gavel: a finishes at 360 and the empty cluster re-solves then; b (arriving at 400) is not in
    # that allocation and the next re-solve is due only 1920 s later, so the idle cluster jumps to
    # the next arrival (c at 5000), where b finally starts; c waits for the forced re-solve at 5360.
    table, cluster = one_gpu()
    jobs = [Job("a", A, 360.0), Job("b", A, 360.0, arrival_s=400.0), Job("c", A, 360.0, arrival_s=5000.0)]
    plain = {r["job_id"]: r["jct_s"] for r in simulate(table, cluster, jobs, policy="fifo_perf").jobs}
    compat = {
        r["job_id"]: r["jct_s"] for r in simulate(table, cluster, jobs, policy="fifo_perf", gavel_compat=True).jobs
    }
    assert plain == {"a": 360.0, "b": 360.0, "c": 360.0}
    assert compat == {"a": 360.0, "b": 5360.0 - 400.0, "c": 5720.0 - 5000.0}


def test_conservation_on_a_random_workload():
    table = synthetic_table()
    cluster = cluster_from_dict({"worker_types": {"v100": 8, "k80": 8}})
    gen = JobGenerator(table, GeneratorConfig(seed=5, rate_per_hour=3, multi_gpu=True))
    jobs = gen.take(40)
    for policy in ("max_min_fairness_perf", "isolated", "fifo"):
        result = simulate(table, cluster, jobs, policy=policy)
        assert result.status == "ok"
        for row in result.jobs:
            assert row["steps_done"] == pytest.approx(row["total_steps"], rel=0, abs=1.0)  # whole steps
            assert row["steps_done"] >= row["total_steps"]
            assert row["finish_s"] >= row["arrival_s"]
        m = result.metrics
        assert m["jobs_finished"] == 40
        assert all(0 <= u <= 1 + 1e-9 for u in m["utilisation"].values())
        assert m["makespan_s"] == max(r["finish_s"] for r in result.jobs)


def test_window_of_an_endless_trace():
    table = synthetic_table()
    cluster = cluster_from_dict({"worker_types": {"v100": 4, "k80": 4}})
    gen = JobGenerator(table, GeneratorConfig(seed=1, rate_per_hour=0.1))
    result = run_simulation(
        table, cluster, Workload(generator=gen), SimulationConfig(policy="fifo_perf", window=(5, 15))
    )
    assert result.status == "ok"
    window = [r for r in result.jobs if r["in_window"]]
    assert sorted(int(r["job_id"]) for r in window) == list(range(5, 15))
    assert all(r["jct_s"] is not None for r in window)
    assert result.metrics["jct_s"]["n"] == 10
    assert result.metrics["makespan_s"] >= max(r["finish_s"] for r in window)
    with pytest.raises(InputError, match="window"):
        run_simulation(table, cluster, Workload(generator=gen), SimulationConfig(policy="fifo_perf"))


def test_jobs_that_fit_nowhere_are_reported():
    table = synthetic_table()
    small = cluster_from_dict({"worker_types": {"v100": 4, "k80": 4}})
    gen = JobGenerator(table, GeneratorConfig(seed=5, rate_per_hour=0.1, multi_gpu=True))
    with pytest.raises(InputError, match="needs 8 GPUs"):
        run_simulation(table, small, Workload(generator=gen, num_jobs=60), SimulationConfig(policy="isolated"))


def test_saturation_is_detected():
    table = synthetic_table()
    cluster = cluster_from_dict({"worker_types": {"v100": 1, "k80": 1}})
    flood = JobGenerator(table, GeneratorConfig(seed=0, rate_per_hour=50))
    result = run_simulation(
        table, cluster, Workload(generator=flood), SimulationConfig(policy="fifo_perf", window=(100, 200))
    )
    assert result.status == "saturated" and "offered load" in result.reason
    # Below the a-priori bound, a policy can still fall behind: the backlog check catches it.
    gen = JobGenerator(table, GeneratorConfig(seed=0, rate_per_hour=0.05))
    load = Workload(generator=gen).offered_load(table, cluster)
    assert 0 < load < 1
    capped = run_simulation(
        table,
        cluster,
        Workload(generator=gen),
        SimulationConfig(policy="fifo_perf", window=(10, 400), max_active_jobs=5),
    )
    assert capped.status == "saturated" and "jobs in the system" in capped.reason


def test_lease_counter_by_hand():
    from planner.rounds.engine import JobOutcome

    outcomes = {j: JobOutcome(Job(j, A, 1.0)) for j in "abc"}
    g = lambda i: (("n", i),)  # noqa: E731
    r0 = RoundRecord(0, 0, 10, [Placement(("a",), "g", g(0)), Placement(("b",), "g", g(1))], {})
    r1 = RoundRecord(1, 10, 20, [Placement(("a",), "g", g(0)), Placement(("b",), "g", g(2))], {})
    r2 = RoundRecord(2, 50, 60, [Placement(("a",), "g", g(0))], {})  # after an idle jump
    counter = LeaseCounter()
    for r in (r0, r1):
        counter.add(r, outcomes)
    assert (counter.extensions, counter.opportunities) == (1, 2)
    outcomes["b"].finish_s = 15.0
    counter.add(r2, outcomes)
    assert (counter.extensions, counter.opportunities) == (1, 3)


def test_metric_helpers():
    d = distribution([1.0, 2.0, 3.0, 4.0])
    assert d["n"] == 4 and d["mean"] == 2.5 and d["p50"] == 2.5 and d["max"] == 4.0
    assert distribution([])["mean"] is None
    u = utilisation({"a": 50.0, "b": 0.0}, {"a": 1, "b": 1}, 100.0)
    assert u == {"a": 0.5, "b": 0.0, "all": 0.25}


def test_parse_cluster():
    c = parse_cluster("36:36:36")
    assert c.names == ["v100", "p100", "k80"] and c.total_gpus == 108
    assert parse_cluster("v100=2,k80=4").names == ["v100", "k80"]
    for bad in ("1:2", "a:b:c", "0:0:0"):
        with pytest.raises(InputError):
            parse_cluster(bad)


# --------------------------------------------------------------------------- Gavel's own numbers (spec §11.3)


@pytest.fixture
def gavel_table(gavel_dir):
    from planner.formats.gavel_json import import_gavel

    return import_gavel(gavel_dir / "simulation_throughputs.json")


@pytest.mark.parametrize(
    "policy,seed,expected",
    [
        ("isolated", 0, (26.676, 212.462, 0.2732, 21.2)),
        ("isolated", 1, (36.510, 234.312, 0.3344, 25.7)),
        ("fifo_perf", 0, (23.144, 123.854, 0.3599, 99.5)),
        ("fifo_packed", 1, (26.400, 146.139, 0.3780, 99.3)),
    ],
)
def test_gavel_static_numbers_exactly(gavel_table, policy, seed, expected):
    """Static, 30 single-GPU jobs on v100:4 p100:4 k80:4: avg JCT h / makespan h / util / lease %."""
    gen = JobGenerator(gavel_table, GeneratorConfig(seed=seed))
    result = run_simulation(
        gavel_table,
        parse_cluster("4:4:4"),
        Workload(generator=gen, num_jobs=30),
        SimulationConfig(policy=policy, seed=seed, gavel_compat=True),
    )
    m = result.metrics
    got = (m["jct_s"]["mean"] / 3600, m["makespan_s"] / 3600, m["utilisation"]["all"], 100 * m["lease_extension_rate"])
    for value, want, tol in zip(got, expected, (5e-4, 5e-4, 5e-5, 0.05)):
        assert abs(value - want) <= tol, (got, expected)


def test_gavel_continuous_numbers(gavel_table):
    """Continuous 4:4:4, 0.4 jobs/h, window [20, 60): isolated exact, LAS-perf within 1 %."""
    expected = {"isolated": (16.525, 0.5062, 0.0005), "max_min_fairness_perf": (12.139, 0.3568, 0.01)}
    for policy, (jct_h, util, rel) in expected.items():
        gen = JobGenerator(gavel_table, GeneratorConfig(seed=0, rate_per_hour=0.4))
        result = run_simulation(
            gavel_table,
            parse_cluster("4:4:4"),
            Workload(generator=gen),
            SimulationConfig(policy=policy, window=(20, 60), gavel_compat=True),
        )
        assert result.metrics["jct_s"]["mean"] / 3600 == pytest.approx(jct_h, rel=rel)
        assert result.metrics["utilisation"]["all"] == pytest.approx(util, rel=max(rel, 5e-4))


def test_replay_gavel_trace(gavel_table, gavel_dir):
    from planner.formats.trace import read_trace

    cluster = parse_cluster("2:2:2")
    jobs = read_trace(gavel_dir / "traces" / "small_test.trace", gavel_table, cluster)
    result = run_simulation(gavel_table, cluster, Workload(jobs=jobs), SimulationConfig(policy="max_min_fairness_perf"))
    assert result.status == "ok" and result.metrics["jobs_finished"] == 20


# --------------------------------------------------------------------------- CLI


def test_cli_simulate_writes_results(tmp_path):
    from planner.formats.table import write_table

    write_table(synthetic_table(), tmp_path / "t.csv")
    args = [
        "simulate",
        "-t",
        str(tmp_path / "t.csv"),
        "-c",
        "v100=4,k80=4",
        "-p",
        "max_min_fairness_perf",
        "-n",
        "20",
        "--rate",
        "0.2",
        "--rho",
        "-o",
        str(tmp_path / "out"),
    ]
    result = CliRunner().invoke(cli_app(), args)
    assert result.exit_code == 0, result.output
    assert "average JCT" in result.output and "rho" in result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["format"] == "rota.simulation/v1" and summary["status"] == "ok"
    assert summary["metrics"]["jct_s"]["n"] == 20 and summary["metrics"]["rho"]["n"] == 20
    lines = (tmp_path / "out" / "jobs.csv").read_text().splitlines()
    assert lines[0].startswith("job_id,model") and len(lines) == 21


@pytest.mark.parametrize(
    "extra,message",
    [
        (["-n", "5", "-w", "5:2"], "window"),
        (["-n", "5", "-p", "nope"], "unknown policy"),
        (["--rate", "1"], "--num-jobs"),
        (["-n", "5", "-c", "1:2"], "V100:P100:K80"),
    ],
)
def test_cli_simulate_errors(tmp_path, extra, message):
    from planner.formats.table import write_table

    write_table(synthetic_table(), tmp_path / "t.csv")
    args = ["simulate", "-t", str(tmp_path / "t.csv"), "-c", "v100=2", "-o", str(tmp_path / "o")]
    result = CliRunner().invoke(cli_app(), args + extra)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
