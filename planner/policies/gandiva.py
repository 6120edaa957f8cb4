"""Gandiva (spec §4.9): heterogeneity-blind equal shares, random packing under load.

When the jobs need more GPUs than exist, unpaired jobs are paired at random
(equal scale factors, and only where the table has a co-located throughput);
a pair that turns out to hurt — its members' summed normalised co-located
throughput below 1 on the types where it can run — is dissolved next call.
Gavel summed that measure over *all* types and only ever dissolved pairs
with a zero somewhere (spec §13.3 bug 9); here it is averaged over the types
where the pair runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.policies.base import Allocation, Status, copy_random
from planner.policies.no_jobs import unless_no_jobs
from planner.policies.problem import Problem

Pair = tuple[str, str]


@dataclass
class Gandiva:
    seed: int = 0
    name: str = "gandiva"
    perf_aware: bool = False
    fifo: bool = False
    partner: dict[str, str] = field(default_factory=dict)  # symmetric job pairing

    def __post_init__(self):
        self._rng = random.Random(self.seed)

    def get_state(self) -> dict[str, Any]:
        return {"partner": dict(self.partner), "_rng": copy_random(self._rng)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.partner = dict(state.get("partner", {}))
        if "_rng" in state:
            self._rng = copy_random(state["_rng"])

    def _pair_rates(self, problem: Problem, a: int, b: int) -> list[tuple[int, float, float]]:
        table = problem.table
        assert table is not None  # allocate() refuses problems without one
        out = []
        for j, w in enumerate(problem.worker_types):
            ra, rb = table.pair(w, problem.job_types[a], problem.job_types[b])
            if ra > 0 and rb > 0 and problem.throughput[a, j] > 0 and problem.throughput[b, j] > 0:
                out.append((j, ra / problem.throughput[a, j], rb / problem.throughput[b, j]))
        return out

    def _helps(self, problem: Problem, a: int, b: int) -> bool:
        rates = self._pair_rates(problem, a, b)
        return bool(rates) and float(np.mean([fa + fb for _, fa, fb in rates])) >= 1.0

    @unless_no_jobs
    def allocate(self, problem: Problem) -> Allocation:
        if problem.table is None:
            raise InputError("gandiva needs the throughput table for co-located pairs", field="partner_model")
        index = {jid: i for i, jid in enumerate(problem.job_ids)}
        pairs: dict[Pair, tuple[int, int]] = {}
        if problem.scale.sum() > problem.capacity.sum():
            pairs = self._kept_pairs(problem, index)
            self._pair_at_random(problem, index, pairs)
        x, pair_x = self._equal_shares(problem, pairs)
        self.partner = {}
        for a_id, b_id in pairs:
            self.partner[a_id], self.partner[b_id] = b_id, a_id
        return Allocation(x, status=Status.CLOSED_FORM, pair_x=pair_x)

    def _kept_pairs(self, problem: Problem, index: dict[str, int]) -> dict[Pair, tuple[int, int]]:
        """Last call's pairs whose members are both still here and that still help."""
        pairs = {}
        for a_id, b_id in self.partner.items():
            if a_id < b_id and a_id in index and b_id in index and self._helps(problem, index[a_id], index[b_id]):
                pairs[(a_id, b_id)] = (index[a_id], index[b_id])
        return pairs

    def _pair_at_random(self, problem: Problem, index: dict[str, int], pairs: dict[Pair, tuple[int, int]]) -> None:
        """One random draw per unpaired job; a draw of two that cannot share a GPU is wasted."""
        paired = {i for ab in pairs.values() for i in ab}
        alone = [i for i in range(problem.n_jobs) if i not in paired]
        for _ in range(len(alone)):
            if len(alone) < 2:
                break
            a, b = self._rng.sample(alone, 2)
            if problem.scale[a] != problem.scale[b] or not self._pair_rates(problem, a, b):
                continue  # wasted attempt, as in Gandiva
            alone.remove(a)
            alone.remove(b)
            first, second = sorted((problem.job_ids[a], problem.job_ids[b]))
            pairs[(first, second)] = (index[first], index[second])

    def _equal_shares(
        self, problem: Problem, pairs: dict[Pair, tuple[int, int]]
    ) -> tuple[np.ndarray, dict[Pair, np.ndarray]]:
        """Every job alone and every pair gets the same share of each type where it runs."""
        n, m = problem.throughput.shape
        capacity = problem.capacity
        paired = {i for ab in pairs.values() for i in ab}
        combos = len(pairs) + (n - len(paired))
        x = np.zeros((n, m))
        for i in range(n):
            if i not in paired:
                row = np.where(problem.throughput[i] > 0, capacity / (combos * problem.scale[i]), 0.0)
                x[i] = row / max(1.0, row.sum())
        pair_x = {}
        for ids, (a, b) in pairs.items():
            runs = np.zeros(m)
            for j, _, _ in self._pair_rates(problem, a, b):
                runs[j] = 1.0
            row = runs * capacity / (combos * problem.scale[a])
            pair_x[ids] = row / max(1.0, row.sum())
        return x, pair_x
