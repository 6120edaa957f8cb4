"""FIFO (spec §4.4): whole jobs, in arrival order, one worker type each (x = 1).

`fifo_perf` gives each job, in order, the fastest type that still has room.
`fifo` keeps running jobs where they are and gives each queued job a random
type with room; Gavel's version always ended up on the last type of the
cluster spec (spec §13.3 bug 1), here the drawn type is the one used.
Strict FIFO: the first job that fits nowhere blocks the queue.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from planner.policies.base import Allocation, empty_allocation
from planner.problem import Problem


@dataclass
class Fifo:
    perf_aware: bool = True
    seed: int = 0
    gavel_compat: bool = False  # fifo only: Gavel's bug, every queued job on the last spec type
    fifo: bool = True
    _previous: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self._rng = random.Random(self.seed)

    @property
    def name(self) -> str:
        return "fifo_perf" if self.perf_aware else "fifo"

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        n, m = problem.throughput.shape
        x = np.zeros((n, m))
        free = problem.capacity.astype(float).copy()
        tput, scale = problem.throughput, problem.scale
        # Arrival order; ties keep input order.
        order = sorted(range(n), key=lambda i: -problem.time_since_start[i])
        placed: set[int] = set()
        if not self.perf_aware:  # keep running jobs on their type
            index = {job_id: i for i, job_id in enumerate(problem.job_ids)}
            for job_id, j in self._previous.items():
                i = index.get(job_id)
                if i is not None and free[j] >= scale[i] and tput[i, j] > 0:
                    x[i, j] = 1.0
                    free[j] -= scale[i]
                    placed.add(i)
        for i in order:
            if i in placed:
                continue
            if self.gavel_compat and not self.perf_aware:
                # Gavel HEAD draws a type but keeps the loop variable: the last type it registered
                # (types sorted by name: v100 of k80/p100/v100), even past its capacity (spec §4.4).
                if not any(free[j] >= scale[i] for j in range(m)):
                    break
                j = max(range(m), key=lambda k: problem.worker_types[k])
                if tput[i, j] > 0:
                    x[i, j] = 1.0
                    free[j] -= scale[i]
                    placed.add(i)
                continue
            fits = [j for j in range(m) if free[j] >= scale[i] and tput[i, j] > 0]
            if not fits:
                break
            if self.perf_aware:
                j = max(fits, key=lambda k: tput[i, k])  # first type wins ties
            else:
                j = self._rng.choice(fits)
            x[i, j] = 1.0
            free[j] -= scale[i]
            placed.add(i)
        if not self.perf_aware:
            self._previous = {problem.job_ids[i]: int(np.argmax(x[i])) for i in placed}
        return Allocation(x, status="closed-form")


PACKING_THRESHOLD = 1.5


@dataclass
class FifoPacked:
    """`fifo_perf`, then each still-queued job joins a running job of equal scale
    factor on its type when their summed normalised co-located throughput
    exceeds 1.5 (the best such partner; spec §4.4)."""

    name: str = "fifo_packed"
    perf_aware: bool = True
    fifo: bool = True

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        if problem.table is None:
            from planner.errors import InputError
            raise InputError("fifo_packed needs the throughput table for co-located pairs", field="partner_model")
        base = Fifo(perf_aware=True).allocate(problem)
        x = base.x.copy()
        order = sorted(range(problem.n_jobs), key=lambda i: -problem.time_since_start[i])
        alone = {i: int(np.argmax(x[i])) for i in range(problem.n_jobs) if x[i].sum() > 0}
        pair_x: dict[tuple[str, str], np.ndarray] = {}
        for i in order:
            if x[i].sum() > 0 or any(i in p for p in pair_x):
                continue
            best, best_score = None, PACKING_THRESHOLD
            for k, j in alone.items():
                if problem.scale[k] != problem.scale[i]:
                    continue
                w = problem.worker_types[j]
                own, other = problem.table.pair(w, problem.job_types[i], problem.job_types[k])
                if own <= 0 or other <= 0 or problem.throughput[i, j] <= 0:
                    continue
                score = own / problem.throughput[i, j] + other / problem.throughput[k, j]
                if score > best_score:
                    best, best_score = k, score
            if best is None:
                break  # strict FIFO: the queue stops at the first job nobody can host
            j = alone.pop(best)
            x[best, j] = 0.0
            row = np.zeros(x.shape[1])
            row[j] = 1.0
            ids = tuple(sorted((problem.job_ids[i], problem.job_ids[best])))
            pair_x[ids] = row
        return Allocation(x, status="closed-form", pair_x=pair_x)
