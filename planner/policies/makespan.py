"""Makespan: finish all jobs as early as possible (spec §4.7).

Exact: with u = 1/H, maximise u s.t. y_i(x) >= R_i u for every job — one LP,
H* = 1/u*. `gavel_compat` reproduces Gavel's bisection over H (ratio 1.05,
windows [100, 1e6], [1e6, 1e7], ...) which stops within 5 % of H*.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.policies.base import Allocation, Status
from planner.policies.finish_time_fairness import need_rows_lp, policy_view
from planner.policies.lp.highs import DEFAULT_METHOD, BoundProbe, solve_matrix
from planner.policies.lp.matrix import INF, MatrixLP
from planner.policies.no_jobs import unless_no_jobs
from planner.policies.problem import Problem
from planner.policies.space import Space, build_space

BISECTION_METHOD = "simplex"  # each probe re-solves from the previous basis


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

    @unless_no_jobs
    def allocate(self, problem: Problem) -> Allocation:
        started = time.perf_counter()
        seen_problem = policy_view(problem, self.perf_aware or self.packed, self.gavel_compat)
        seen = seen_problem.throughput
        remaining = np.maximum(problem.remaining, 1e-9)
        space = build_space(seen_problem, seen, remaining, packed=self.packed, aggregate=self.aggregate)
        if self.gavel_compat:
            return self._bisect(space, problem, remaining, started)
        r_max = float(remaining.max())
        # u' = r_max / H keeps the objective of order of a throughput
        lp, column = makespan_lp(space, remaining[space.classes.representative] / r_max)
        build_s = time.perf_counter() - started
        values, u, solve_s = solve_matrix(lp, method=self.method, policy=self.name)
        x, z = space.read(values, column)
        horizon = r_max / u if u > 0 else float("inf")
        return space.allocation(
            problem, x, z, horizon, method=self.method, build_s=build_s, solve_s=solve_s, makespan_s=horizon
        )

    def _bisect(self, space: Space, problem: Problem, remaining: np.ndarray, started: float) -> Allocation:
        """Gavel's search: the smallest horizon H (to a factor 1.05) at which every job can
        keep y_i >= R_i / H, trying windows [100, 1e6], then [1e6, 1e7], ... up to 1e12."""
        lp, column, rows = need_rows_lp(space, 1.0)
        build_s = time.perf_counter() - started
        probe = BoundProbe(lp, rows, method=BISECTION_METHOD, policy=self.name)
        rep = space.classes.representative
        lo, hi, best, total, probes = 100.0, 1e6, None, 0.0, 0
        while best is None and hi <= 1e12:
            while 1.05 * lo < hi:
                mid = 0.5 * (lo + hi)
                begun = time.perf_counter()
                result = probe.solve(remaining[rep] / mid)
                probes += 1
                if result is None:
                    lo = mid
                else:
                    best, hi, total = (result[0], mid), mid, total + (time.perf_counter() - begun)
            if best is None:
                lo, hi = hi, hi * 10
        if best is None:
            return Allocation(np.zeros((problem.n_jobs, len(problem.worker_types))), status=Status.INFEASIBLE)
        values, horizon = best
        x, z = space.read(values, column)
        return space.allocation(
            problem,
            x,
            z,
            horizon,
            method=BISECTION_METHOD,
            build_s=build_s,
            solve_s=total,
            makespan_s=horizon,
            probes=probes,
        )


def makespan_lp(space: Space, share: np.ndarray) -> tuple[MatrixLP, np.ndarray]:
    """maximise u  s.t.  share_c · u - (throughput of c) <= 0 for every class (share_c = R_c /
    max R, so u = max R / H), between the space's head and tail rows."""
    lp = space.builder()
    u = int(lp.variables(1, 0.0, INF)[0])
    lp.add(space.head)
    lp.add(space.throughput_rows(np.ones(space.classes.n)).scaled(-1.0).led_by(u, share).bounded(-INF, 0.0))
    lp.add(space.tail)
    cost = np.zeros(lp.n_vars)
    cost[u] = 1.0
    return lp.build(cost, maximize=True)
