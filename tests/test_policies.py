"""Policy optima: spec §11.1 reference numbers and hand-derived cases."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SPEC_T, SPEC_TYPES, make_problem

from planner.errors import SolverError
from planner.policies import POLICY_NAMES, make_policy
from planner.policies.lp.highs import solve_matrix
from planner.policies.lp.matrix import INF, LPBuilder, Rows

# Policies that need no co-location rows (the packed ones are tested with pair tables).
SOLO_POLICIES = [p for p in POLICY_NAMES if "packed" not in p and p != "gandiva"]
SINGLE_GPU_ONLY = {"allox"}


def las_level(problem, x, perf=True):
    prop = problem.proportional_throughput() if perf else np.ones(problem.n_jobs)
    tput = problem.throughput if perf else (problem.throughput > 0).astype(float)
    y = (tput * x).sum(axis=1)
    return np.min(problem.scale * y / (problem.weight * prop))


@pytest.mark.parametrize(
    "capacity,scale,expected",
    [
        ([1, 2, 3], [1, 1], 48 / 31),
        ([1, 2, 3], [2, 1], 1.8),
        ([4, 4, 4], [1, 1], 1.5),
        ([4, 4, 4], [2, 1], 1.5),
        ([4, 4, 4], [4, 1], 1.5),
        ([4, 8, 6], [1, 1], 1.588235),
        ([4, 8, 6], [2, 1], 1.588235),
        ([4, 8, 6], [4, 1], 1.588235),
    ],
)
@pytest.mark.parametrize("method", ["ipm", "simplex"])
def test_las_perf_matches_gavel_reference(capacity, scale, expected, method):
    problem = make_problem(SPEC_T, capacity, scale=scale, names=SPEC_TYPES)
    alloc = make_policy("max_min_fairness_perf", method=method).allocate(problem)
    assert alloc.objective == pytest.approx(expected, rel=1e-5)
    assert las_level(problem, alloc.x) == pytest.approx(expected, rel=1e-5)


def test_las_perf_interior_point_matches_ecos_allocation():
    # Spec §11.1: ECOS gives job0 (0.419355, 0.580645), job1 (0.580645, 0.419355), k80 unused.
    problem = make_problem(SPEC_T, [1, 2, 3], names=SPEC_TYPES)
    x = make_policy("max_min_fairness_perf", method="ipm").allocate(problem).x
    assert x[0] == pytest.approx([0.419355, 0.580645, 0.0], abs=1e-4)
    assert x[1] == pytest.approx([0.580645, 0.419355, 0.0], abs=1e-4)


def test_proportional_normaliser_matches_spec():
    problem = make_problem(SPEC_T, [1, 2, 3], names=SPEC_TYPES)
    assert problem.proportional_throughput() == pytest.approx([0.91667, 1.66667], rel=1e-4)


@pytest.mark.parametrize("capacity", [[1, 2, 3], [4, 4, 4], [4, 8, 6]])
def test_agnostic_las_equals_isolated_minimum_and_one(capacity):
    problem = make_problem(SPEC_T, capacity, names=SPEC_TYPES)
    alloc = make_policy("max_min_fairness").allocate(problem)
    assert alloc.objective == pytest.approx(1.0, rel=1e-6)
    iso = make_policy("isolated").allocate(problem).x
    # Gavel's test_isolated: min_i s_i Σ_j x_iso equals the agnostic optimum.
    assert np.min(problem.scale * iso.sum(axis=1)) == pytest.approx(alloc.objective, rel=1e-6)


def test_isolated_spec_values():
    problem = make_problem(SPEC_T, [4, 8, 6], names=SPEC_TYPES)
    x = make_policy("isolated").allocate(problem).x
    assert x[0] == pytest.approx([0.2222, 0.4444, 0.3333], abs=1e-4)
    problem = make_problem(SPEC_T, [1, 2, 3], names=SPEC_TYPES)
    assert make_policy("isolated").allocate(problem).x[1] == pytest.approx([1 / 6, 1 / 3, 1 / 2])


def test_weighted_las_hand_derived():
    # One GPU, weights 1 and 2: t <= x0, t <= x1 / 2, x0 + x1 <= 1  =>  t = 1/3, x = (1/3, 2/3).
    problem = make_problem([[1.0], [1.0]], [1], weight=[1, 2])
    alloc = make_policy("max_min_fairness").allocate(problem)
    assert alloc.objective == pytest.approx(1 / 3, rel=1e-6)
    assert alloc.x[:, 0] == pytest.approx([1 / 3, 2 / 3], abs=1e-6)


def test_scale_factor_equalises_gpu_time_hand_derived():
    # Two GPUs, jobs on 1, 1 and 2 GPUs: 3t <= 2 => every job gets 2/3 GPU-time.
    problem = make_problem([[1.0], [1.0], [1.0]], [2], scale=[1, 1, 2])
    alloc = make_policy("max_min_fairness_perf").allocate(problem)
    assert alloc.objective == pytest.approx(2 / 3, rel=1e-6)
    assert (problem.scale * alloc.x[:, 0]) == pytest.approx([2 / 3] * 3, abs=1e-6)


def test_max_sum_throughput_spec_optimum():
    problem = make_problem(SPEC_T, [1, 1, 1], names=SPEC_TYPES)
    alloc = make_policy("max_sum_throughput_perf").allocate(problem)
    assert alloc.objective == pytest.approx(4.0, rel=1e-6)
    assert (problem.throughput * alloc.x).sum() == pytest.approx(4.0, rel=1e-6)


def test_aggregation_gives_the_same_optimum_as_per_job_model():
    rng = np.random.default_rng(3)
    kinds = rng.uniform(0.5, 5.0, size=(4, 3))
    tput = kinds[rng.integers(0, 4, size=40)]
    scale = rng.choice([1, 2], size=40)
    for name in ("max_min_fairness_perf", "max_min_fairness", "max_sum_throughput_perf"):
        problem = make_problem(tput, [8, 6, 10], scale=scale)
        grouped = make_policy(name, aggregate=True).allocate(problem)
        single = make_policy(name, aggregate=False).allocate(problem)
        assert grouped.n_classes is not None and single.n_classes is not None
        assert grouped.n_classes < single.n_classes
        assert grouped.objective == pytest.approx(single.objective, rel=1e-6)


def test_zero_throughput_type_gets_no_time():
    tput = [[2.0, 0.0], [1.0, 1.0], [3.0, 0.0]]
    for name in SOLO_POLICIES:
        x = make_policy(name).allocate(make_problem(tput, [1, 4])).x
        assert x[0, 1] == 0 and x[2, 1] == 0, name


def test_fifo_uses_every_type_not_only_the_last():
    # Gavel bug (spec §13.3.1): every job landed on the last type. Six jobs, 2+2+2 GPUs.
    problem = make_problem([[1.0, 2.0, 3.0]] * 6, [2, 2, 2], names=["k80", "p100", "v100"])
    x = make_policy("fifo", seed=1).allocate(problem).x
    assert (x.sum(axis=0) == [2, 2, 2]).all()
    assert (x.sum(axis=1) == 1).all()


def test_fifo_perf_takes_fastest_free_type_in_arrival_order():
    problem = make_problem([[1.0, 2.0]] * 3, [1, 1])
    x = make_policy("fifo_perf").allocate(problem).x
    # time_since_start is decreasing: j0 arrived first and gets the fast type.
    assert x.tolist() == [[0, 1], [1, 0], [0, 0]]


def test_fifo_keeps_running_jobs_where_they_are():
    policy = make_policy("fifo", seed=0)
    first = policy.allocate(make_problem([[1.0, 1.0]] * 2, [1, 1])).x
    second = policy.allocate(make_problem([[1.0, 1.0]] * 2, [1, 1])).x
    assert (first == second).all()


def test_non_optimal_solve_is_an_error():
    lp = LPBuilder()
    x = lp.variables(1)  # in [0, 1]
    lp.add(Rows.from_terms([[(int(x[0]), 1.0)]], [2.0], [INF]))  # x >= 2: infeasible
    matrix, _ = lp.build(np.ones(1), maximize=True)
    with pytest.raises(SolverError, match="test: HiGHS ended 'Infeasible', not optimal"):
        solve_matrix(matrix, method="ipm", policy="test")


def test_unknown_policy_names_the_choices():
    from planner.errors import InputError

    with pytest.raises(InputError, match="max_min_fairness_perf"):
        make_policy("nope")


def test_fifo_gavel_compat_reproduces_the_last_type_bug():
    # spec §4.4: 6 jobs on {k80:2, p100:2, v100:2} -> all six get v100 = 1.0
    problem = make_problem([[1.0, 2.0, 3.0]] * 6, [2, 2, 2], names=["k80", "p100", "v100"])
    x = make_policy("fifo", gavel_compat=True).allocate(problem).x
    assert x.tolist() == [[0.0, 0.0, 1.0]] * 6
