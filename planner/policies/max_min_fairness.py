"""Least attained service as max-min fairness (spec §4.3.1-4.3.3).

maximise t  s.t.  t <= s_i y_i / (w_i prop_i)  for every job, where y_i is the
effective throughput (solo, plus co-located time for the packed variant) and
prop_i the throughput on an average slot of the cluster: throughput relative
to the proportional share, scaled by the GPU count (GPU·time is equalised)
and divided by the weight. The agnostic variant sees T ≡ 1 wherever the job
can run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.policies.base import Allocation
from planner.policies.lp.highs import DEFAULT_METHOD, solve_matrix
from planner.policies.lp.matrix import INF, MatrixLP
from planner.policies.no_jobs import unless_no_jobs
from planner.policies.problem import Problem
from planner.policies.space import Space, build_space


def seen_throughput(problem: Problem, perf_aware: bool) -> tuple[np.ndarray, np.ndarray]:
    """(throughputs the policy sees, prop_i)."""
    if perf_aware:
        return problem.throughput, problem.proportional_throughput()
    return (problem.throughput > 0).astype(float), np.ones(problem.n_jobs)  # Gavel: T ≡ 1, prop = 1


@dataclass
class MaxMinFairness:
    perf_aware: bool = True
    packed: bool = False
    aggregate: bool = True
    method: str = DEFAULT_METHOD
    fifo: bool = False

    @property
    def name(self) -> str:
        if self.packed:
            return "max_min_fairness_packed"
        return "max_min_fairness_perf" if self.perf_aware else "max_min_fairness"

    @unless_no_jobs
    def allocate(self, problem: Problem) -> Allocation:
        started = time.perf_counter()
        seen, prop = seen_throughput(problem, self.perf_aware or self.packed)
        # A job that runs nowhere (prop 0) has no cells, so its factor is never used: 0, not inf.
        denominator = problem.weight * prop
        factor = np.divide(problem.scale, denominator, out=np.zeros(len(prop)), where=denominator > 0)
        space = build_space(problem, seen, problem.weight, packed=self.packed, aggregate=self.aggregate)
        lp, column = max_min_lp(space, factor[space.classes.representative])
        build_s = time.perf_counter() - started
        values, objective, solve_s = solve_matrix(lp, method=self.method, policy=self.name)
        x, z = space.read(values, column, signed_zeros=True)
        return space.allocation(problem, x, z, objective, method=self.method, build_s=build_s, solve_s=solve_s)


def max_min_lp(space: Space, factor: np.ndarray) -> tuple[MatrixLP, np.ndarray]:
    """maximise t over the space with a fairness row per class,
    t - factor_c · (throughput of c) <= 0, between the space's head and tail rows."""
    if space.pairs is None and space.tail.n == 0:
        return _max_min_lp_unpacked(space, factor)
    return _max_min_lp_built(space, factor)


def _max_min_lp_built(space: Space, factor: np.ndarray) -> tuple[MatrixLP, np.ndarray]:
    """`max_min_lp` through the general LP builder."""
    lp = space.builder()
    t = int(lp.variables(1, -INF, INF)[0])
    lp.add(space.head)
    lp.add(space.throughput_rows(factor).scaled(-1.0).led_by(t, 1.0).bounded(-INF, 0.0))
    lp.add(space.tail)
    cost = np.zeros(lp.n_vars)
    cost[t] = 1.0
    return lp.build(cost, maximize=True)


def _max_min_lp_unpacked(space: Space, factor: np.ndarray) -> tuple[MatrixLP, np.ndarray]:
    """`max_min_lp` of a space without pairs, its arrays written directly: the very LP the builder
    gives (tested), at a quarter of its cost, which counts when a simulation builds hundreds.
    The head's first rows (capacity) name every x in order, so the columns are x, then t."""
    head, n = space.head, space.n_cells
    c_of = space.cell_class[space.by_class]
    terms = (space.throughput[c_of, space.cell_type[space.by_class]] * factor[c_of]) * -1.0
    k = len(space.per_class)
    lengths = space.per_class + 1  # t, then the class's x in type order
    lead = np.zeros(k, dtype=np.int64)
    np.cumsum(lengths[:-1], out=lead[1:])
    rest = np.ones(len(terms) + k, dtype=bool)
    rest[lead] = False
    index = np.empty(len(rest), dtype=np.int64)
    value = np.empty(len(rest))
    index[lead], index[rest] = n, space.by_class
    value[lead], value[rest] = 1.0, terms
    all_lengths = np.concatenate((head.lengths, lengths))
    start = np.zeros(len(all_lengths) + 1, dtype=np.int32)
    np.cumsum(all_lengths, out=start[1:])
    cost = np.zeros(n + 1)
    cost[n] = 1.0
    lower, upper = np.zeros(n + 1), np.ones(n + 1)
    lower[n], upper[n] = -INF, INF
    lp = MatrixLP(
        cost=cost,
        lower=lower,
        upper=upper,
        row_start=start,
        row_index=np.concatenate((head.index, index)).astype(np.int32),
        row_value=np.concatenate((head.value, value)).astype(float),
        row_lower=np.concatenate((head.lower, np.full(k, -INF))).astype(float),
        row_upper=np.concatenate((head.upper, np.zeros(k))).astype(float),
        maximize=True,
    )
    return lp, np.arange(n + 1)
