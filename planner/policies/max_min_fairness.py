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
import pyomo.environ as pyo

from planner.policies.base import Allocation, Status, empty_allocation
from planner.policies.lp import DEFAULT_METHOD, make_classes
from planner.policies.matrix_lp import INF, MatrixLP, allocation_rows, solve_matrix
from planner.policies.packing_matrix import allocate_packed_max_min
from planner.policies.problem import Problem
from planner.policies.space import build_space, read_allocation


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
    backend: str = "highs"  # "pyomo": the reference formulation; same LP, ~10-30x slower per solve

    @property
    def name(self) -> str:
        if self.packed:
            return "max_min_fairness_packed"
        return "max_min_fairness_perf" if self.perf_aware else "max_min_fairness"

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        seen, prop = seen_throughput(problem, self.perf_aware or self.packed)
        factor = problem.scale / (problem.weight * prop)
        if self.backend == "highs":
            if self.packed:
                return allocate_packed_max_min(
                    problem, seen, factor, aggregate=self.aggregate, method=self.method, policy=self.name
                )
            return self._allocate_direct(problem, seen, factor)
        lp, classes = build_space(problem, seen, problem.weight, packed=self.packed, aggregate=self.aggregate)
        model = lp.model
        model.t = pyo.Var()
        for c, i in enumerate(classes.representative):
            model.extra.add(model.t <= lp.throughput_expr(c, factor[i]))
        x, objective, solve_s = lp.solve(model.t, method=self.method, policy=self.name)
        return read_allocation(lp, classes, problem, x, objective, solve_s, self.method)

    def _allocate_direct(self, problem: Problem, seen: np.ndarray, factor: np.ndarray) -> Allocation:
        started = time.perf_counter()
        classes = make_classes(seen, problem.scale, problem.weight, aggregate=self.aggregate)
        rep = classes.representative
        lp = max_min_matrix(seen[rep], problem.scale[rep] * classes.multiplicity, problem.capacity, factor[rep])
        build_s = time.perf_counter() - started
        values, objective, solve_s = solve_matrix(lp, method=self.method, policy=self.name)
        runnable = seen[rep] > 0
        x = np.zeros(runnable.shape)
        typ, cls = np.nonzero(runnable.T)  # the column order of max_min_matrix
        x[cls, typ] = values[:-1]
        return Allocation(
            np.clip(x, 0.0, 1.0)[classes.index],
            objective=objective,
            status=Status.OPTIMAL,
            solver=f"highs-{self.method}",
            build_s=build_s,
            solve_s=solve_s,
            n_classes=classes.n,
        )


def max_min_matrix(throughput: np.ndarray, gpus: np.ndarray, capacity: np.ndarray, factor: np.ndarray) -> MatrixLP:
    """The LP `allocate` builds in Pyomo, as a matrix, with rows and columns in the order
    Pyomo hands them to HiGHS (so interior-point answers agree): columns x[c, j] for the
    runnable cells by type, then class, then t; rows capacity (Σ_c gpus_c x[c, j] <= N_j,
    types with a runnable cell), time (Σ_j x[c, j] <= 1, classes with one) and fairness
    (t - Σ_j factor_c T[c, j] x[c, j] <= 0, every class). Built with whole-array numpy
    operations: a simulation builds one per re-solve."""
    base = allocation_rows(throughput, gpus, capacity)
    t, k = base.n_cols, len(throughput)
    by_class = base.by_class
    c_of, typ_of = base.cls[by_class], base.typ[by_class]
    first = np.concatenate(([0], np.cumsum(base.per_class)[:-1]))  # where each class's run starts
    fair_index = np.insert(by_class, first, t)
    fair_value = np.insert(-factor[c_of] * throughput[c_of, typ_of], first, 1.0)
    cost = np.zeros(t + 1)
    cost[t] = 1.0
    return base.with_rows(
        fair_index,
        fair_value,
        base.per_class + 1,
        np.full(k, -INF),
        np.zeros(k),
        cost=cost,
        col_lower=np.append(np.zeros(t), -INF),
        col_upper=np.append(np.ones(t), INF),
        maximize=True,
    )
