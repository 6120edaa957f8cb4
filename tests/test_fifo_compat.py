"""`fifo --gavel-compat`: Gavel HEAD's FIFO base mode across calls (spec §4.4 [HEAD], §11.3)."""

from __future__ import annotations

import json

import pytest
from conftest import make_problem

from planner.formats.cluster import parse_cluster
from planner.formats.state import decode, encode
from planner.modes.generator import GeneratorConfig, JobGenerator
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.policies import make_policy
from planner.policies.fifo import Fifo

TYPES = ["k80", "p100", "v100"]


def jobs(ids, capacity=(1, 1, 1)):
    problem = make_problem([[1.0, 2.0, 3.0]] * len(ids), list(capacity), names=TYPES)
    problem.job_ids = list(ids)
    return problem


def placed(problem, x):
    return {job_id: TYPES[row.argmax()] if row.sum() else None for job_id, row in zip(problem.job_ids, x)}


def test_filling_v100_delists_the_drawn_type():
    # Random(2) first draws 0: filling v100 delists k80, v100 stays last in the list and takes everyone.
    problem = jobs(["a", "b", "c"])
    assert placed(problem, make_policy("fifo", seed=2, gavel_compat=True).allocate(problem).x) == {
        "a": "v100",
        "b": "v100",
        "c": "v100",
    }
    # Random(5) first draws 2: v100 itself is delisted, so the next job lands on p100.
    got = placed(problem, make_policy("fifo", seed=5, gavel_compat=True).allocate(problem).x)
    assert got["a"] == "v100" and got["b"] == "p100"


def test_departed_job_hands_its_type_to_the_queue_head_on_a_partial_tally():
    policy = make_policy("fifo", seed=2, gavel_compat=True)
    first = jobs(["a", "b"])
    assert placed(first, policy.allocate(first).x) == {"a": "v100", "b": "v100"}
    # a departs. It is walked before b is subtracted, so v100 looks free and c gets it although
    # b still holds the only v100; then v100 is overcommitted, p100 is the last listed type for d.
    second = jobs(["b", "c", "d"])
    assert placed(second, policy.allocate(second).x) == {"b": "v100", "c": "v100", "d": "p100"}


def test_without_compat_capacity_holds_across_calls():
    policy = make_policy("fifo", seed=2)
    for ids in (["a", "b"], ["b", "c", "d"], ["c", "d", "e", "f"]):
        x = policy.allocate(jobs(ids)).x
        assert (x.sum(axis=0) <= 1).all() and (x.sum(axis=1) <= 1).all()


@pytest.mark.parametrize("gavel_compat", [True, False])
def test_state_through_json_continues_the_same_calls(gavel_compat):
    """Gavel's job -> type memory, arrival ranks, kept types and the random stream are the
    policy's state: a fresh policy given it (through the state file's encoding) answers
    the next calls as the original does."""
    calls = [["a", "b"], ["b", "c", "d"], ["c", "d", "e", "f"], ["e", "f", "g"], ["g", "h", "i", "j"]]
    original = Fifo(perf_aware=False, seed=5, gavel_compat=gavel_compat)
    for ids in calls[:2]:
        original.allocate(jobs(ids))
    copy = Fifo(perf_aware=False, seed=0, gavel_compat=gavel_compat)
    copy.set_state(decode(json.loads(json.dumps(encode(original.get_state())))))
    for ids in calls[2:]:
        assert (copy.allocate(jobs(ids)).x == original.allocate(jobs(ids)).x).all()


@pytest.fixture
def gavel_table(gavel_dir):
    from planner.formats.gavel_json import import_gavel

    return import_gavel(gavel_dir / "simulation_throughputs.json")


@pytest.mark.parametrize(
    "seed,expected",
    [
        (0, (38.769, 167.170, 0.2602, 57.7)),
        (1, (49.371, 184.104, 0.2844, 54.3)),
    ],
)
def test_gavel_static_fifo(gavel_table, seed, expected):
    gen = JobGenerator(gavel_table, GeneratorConfig(seed=seed))
    m = run_simulation(
        gavel_table,
        parse_cluster("4:4:4"),
        Workload(generator=gen, num_jobs=30),
        SimulationConfig(policy="fifo", seed=seed, gavel_compat=True),
    ).metrics
    got = (m["jct_s"]["mean"] / 3600, m["makespan_s"] / 3600, m["utilisation"]["all"], 100 * m["lease_extension_rate"])
    for value, want, tol in zip(got, expected, (5e-4, 5e-4, 5e-5, 0.05)):
        assert abs(value - want) <= tol, (got, expected)


def test_gavel_static_multi_gpu_fifo(gavel_table):
    gen = JobGenerator(gavel_table, GeneratorConfig(seed=0, multi_gpu=True))
    m = run_simulation(
        gavel_table,
        parse_cluster("8:8:8"),
        Workload(generator=gen, num_jobs=30),
        SimulationConfig(policy="fifo", seed=0, gavel_compat=True),
    ).metrics
    got = (m["jct_s"]["mean"] / 3600, m["makespan_s"] / 3600, m["utilisation"]["all"])
    for value, want, tol in zip(got, (45.108, 209.875, 0.2526), (5e-4, 5e-4, 5e-5)):
        assert abs(value - want) <= tol, got


def test_gavel_continuous_fifo(gavel_table):
    # Above the v100 share (1/3): jobs spill onto p100 once v100 is full or delisted.
    gen = JobGenerator(gavel_table, GeneratorConfig(seed=0, rate_per_hour=0.4))
    m = run_simulation(
        gavel_table,
        parse_cluster("4:4:4"),
        Workload(generator=gen),
        SimulationConfig(policy="fifo", seed=0, window=(20, 60), gavel_compat=True),
    ).metrics
    assert abs(m["jct_s"]["mean"] / 3600 - 13.718) <= 5e-4
    assert abs(m["utilisation"]["all"] - 0.3772) <= 5e-5
