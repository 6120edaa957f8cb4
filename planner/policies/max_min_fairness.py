"""Least attained service as max-min fairness (spec §4.3.1-4.3.3).

maximise t  s.t.  t <= s_i y_i / (w_i prop_i)  for every job, where y_i is the
effective throughput (solo, plus co-located time for the packed variant) and
prop_i the throughput on an average slot of the cluster: throughput relative
to the proportional share, scaled by the GPU count (GPU·time is equalised)
and divided by the weight. The agnostic variant sees T ≡ 1 wherever the job
can run.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo

from planner.policies.base import Allocation, empty_allocation
from planner.policies.lp import DEFAULT_METHOD
from planner.policies.space import build_space, read_allocation
from planner.problem import Problem


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

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        seen, prop = seen_throughput(problem, self.perf_aware or self.packed)
        factor = problem.scale / (problem.weight * prop)
        lp, classes = build_space(problem, seen, problem.weight, packed=self.packed, aggregate=self.aggregate)
        model = lp.model
        model.t = pyo.Var()
        for c, i in enumerate(classes.representative):
            model.extra.add(model.t <= lp.throughput_expr(c, factor[i]))
        x, objective, solve_s = lp.solve(model.t, method=self.method, policy=self.name)
        return read_allocation(lp, classes, problem, x, objective, solve_s, self.method)
