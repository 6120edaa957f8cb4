"""Finish-time fairness (Themis-style, spec §4.6).

ρ_i(x) = (a_i + R_i / y_i(x)) / (H_i + R_i / iso_i): the job's predicted
completion time under x relative to running alone on its 1/n share of the
cluster (H_i accumulates the isolated-time equivalent of progress made so
far, so the ratio is over the whole life of the job). Minimise max_i ρ_i.

ρ is quasi-convex, so we bisect on t: ρ_i <= t  <=>  y_i >= R_i / (t c_i - a_i)
(c_i = H_i + R_i / iso_i), a linear feasibility problem. One persistent HiGHS
model is re-solved with new right-hand sides (dual simplex restarts from the
previous basis). The answer is the allocation at the smallest feasible t.

The per-job history H_i, R_i and iso_i of the previous call lives in the
policy object (`get_state` / `set_state` for next-round planning).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from planner.policies.base import Allocation, Status
from planner.policies.closed_form import isolated_allocation
from planner.policies.lp.highs import BoundProbe
from planner.policies.lp.matrix import INF, MatrixLP
from planner.policies.no_jobs import unless_no_jobs
from planner.policies.problem import Problem
from planner.policies.space import Space, build_space

RELATIVE_GAP = 1e-6


def agnostic_throughput(problem: Problem, gavel_compat: bool = False) -> np.ndarray:
    """What a heterogeneity-blind policy believes: every GPU as fast as an average one.

    Gavel (issue #248) copied the v100 column to every type instead; that is
    kept behind `gavel_compat` (falling back to the first type without a v100).
    """
    tput = problem.throughput
    runnable = tput > 0
    if gavel_compat:
        ref = problem.worker_types.index("v100") if "v100" in problem.worker_types else 0
        return np.repeat(tput[:, ref : ref + 1], tput.shape[1], axis=1)
    weights = np.where(runnable, problem.capacity[None, :], 0.0)
    mean = (tput * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-300)
    return np.where(runnable, mean[:, None], 0.0)


@dataclass
class FinishTimeFairness:
    perf_aware: bool = True
    packed: bool = False
    aggregate: bool = True
    method: str = "simplex"
    gavel_compat: bool = False
    fifo: bool = False
    history: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # id -> (H, R, iso)

    @property
    def name(self) -> str:
        if self.packed:
            return "finish_time_fairness_packed"
        return "finish_time_fairness_perf" if self.perf_aware else "finish_time_fairness"

    def get_state(self) -> dict:
        return {"history": {k: list(v) for k, v in self.history.items()}}

    def set_state(self, state: dict) -> None:
        self.history = {k: tuple(v) for k, v in state.get("history", {}).items()}

    def _update_history(self, problem: Problem, iso: np.ndarray) -> np.ndarray:
        held = np.zeros(problem.n_jobs)
        fresh = {}
        for i, jid in enumerate(problem.job_ids):
            h, r_prev, iso_prev = self.history.get(jid, (0.0, problem.remaining[i], iso[i]))
            if iso_prev > 0:
                h += (r_prev - problem.remaining[i]) / iso_prev
            held[i] = h
            fresh[jid] = (float(h), float(problem.remaining[i]), float(iso[i]))
        self.history = fresh  # departed jobs drop out
        return held

    @unless_no_jobs
    def allocate(self, problem: Problem) -> Allocation:
        started = time.perf_counter()
        seen_problem = policy_view(problem, self.perf_aware or self.packed, self.gavel_compat)
        seen = seen_problem.throughput
        x_iso = isolated_allocation(seen_problem)
        iso = (seen * x_iso).sum(axis=1)
        held = self._update_history(problem, iso)
        remaining = np.maximum(problem.remaining, 1e-9)
        since = problem.time_since_start
        c = held + remaining / iso
        rho_iso = (since + remaining / iso) / c
        lo = float(np.max(since / c))
        hi = float(np.max(rho_iso))
        space = build_space(
            seen_problem, seen, problem.weight, remaining, since, held, packed=self.packed, aggregate=self.aggregate
        )
        rep = space.classes.representative
        scale = float(np.max(seen)) or 1.0  # keep rows of order one
        lp, column, rows = need_rows_lp(space, 1.0 / scale)
        build_s = time.perf_counter() - started
        probe = BoundProbe(lp, rows, method=self.method, policy=self.name)

        def feasible(t: float) -> tuple[np.ndarray, float, float] | None:
            begun = time.perf_counter()
            result = probe.solve(np.array(needed_rates(t, rep, remaining, since, c, scale)))
            return None if result is None else (result[0], result[1], time.perf_counter() - begun)

        best, hi, total_s, probes = bisect(feasible, lo, hi)
        if best is None:  # isolated is always feasible; only numerical trouble lands here
            return Allocation(
                x_iso, objective=float(np.max(rho_iso)), status=Status.FALLBACK_ISOLATED, info={"probes": probes}
            )
        x, z = space.read(best[0], column, signed_zeros=not self.packed)
        return space.allocation(problem, x, z, hi, method=self.method, build_s=build_s, solve_s=total_s, probes=probes)


def need_rows_lp(space: Space, factor: float) -> tuple[MatrixLP, np.ndarray, np.ndarray]:
    """A feasibility LP: factor · (throughput of c) >= need_c for every class, need_c set per
    probe (`BoundProbe`), between the space's head and tail rows. Returns (LP, column of each
    variable, the need rows)."""
    lp = space.builder()
    lp.add(space.head)
    rows = lp.add(space.throughput_rows(np.full(space.classes.n, factor)).bounded(0.0, INF))
    lp.add(space.tail)
    matrix, column = lp.build(np.zeros(lp.n_vars), maximize=False)
    return matrix, column, rows


def needed_rates(
    t: float, rep: np.ndarray, remaining: np.ndarray, since: np.ndarray, c: np.ndarray, scale: float
) -> list[float]:
    """Per class, the throughput (over `scale`) that keeps ρ <= t: y >= R / (t c - a);
    1e30 (infeasible) where even finishing now would exceed t."""
    return [float(remaining[i] / (t * c[i] - since[i]) / scale) if t * c[i] > since[i] else 1e30 for i in rep]


def bisect(feasible, lo: float, hi: float):
    """Smallest feasible t in (lo, hi] to RELATIVE_GAP: (best result, its t, solve seconds
    summed over feasible probes, probes). `feasible(t)` returns (x, objective, seconds) or None."""
    best, total_s, probes = None, 0.0, 0
    if hi > lo:
        best = feasible(hi)
        probes += 1
        if best is not None:
            total_s += best[2]
        while best is not None and (hi - lo) > RELATIVE_GAP * hi and probes < 100:
            mid = 0.5 * (lo + hi)
            result = feasible(mid)
            probes += 1
            if result is None:
                lo = mid
            else:
                best, hi = result, mid
                total_s += result[2]
    return best, hi, total_s, probes


def policy_view(problem: Problem, perf_aware: bool, gavel_compat: bool) -> Problem:
    """The problem as the policy sees it: true throughputs, or the agnostic belief."""
    if perf_aware:
        return problem
    return replace(problem, throughput=agnostic_throughput(problem, gavel_compat))
