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
import pyomo.environ as pyo

from planner.policies.base import Allocation, Status, empty_allocation
from planner.policies.closed_form import isolated_allocation
from planner.policies.lp import Classes
from planner.policies.matrix_lp import INF, allocation_rows, load_matrix, run_loaded
from planner.policies.problem import Problem
from planner.policies.space import build_space, read_allocation, space_classes

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
    backend: str = "highs"  # "pyomo": the reference formulation, a persistent Pyomo model

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

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
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
        if self.backend == "highs" and not self.packed:
            classes = space_classes(
                seen_problem, seen, problem.weight, remaining, since, held, aggregate=self.aggregate
            )
            if (seen[classes.representative] > 0).any(axis=1).all():  # else: Pyomo's handling of empty rows
                return self._bisect_direct(problem, seen, classes, remaining, since, c, lo, hi, x_iso, rho_iso)
        lp, classes = build_space(
            seen_problem, seen, problem.weight, remaining, since, held, packed=self.packed, aggregate=self.aggregate
        )
        rep = classes.representative
        model = lp.model
        scale = float(np.max(seen)) or 1.0  # keep rows of order one
        model.need = pyo.Param(range(classes.n), mutable=True, initialize=0.0)
        for k in range(len(rep)):
            model.extra.add(lp.throughput_expr(k, 1.0 / scale) >= model.need[k])
        lp.set_objective(0.0 * model.x[0] if len(lp.cells) else 0.0, sense=pyo.minimize)

        def feasible(t: float):
            for k, value in enumerate(needed_rates(t, rep, remaining, since, c, scale)):
                model.need[k] = value
            return lp.run(method=self.method, policy=self.name, allow_infeasible=True)

        best, hi, total_s, probes = bisect(feasible, lo, hi)
        if best is None:  # isolated is always feasible; only numerical trouble lands here
            return Allocation(
                x_iso, objective=float(np.max(rho_iso)), status=Status.FALLBACK_ISOLATED, info={"probes": probes}
            )
        x = best[0]
        return read_allocation(lp, classes, problem, x, hi, total_s, self.method, probes=probes)

    def _bisect_direct(
        self,
        problem: Problem,
        seen: np.ndarray,
        classes: Classes,
        remaining: np.ndarray,
        since: np.ndarray,
        c: np.ndarray,
        lo: float,
        hi: float,
        x_iso: np.ndarray,
        rho_iso: np.ndarray,
    ) -> Allocation:
        """`allocate`'s bisection on the LP as a matrix (the Pyomo model's rows and columns, in its
        order): one HiGHS model per call, each probe changes the need rows' lower bounds and
        re-solves from the previous basis, as the persistent Pyomo model did."""
        started = time.perf_counter()
        rep = classes.representative
        tput = seen[rep]
        base = allocation_rows(tput, problem.scale[rep] * classes.multiplicity, problem.capacity)
        scale = float(np.max(seen)) or 1.0  # keep rows of order one
        k, n = len(rep), base.n_cols
        # need rows: Σ_j T[c, j] / scale · x[c, j] >= need_c (lower bound), columns class by class
        c_of, typ_of = base.cls[base.by_class], base.typ[base.by_class]
        weights = tput[c_of, typ_of] * (1.0 / scale)
        lp = base.with_rows(
            base.by_class,
            weights,
            base.per_class,
            np.zeros(k),
            np.full(k, INF),
            cost=np.zeros(n),
            col_lower=np.zeros(n),
            col_upper=np.ones(n),
            maximize=False,
        )
        first_need_row = len(base.lengths)
        need_rows = np.arange(first_need_row, first_need_row + k, dtype=np.int32)
        build_s = time.perf_counter() - started
        solver = None
        upper = np.full(k, INF)

        def feasible(t: float):
            nonlocal solver
            need = np.array(needed_rates(t, rep, remaining, since, c, scale))
            begun = time.perf_counter()
            if solver is None:
                lp.row_lower[first_need_row:] = need
                solver = load_matrix(lp, method=self.method, policy=self.name)
            else:
                solver.changeRowsBounds(k, need_rows, need, upper)
            result = run_loaded(solver, policy=self.name, allow_infeasible=True)
            if result is None:
                return None
            x = np.zeros(tput.shape)
            x[base.cls, base.typ] = result[0]
            return np.clip(x, 0.0, 1.0), result[1], time.perf_counter() - begun

        best, hi, total_s, probes = bisect(feasible, lo, hi)
        if best is None:  # isolated is always feasible; only numerical trouble lands here
            return Allocation(
                x_iso, objective=float(np.max(rho_iso)), status=Status.FALLBACK_ISOLATED, info={"probes": probes}
            )
        return Allocation(
            best[0][classes.index],
            objective=hi,
            status=Status.OPTIMAL,
            solver=f"highs-{self.method}",
            build_s=build_s,
            solve_s=total_s,
            n_classes=classes.n,
            info={"probes": probes},
        )


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
