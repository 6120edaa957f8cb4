"""Throughput maximisation, optionally per dollar and with SLOs (spec §4.8).

maximise Σ_i y_i / p_i  where p_i = 1, or s_i · c_j (the job's price per hour
on type j) for the cost-normalised variants; SLO jobs must keep
y_i >= R_i / D_i (D_i = seconds left to the deadline). If the SLOs cannot all
be met the problem is re-solved without them and the allocation says so
(`info["slo_dropped"]`), as Gavel does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import InputError
from planner.policies.base import Allocation, Status, empty_allocation
from planner.policies.lp import DEFAULT_METHOD
from planner.policies.lp.pyomo_model import build_pyomo_space as build_space
from planner.policies.lp.pyomo_model import read_pyomo_allocation as read_allocation
from planner.policies.problem import Problem


@dataclass
class MaxSumThroughput:
    cost_normalized: bool = False
    slos: bool = False
    packed: bool = False
    perf_aware: bool = True
    fifo: bool = False
    aggregate: bool = True
    method: str = DEFAULT_METHOD

    @property
    def name(self) -> str:
        if not self.cost_normalized:
            return "max_sum_throughput_perf"
        if self.packed:
            return "max_sum_throughput_normalized_by_cost_packed_SLOs"
        return "max_sum_throughput_normalized_by_cost_perf" + ("_SLOs" if self.slos else "")

    def _price(self, problem: Problem) -> np.ndarray:
        if not self.cost_normalized:
            return np.ones(len(problem.worker_types))
        if problem.cost is None:
            raise InputError(
                f"{self.name} needs cost_per_gpu_hour for every worker type in the cluster spec",
                field="cost_per_gpu_hour",
            )
        return np.maximum(problem.cost, 1e-9)

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        price = self._price(problem)
        deadline = problem.slo_left_s if problem.slo_left_s is not None else np.full(problem.n_jobs, np.nan)
        with_slo = self.slos and bool(np.any(deadline > 0))
        if with_slo:
            result = self._solve(problem, price, deadline)
            if result is not None:
                return result
        allocation = self._solve(problem, price, None)
        if with_slo:
            allocation.info["slo_dropped"] = True
            allocation.status = Status.SLOS_DROPPED
        return allocation

    def _solve(self, problem: Problem, price: np.ndarray, deadline: np.ndarray | None) -> Allocation | None:
        tput = problem.throughput
        keys = [problem.remaining, np.nan_to_num(deadline, nan=-1.0)] if deadline is not None else []
        lp, classes = build_space(problem, tput, *keys, packed=self.packed, aggregate=self.aggregate)
        rep = classes.representative
        # Objective Σ_c n_c Σ_j (T / (s c_j)) x, divided by a constant to keep it of order one.
        per_dollar = tput / (problem.scale[:, None] * price[None, :]) if self.cost_normalized else tput
        unit = float(per_dollar.max()) * problem.n_jobs or 1.0
        terms = []
        for k, i in enumerate(rep):
            solo = 1.0 / (problem.scale[i] * price) if self.cost_normalized else np.ones(len(price))
            # a co-located job pays half of its GPUs' price
            terms.append(
                lp.throughput_expr(
                    k, classes.multiplicity[k] / unit, solo, 2.0 * solo if self.cost_normalized else solo
                )
            )
        if deadline is not None:
            for k, i in enumerate(rep):
                if deadline[i] > 0:
                    lp.model.extra.add(lp.throughput_expr(k) >= float(problem.remaining[i] / deadline[i]))
        lp.set_objective(sum(terms))
        result = lp.run(method=self.method, policy=self.name, allow_infeasible=deadline is not None)
        if result is None:
            return None
        x, value, solve_s = result
        return read_allocation(lp, classes, problem, x, value * unit, solve_s, self.method)
