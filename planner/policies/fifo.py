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
