"""Makespan: finish all jobs as early as possible (spec §4.7).

Exact: with u = 1/H, maximise u s.t. y_i(x) >= R_i u for every job — one LP,
H* = 1/u*. `gavel_compat` reproduces Gavel's bisection over H (ratio 1.05,
windows [100, 1e6], [1e6, 1e7], ...) which stops within 5 % of H*.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo

from planner.policies.base import Allocation, Status, empty_allocation
from planner.policies.finish_time_fairness import policy_view
from planner.policies.lp import DEFAULT_METHOD
from planner.policies.lp.pyomo_model import build_pyomo_space as build_space
from planner.policies.lp.pyomo_model import read_pyomo_allocation as read_allocation
from planner.policies.problem import Problem


@dataclass
class MinTotalDuration:
    perf_aware: bool = True
    packed: bool = False
    aggregate: bool = True
    method: str = DEFAULT_METHOD
    gavel_compat: bool = False
    fifo: bool = False

    @property
    def name(self) -> str:
        if self.packed:
            return "min_total_duration_packed"
        return "min_total_duration_perf" if self.perf_aware else "min_total_duration"

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        seen_problem = policy_view(problem, self.perf_aware or self.packed, self.gavel_compat)
        seen = seen_problem.throughput
        remaining = np.maximum(problem.remaining, 1e-9)
        lp, classes = build_space(seen_problem, seen, remaining, packed=self.packed, aggregate=self.aggregate)
        rep = classes.representative
        model = lp.model
        r_max = float(remaining.max())
        if self.gavel_compat:
            return self._bisect(lp, classes, problem, remaining, r_max)
        # u' = r_max / H keeps the objective of order of a throughput
        model.u = pyo.Var(bounds=(0.0, None))
        for k, i in enumerate(rep):
            model.extra.add(lp.throughput_expr(k) >= float(remaining[i] / r_max) * model.u)
        x, u, solve_s = lp.solve(model.u, method=self.method, policy=self.name)
        horizon = r_max / u if u > 0 else float("inf")
        return read_allocation(lp, classes, problem, x, horizon, solve_s, self.method, makespan_s=horizon)

    def _bisect(self, lp, classes, problem, remaining, r_max) -> Allocation:
        model = lp.model
        model.need = pyo.Param(range(classes.n), mutable=True, initialize=0.0)
        for k in range(len(classes.representative)):
            model.extra.add(lp.throughput_expr(k) >= model.need[k])
        lp.set_objective(0.0, sense=pyo.minimize)
        lo, hi, best, total, probes = 100.0, 1e6, None, 0.0, 0
        while best is None and hi <= 1e12:
            while 1.05 * lo < hi:
                mid = 0.5 * (lo + hi)
                for k, i in enumerate(classes.representative):
                    model.need[k] = float(remaining[i] / mid)
                result = lp.run(method="simplex", policy=self.name, allow_infeasible=True)
                probes += 1
                if result is None:
                    lo = mid
                else:
                    best, hi, total = (result, mid), mid, total + result[2]
            if best is None:
                lo, hi = hi, hi * 10
        if best is None:
            return Allocation(np.zeros((problem.n_jobs, len(problem.worker_types))), status=Status.INFEASIBLE)
        (x, _, _), horizon = best
        return read_allocation(lp, classes, problem, x, horizon, total, "simplex", makespan_s=horizon, probes=probes)
