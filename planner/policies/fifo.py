"""FIFO (spec §4.4): whole jobs, in arrival order, one worker type each (x = 1).

`fifo_perf` gives each job, in order, the fastest type that still has room.
`fifo` keeps running jobs where they are and gives each queued job a random
type with room; Gavel's version never used its draw (spec §13.3 bug 1), here
the drawn type is the one used. `gavel_compat` replays Gavel's FIFO base
state machine instead (`_gavel_base`).
Strict FIFO: the first job that fits nowhere blocks the queue.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.policies.base import Allocation, Status, copy_random, empty_allocation
from planner.policies.no_jobs import unless_no_jobs
from planner.policies.problem import Problem


@dataclass
class Fifo:
    perf_aware: bool = True
    seed: int = 0
    gavel_compat: bool = False  # fifo only: replay Gavel's buggy base mode
    fifo: bool = True
    _previous: dict[str, int] = field(default_factory=dict, repr=False)
    _gavel: dict[str, int] = field(default_factory=dict, repr=False)  # Gavel's job -> type memory
    _rank: dict[str, int] = field(default_factory=dict, repr=False)  # arrival rank (Gavel sorts by id)

    def __post_init__(self):
        self._rng = random.Random(self.seed)

    @property
    def name(self) -> str:
        return "fifo_perf" if self.perf_aware else "fifo"

    def get_state(self) -> dict[str, Any]:
        """Where running jobs are, Gavel's memory, and the random stream. The keys are the
        attribute names: state files have always listed them so."""
        return {
            "_previous": dict(self._previous),
            "_gavel": dict(self._gavel),
            "_rank": dict(self._rank),
            "_rng": copy_random(self._rng),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._previous = dict(state.get("_previous", self._previous))
        self._gavel = dict(state.get("_gavel", self._gavel))
        self._rank = dict(state.get("_rank", self._rank))
        if "_rng" in state:
            self._rng = copy_random(state["_rng"])

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            if self.gavel_compat:
                # Gavel's walk over no jobs forgets them all
                self._gavel.clear()
                self._rank.clear()
            return empty_allocation(problem)
        n, m = problem.throughput.shape
        x = np.zeros((n, m))
        free = problem.capacity.astype(float).copy()
        tput, scale = problem.throughput, problem.scale
        # Arrival order; ties keep input order.
        order = sorted(range(n), key=lambda i: -problem.time_since_start[i])
        if self.gavel_compat and not self.perf_aware:
            return self._gavel_base(problem, order)
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
        return Allocation(x, status=Status.CLOSED_FORM)

    def _gavel_base(self, problem: Problem, order: list[int]) -> Allocation:
        """Gavel HEAD's FIFO base mode, call for call (spec §4.4 [HEAD], §13.3 bug 1).

        Every job it ever placed keeps its type until it completes, however
        overcommitted that type is; the mechanism time-shares the type among them.
        """
        n, m = problem.throughput.shape
        ids, tput, scale, names = problem.job_ids, problem.throughput, problem.scale, problem.worker_types
        for i in order:
            self._rank.setdefault(ids[i], len(self._rank))
        index = {job_id: i for i, job_id in enumerate(ids)}
        free = problem.capacity.astype(float).copy()
        queue = [i for i in order if ids[i] not in self._gavel]
        # Walk the remembered jobs in id order. The free counts are only partly
        # tallied at each step (later running jobs are not yet subtracted), so a
        # completed job's type can go to the queue head although it is full.
        for job_id in sorted(self._gavel, key=self._rank.__getitem__):
            j = self._gavel[job_id]
            if job_id in index:
                free[j] -= scale[index[job_id]]
                continue
            del self._gavel[job_id], self._rank[job_id]
            if queue and scale[queue[0]] <= free[j] and tput[queue[0], j] > 0:
                self._gavel[ids[queue[0]]] = j
                free[j] -= scale[queue.pop(0)]
        listed = sorted((j for j in range(m) if free[j] > 0), key=lambda j: names[j])
        while queue and listed:
            i = queue.pop(0)  # popped even when it ends up unplaced (it is re-queued next call)
            fits = [k for k, j in enumerate(listed) if free[j] >= scale[i]]
            if not fits:
                break
            drawn = self._rng.randrange(len(fits))
            # The draw is never read back: the type is whatever the fit scan's loop
            # variable last held, the last listed type by name (v100 while it is
            # listed, p100 once v100 has gone, ...).
            j = listed[-1]
            if tput[i, j] > 0:
                self._gavel[ids[i]] = j
                free[j] -= scale[i]
                if free[j] == 0:
                    listed.pop(fits[drawn])  # delists the drawn type, not the one just filled
        x = np.zeros((n, m))
        for job_id, j in self._gavel.items():
            x[index[job_id], j] = 1.0
        return Allocation(x, status=Status.CLOSED_FORM)


PACKING_THRESHOLD = 1.5


@dataclass
class FifoPacked:
    """`fifo_perf`, then each still-queued job joins a running job of equal scale
    factor on its type when their summed normalised co-located throughput
    exceeds 1.5 (the best such partner; spec §4.4)."""

    name: str = "fifo_packed"
    perf_aware: bool = True
    fifo: bool = True

    @unless_no_jobs
    def allocate(self, problem: Problem) -> Allocation:
        if problem.table is None:
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
            first, second = sorted((problem.job_ids[i], problem.job_ids[best]))
            pair_x[(first, second)] = row
        return Allocation(x, status=Status.CLOSED_FORM, pair_x=pair_x)
