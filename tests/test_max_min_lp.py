"""LAS's LP written directly for a space without pairs is the one the general builder gives."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_problem

from planner.formats.cluster import Tenant, Tenants
from planner.policies import max_min_fairness as mmf
from planner.policies.space import build_space

FIELDS = ("cost", "lower", "upper", "row_start", "row_index", "row_value", "row_lower", "row_upper")


def _both(problem, aggregate=True):
    seen, prop = mmf.seen_throughput(problem, True)
    denominator = problem.weight * prop
    factor = np.divide(problem.scale, denominator, out=np.zeros(len(prop)), where=denominator > 0)
    space = build_space(problem, seen, problem.weight, packed=False, aggregate=aggregate)
    assert space.pairs is None and space.tail.n == 0  # the case the direct writer takes
    factor = factor[space.classes.representative]
    return mmf._max_min_lp_built(space, factor), mmf._max_min_lp_unpacked(space, factor)


def _same(built, direct):
    (a, column_a), (b, column_b) = built, direct
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
    assert a.maximize == b.maximize and a.integer is None and b.integer is None
    assert np.array_equal(column_a, column_b)


@pytest.mark.parametrize("seed", range(60))
def test_the_direct_lp_is_the_built_one_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    jobs, types = int(rng.integers(1, 40)), int(rng.integers(1, 5))
    kinds = rng.uniform(0.05, 4.0, (int(rng.integers(1, 8)), types))
    kinds *= rng.random(kinds.shape) > 0.25  # cells where a kind cannot run
    if seed % 7 == 0:
        kinds[0] = 0.0  # a kind that runs nowhere
    throughput = kinds[rng.integers(0, len(kinds), jobs)]  # repeated rows: classes of several jobs
    scale = rng.choice([1, 1, 2, 4], jobs)
    weight = rng.choice([1.0, 1.0, 2.0, 0.5], jobs)
    capacity = rng.integers(1, 16, types)
    problem = make_problem(throughput, capacity, scale=scale, weight=weight)
    _same(*_both(problem, aggregate=bool(seed % 3)))


def test_quota_rows_stay_in_the_head():
    problem = make_problem([[1.0, 2.0], [2.0, 1.0], [1.0, 2.0], [3.0, 0.0]], [4, 4])
    problem.entity = ["A", "B", "B", "C"]
    problem.tenants = Tenants({"A": Tenant("A", 1.0, {"w0": 1.0}), "B": Tenant("B", 1.0, {"w1": 2.0})})
    built, direct = _both(problem)
    assert built[0].n_rows > 2 + 2 * 3  # capacity, time and fairness rows, and quota rows
    _same(built, direct)
