"""AlloX (spec §4.5): minimise the sum of completion times by matching jobs to GPUs.

Each free GPU w serves its jobs one after another; a job placed k-th from
last on w adds k · p_iw to the sum of completion times (p_iw = R_i / T_iw).
The min-cost matching of jobs to (position, GPU) slots is a transportation
LP whose optimum is integral (totally unimodular), solved with HiGHS. The
job first in line on each GPU runs (x = 1 on that GPU's type) until it
finishes; the rest wait for the next re-solve. Single-GPU jobs only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import time

import numpy as np
import pyomo.environ as pyo
from pyomo.contrib.appsi.base import TerminationCondition
from pyomo.contrib.appsi.solvers import Highs

from planner.errors import InputError, SolverError
from planner.policies.base import Allocation, empty_allocation
from planner.problem import Problem


@dataclass
class AlloX:
    alpha: float = 1.0
    name: str = "allox"
    perf_aware: bool = True
    fifo: bool = False
    running: dict[str, int] = field(default_factory=dict)  # job id -> worker type index

    def get_state(self) -> dict:
        return {"running": dict(self.running)}

    def set_state(self, state: dict) -> None:
        self.running = {k: int(v) for k, v in state.get("running", {}).items()}

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        too_big = [jid for jid, s in zip(problem.job_ids, problem.scale) if s != 1]
        if too_big:
            raise InputError(f"allox schedules single-GPU jobs only; job {too_big[0]!r} needs "
                             f"{int(problem.scale[problem.job_ids.index(too_big[0])])} GPUs", field="scale_factor")
        n, m = problem.throughput.shape
        x = np.zeros((n, m))
        free = problem.capacity.astype(int).copy()
        index = {jid: i for i, jid in enumerate(problem.job_ids)}
        kept = {}
        for jid, j in self.running.items():
            if jid in index and free[j] > 0:
                x[index[jid], j] = 1.0
                free[j] -= 1
                kept[jid] = j
        workers = [j for j in range(m) for _ in range(free[j])]
        candidates = sorted((i for i in range(n) if problem.job_ids[i] not in kept),
                            key=lambda i: -problem.time_since_start[i])
        candidates = candidates[:max(int(self.alpha * len(candidates)), len(workers))]
        solve_s = 0.0
        if candidates and workers:
            first, solve_s = _first_in_line(problem, candidates, workers)
            for i, j in first.items():
                x[i, j] = 1.0
                kept[problem.job_ids[i]] = j
        self.running = kept
        return Allocation(x, status="optimal", solver="highs-assignment", solve_s=solve_s)


def _first_in_line(problem: Problem, candidates: list[int], workers: list[int]) -> tuple[dict[int, int], float]:
    tput = problem.throughput
    # a job with no free GPU it can run on waits for the next re-solve
    candidates = [i for i in candidates if any(tput[i, w] > 0 for w in workers)]
    if not candidates:
        return {}, 0.0
    # a GPU never needs more positions than there are jobs competing for it
    positions = len(candidates)
    arcs = [(a, k, g) for a, i in enumerate(candidates) for g, w in enumerate(workers) if tput[i, w] > 0
            for k in range(1, positions + 1)]
    time_scale = max(float(np.max([problem.remaining[i] / tput[i].max() for i in candidates])), 1e-9)
    model = pyo.ConcreteModel()
    model.y = pyo.Var(range(len(arcs)), bounds=(0, 1))
    by_job, by_slot = {}, {}
    for n, (a, k, g) in enumerate(arcs):
        by_job.setdefault(a, []).append(n)
        by_slot.setdefault((k, g), []).append(n)
    model.one_slot = pyo.Constraint(list(by_job), rule=lambda mdl, a: sum(mdl.y[n] for n in by_job[a]) == 1)
    model.one_job = pyo.Constraint(list(by_slot), rule=lambda mdl, k, g: sum(mdl.y[n] for n in by_slot[(k, g)]) <= 1)
    model.cost = pyo.Objective(expr=sum(
        k * problem.remaining[candidates[a]] / tput[candidates[a], workers[g]] / time_scale * model.y[n]
        for n, (a, k, g) in enumerate(arcs)), sense=pyo.minimize)
    solver = Highs()
    solver.config.load_solution = False
    solver.highs_options = {"solver": "simplex"}
    started = time.perf_counter()
    results = solver.solve(model)
    elapsed = time.perf_counter() - started
    if results.termination_condition != TerminationCondition.optimal:
        raise SolverError(f"allox: HiGHS ended '{results.termination_condition.name}', not optimal")
    results.solution_loader.load_vars()
    best: dict[int, tuple[int, int]] = {}  # GPU -> (position from last, candidate)
    for n, (a, k, g) in enumerate(arcs):
        if (model.y[n].value or 0.0) > 0.5 and (g not in best or k > best[g][0]):
            best[g] = (k, a)
    return {candidates[a]: workers[g] for g, (k, a) in best.items()}, elapsed
