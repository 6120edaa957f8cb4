"""Least attained service as max-min fairness (spec §4.3.1-4.3.2).

maximise t  s.t.  t <= Σ_j a_ij x_ij  for every job, with
a_ij = T_ij s_i / (w_i prop_i): throughput relative to the proportional share,
scaled by the GPU count (GPU·time is equalised) and divided by the weight.
The agnostic variant sees T ≡ 1 on every type where the job can run.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo

from planner.policies.base import Allocation, empty_allocation
from planner.policies.lp import DEFAULT_METHOD, AllocationLP, make_classes
from planner.problem import Problem


def las_coefficients(problem: Problem, perf_aware: bool) -> tuple[np.ndarray, np.ndarray]:
    """(throughputs the policy sees, a_ij)."""
    if perf_aware:
        seen = problem.throughput
        prop = problem.proportional_throughput()
    else:
        seen = (problem.throughput > 0).astype(float)
        prop = np.ones(problem.n_jobs)  # Gavel: T ≡ 1 gives prop_i = 1
    a = seen * (problem.scale / (problem.weight * prop))[:, None]
    return seen, a


@dataclass
class MaxMinFairness:
    perf_aware: bool = True
    aggregate: bool = True
    method: str = DEFAULT_METHOD
    fifo: bool = False

    @property
    def name(self) -> str:
        return "max_min_fairness_perf" if self.perf_aware else "max_min_fairness"

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        seen, a = las_coefficients(problem, self.perf_aware)
        classes = make_classes(seen, problem.scale, problem.weight, aggregate=self.aggregate)
        rep = classes.representative
        lp = AllocationLP(seen[rep], problem.scale[rep], problem.capacity, classes.multiplicity)
        model = lp.model
        model.t = pyo.Var()
        for c in range(classes.n):
            model.extra.add(model.t <= lp.weighted_sum(c, a[rep[c]]))
        x, objective, solve_s = lp.solve(model.t, method=self.method, policy=self.name)
        return Allocation(x[classes.index], objective=objective, status="optimal",
                          solver=f"highs-{self.method}", build_s=lp.build_s, solve_s=solve_s,
                          n_classes=classes.n)
