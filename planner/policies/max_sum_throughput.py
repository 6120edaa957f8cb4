"""Maximise total throughput (spec §4.8, no prices, no SLOs): Σ_i Σ_j T_ij x_ij."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.policies.base import Allocation, empty_allocation
from planner.policies.lp import DEFAULT_METHOD, AllocationLP, make_classes
from planner.problem import Problem


@dataclass
class MaxSumThroughput:
    name: str = "max_sum_throughput_perf"
    perf_aware: bool = True
    fifo: bool = False
    aggregate: bool = True
    method: str = DEFAULT_METHOD

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        tput = problem.throughput
        classes = make_classes(tput, problem.scale, aggregate=self.aggregate)
        rep = classes.representative
        lp = AllocationLP(tput[rep], problem.scale[rep], problem.capacity, classes.multiplicity)
        # HiGHS tolerances are absolute: keep the objective of order one.
        unit = float(tput.max()) * problem.n_jobs or 1.0
        objective = sum(lp.weighted_sum(c, tput[rep[c]] * classes.multiplicity[c] / unit)
                        for c in range(classes.n))
        x, value, solve_s = lp.solve(objective, method=self.method, policy=self.name)
        return Allocation(x[classes.index], objective=value * unit, status="optimal",
                          solver=f"highs-{self.method}", build_s=lp.build_s, solve_s=solve_s,
                          n_classes=classes.n)
