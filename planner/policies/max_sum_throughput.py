"""Throughput maximisation, optionally per dollar and with SLOs (spec §4.8).

maximise Σ_i y_i / p_i  where p_i = 1, or s_i · c_j (the job's price per hour
on type j) for the cost-normalised variants; SLO jobs must keep
y_i >= R_i / D_i (D_i = seconds left to the deadline). If the SLOs cannot all
be met the problem is re-solved without them and the allocation says so
(`info["slo_dropped"]`), as Gavel does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.errors import InputError
from planner.policies.base import Allocation, Status
from planner.policies.lp.highs import DEFAULT_METHOD, load_matrix, run_loaded
from planner.policies.lp.matrix import INF, MatrixLP, Rows
from planner.policies.no_jobs import unless_no_jobs
from planner.policies.problem import Problem
from planner.policies.space import Space, build_space


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

    @unless_no_jobs
    def allocate(self, problem: Problem) -> Allocation:
        price = self._price(problem)
        deadline = problem.slo_left_s if problem.slo_left_s is not None else np.full(problem.n_jobs, np.nan)
        with_slo = self.slos and bool(np.any(deadline > 0))
        if with_slo:
            result = self._solve(problem, price, deadline)
            if result is not None:
                return result
        allocation = self._solve(problem, price, None)
        assert allocation is not None  # only SLO rows make the LP infeasible
        if with_slo:
            allocation.info["slo_dropped"] = True
            allocation.status = Status.SLOS_DROPPED
        return allocation

    def _solve(self, problem: Problem, price: np.ndarray, deadline: np.ndarray | None) -> Allocation | None:
        """The optimum with the SLO rows of `deadline` (None: without), or None if they are infeasible."""
        started = time.perf_counter()
        tput = problem.throughput
        keys = [problem.remaining, np.nan_to_num(deadline, nan=-1.0)] if deadline is not None else []
        space = build_space(problem, tput, *keys, packed=self.packed, aggregate=self.aggregate)
        rep = space.classes.representative
        # Objective Σ_c n_c Σ_j (T / (s c_j)) x, divided by a constant to keep it of order one.
        per_dollar = tput / (problem.scale[:, None] * price[None, :]) if self.cost_normalized else tput
        unit = float(per_dollar.max()) * problem.n_jobs or 1.0
        solo = (
            1.0 / (problem.scale[rep, None] * price[None, :])
            if self.cost_normalized
            else np.ones((len(rep), len(price)))
        )
        # a co-located job pays half of its GPUs' price
        gain = space.throughput_rows(
            space.classes.multiplicity / unit, solo, 2.0 * solo if self.cost_normalized else solo
        )
        slo = None
        if deadline is not None:
            slo = deadline[rep] > 0
            slo_rows = space.throughput_rows(np.ones(len(rep))).select(slo)
            slo = slo_rows.bounded(problem.remaining[rep][slo] / deadline[rep][slo], INF)
        lp, column = throughput_lp(space, gain, slo)
        build_s = time.perf_counter() - started
        solver = load_matrix(lp, method=self.method, policy=self.name)
        begun = time.perf_counter()
        result = run_loaded(solver, policy=self.name, allow_infeasible=deadline is not None)
        if result is None:
            return None
        values, value = result
        x, z = space.read(values, column)
        return space.allocation(
            problem, x, z, value * unit, method=self.method, build_s=build_s, solve_s=time.perf_counter() - begun
        )


def throughput_lp(space: Space, gain: Rows, slo: Rows | None) -> tuple[MatrixLP, np.ndarray]:
    """maximise the sum of `gain`'s rows (one per class) over the space; `slo` rows (each
    class's throughput >= its rate needed) between the space's head and tail rows."""
    lp = space.builder()
    lp.add(space.head)
    if slo is not None:
        lp.add(slo)
    lp.add(space.tail)
    cost = np.zeros(lp.n_vars)
    cost[gain.index] = gain.value
    return lp.build(cost, maximize=True)
