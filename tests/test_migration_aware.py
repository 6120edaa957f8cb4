"""Migration-aware rounds: a job stays on the worker type it holds unless the deficit it
recovers by moving is at least its restart cost; with no cost it is the plain mechanism."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trace import synthetic_table

from planner.errors import InputError
from planner.formats.cluster import cluster_from_dict
from planner.formats.jobs import Job
from planner.formats.table import JobType
from planner.modes.generator import GeneratorConfig, JobGenerator
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.rounds.mechanism import Key, RoundMechanism, migration_pins


def arr(*values: float) -> np.ndarray:
    return np.array(values, dtype=float)


def test_pins_by_hand():
    a, b, c, d = ("a",), ("b",), ("c",), ("d",)
    chosen = [(a, 1), (b, 1), (c, 0), (d, 1)]
    held = {a: 0, b: 0, c: 0}  # d did not run last round
    lag = {a: arr(10.0, 40.0), b: arr(10.0, 100.0), c: arr(0.0, 500.0), d: arr(0.0, 0.0)}
    cost = {k: arr(60.0, 60.0) for k in (a, b, c, d)}
    # a would recover 30 s by moving, less than 60: kept on type 0. b recovers 90: moves.
    # c stays on its type anyway; d is a new start, not a move.
    assert migration_pins(chosen, held, lag, cost) == {a: 0}
    # The gain is never negative, and a gain equal to the cost pays for the move.
    assert migration_pins([(a, 1)], held, {a: arr(10.0, 70.0)}, {a: arr(0.0, 60.0)}) == {}
    assert migration_pins([(a, 1)], held, {a: arr(90.0, 10.0)}, {a: arr(0.0, 0.0)}) == {}
    assert migration_pins([(a, 1)], held, {a: arr(90.0, 10.0)}, {a: arr(0.0, 1e-9)}) == {a: 0}
    # A held entry the fill leaves out is preempted (time-sharing), not moved: never pinned.
    assert migration_pins([], held, lag, cost) == {}


def two_types(gpus: int):
    return cluster_from_dict({"worker_types": {"fast": gpus, "slow": gpus}})


@st.composite
def mechanisms(draw):
    """A mechanism one round into a run: last round's placements, then a new allocation."""
    gpus = draw(st.integers(1, 4))
    n = draw(st.integers(1, 8))
    mech = RoundMechanism(two_types(gpus), round_s=360.0)
    keys: list[Key] = [(str(i),) for i in range(n)]
    fractions = st.floats(0.0, 1.0, allow_nan=False)
    for key in keys:
        mech.add(key)
    mech.reset(0.0)
    mech.set_allocation({k: arr(draw(fractions), draw(fractions)) for k in keys})
    scale = {k: 1 for k in keys}
    runnable = {k: np.array([True, True]) for k in keys}
    for key, j in mech.select([0, 1], scale, runnable):
        mech.record(key, j, 360.0)
    mech.place(mech.select([0, 1], scale, runnable), scale)
    mech.set_allocation({k: arr(draw(fractions), draw(fractions)) for k in keys})
    now = draw(st.floats(0.0, 5000.0))
    costs = {k: arr(draw(st.floats(0.0, 400.0)), draw(st.floats(0.0, 400.0))) for k in keys}
    order = draw(st.permutations([0, 1]))
    return mech, scale, runnable, costs, now, order


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mechanisms())
def test_never_moves_a_job_whose_gain_is_below_its_cost(case):
    mech, scale, runnable, costs, now, order = case
    held = {k: mech.types.index(p.worker_type) for k, p in mech.previous.items()}
    lag = mech.lag(now)
    chosen = mech.select_migration_aware(order, scale, runnable, costs, now)
    for key, new in chosen:
        old = held.get(key)
        if old is not None and old != new:
            assert max(0.0, lag[key][new] - lag[key][old]) >= costs[key][new]
    used = [sum(scale[k] for k, j in chosen if j == t) for t in (0, 1)]
    assert all(u <= mech.cluster.capacity(w) for u, w in zip(used, mech.types))
    assert len({k for k, _ in chosen}) == len(chosen)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mechanisms())
def test_with_cost_zero_it_is_the_plain_fill(case):
    mech, scale, runnable, costs, now, order = case
    zero = {k: np.zeros(2) for k in costs}
    assert mech.select_migration_aware(order, scale, runnable, zero, now) == mech.select(order, scale, runnable)


def _run(policy: str, **config):
    table = synthetic_table()
    jobs = JobGenerator(table, GeneratorConfig(seed=5, rate_per_hour=4.0)).take(40)
    cluster = cluster_from_dict({"worker_types": {"v100": 3, "k80": 3}})
    return run_simulation(table, cluster, Workload(jobs=jobs), SimulationConfig(policy=policy, **config))


@pytest.mark.parametrize("policy", ["max_min_fairness_perf", "finish_time_fairness_perf"])
def test_cost_zero_keeps_every_result(policy):
    plain = _run(policy)
    aware = _run(policy, migration_aware=True, restart_cost_s=0.0)
    assert aware.jobs == plain.jobs


def test_fewer_restarts_when_moves_cost_a_minute():
    plain = _run("max_min_fairness_perf", restart_cost_s=60.0)
    aware = _run("max_min_fairness_perf", restart_cost_s=60.0, migration_aware=True)
    assert aware.metrics["restarts"] < plain.metrics["restarts"]
    assert aware.metrics["restart_gpu_s"] < plain.metrics["restart_gpu_s"]
    assert aware.config["migration_aware"] is True


def test_refused_under_gavel_compat():
    table = synthetic_table()
    cluster = cluster_from_dict({"worker_types": {"v100": 1, "k80": 1}})
    jobs = [Job("0", JobType("ResNet-18", 16, 1), 100.0)]
    with pytest.raises(InputError, match="migration-aware"):
        run_simulation(table, cluster, Workload(jobs=jobs), SimulationConfig(gavel_compat=True, migration_aware=True))
