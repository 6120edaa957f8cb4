"""Fewer re-solves for least attained service: reuse the last solve while the job classes stay.

A simulation re-solves LAS whenever a job arrives or finishes. Often the jobs that came or went
belong to classes that were already there (same seen throughputs, scale factor and weight): the
set of classes is unchanged and only their sizes moved. `ReusingMaxMinFairness` then gives
every job its class's share from the last solve instead of solving again, at most
`reuse_limit` times in a row (the next call solves, whatever the classes).

The shares are not re-optimised for the new class sizes: a class that grew keeps its members'
shares, so a worker type may be asked for more GPU time than it has until the next solve (the
round mechanism places by priority, as it does for any allocation). What that costs is
measured, not assumed: `benchmarks/bench_simulate.py --candidate reuse:N` checks issue #31's
bounds (average JCT within 0.5 %, makespan within 1 % of the interior-point reference) on every
recorded point. Off by default (`--reuse-solves 0`).

The last solve's shares and the count of reuses in a row are the policy's memory
(`get_state` / `set_state`), so `plan-next` resumed from a state file reuses exactly when the
simulation does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.policies.base import Allocation, Status
from planner.policies.max_min_fairness import MaxMinFairness, seen_throughput
from planner.policies.problem import Problem

MAX_REUSE_LIMIT = 100  # --reuse-solves above this is refused: a lost bound on the answers


@dataclass
class LastSolve:
    """What a reuse needs of the last solve: each class's share, and what made the LP."""

    shares: dict[tuple[float, ...], list[float]]  # class key -> x row of its members
    worker_types: list[str]
    capacity: list[float]
    objective: float | None
    policy: str  # who solved it: another LAS variant or method reads the same keys differently
    method: str
    in_row: int = 0  # reuses since this solve


@dataclass
class ReusingMaxMinFairness(MaxMinFairness):
    reuse_limit: int = 1
    reused: int = 0  # allocations given without a solve, over the policy's life
    _last: LastSolve | None = field(default=None, repr=False)

    def class_keys(self, problem: Problem) -> list[tuple[float, ...]] | None:
        """Each job's class as the LP groups them (seen throughputs, scale factor, weight);
        None where classes mean more than that (packing, tenant quotas, one class per job)."""
        if self.packed or not self.aggregate or problem.quotas() is not None:
            return None
        seen, _ = seen_throughput(problem, self.perf_aware)
        table = np.hstack([seen, problem.scale[:, None], problem.weight[:, None]])
        return list(map(tuple, table.tolist()))

    def allocate(self, problem: Problem) -> Allocation:
        keys = self.class_keys(problem) if problem.n_jobs else None
        last = self._last
        if keys is not None and last is not None and self._may_reuse(last, problem, keys):
            last.in_row += 1
            self.reused += 1
            x = np.array([last.shares[k] for k in keys], dtype=float)
            return Allocation(
                x,
                objective=None,  # no LP was solved for these jobs: the last solve's is in info
                status=Status.REUSED,
                solver=f"highs-{self.method}",
                n_classes=len(last.shares),
                info={"reused_in_row": last.in_row, "last_solve_objective": last.objective},
            )
        allocation = super().allocate(problem)
        if keys is None:
            self._last = None
            return allocation
        shares: dict[tuple[float, ...], list[float]] = {}
        for key, row in zip(keys, allocation.x.tolist()):
            shares.setdefault(key, row)
        self._last = LastSolve(
            shares, list(problem.worker_types), problem.capacity.tolist(), allocation.objective, self.name, self.method
        )
        return allocation

    def _may_reuse(self, last: LastSolve, problem: Problem, keys: list[tuple[float, ...]]) -> bool:
        return (
            last.in_row < self.reuse_limit
            and last.worker_types == list(problem.worker_types)
            and last.capacity == problem.capacity.tolist()  # a drained node changes the LP
            and set(keys) == last.shares.keys()
        )

    def get_state(self) -> dict[str, Any]:
        last = self._last
        if last is None:
            return {"reused": self.reused, "last_solve": None}
        return {
            "reused": self.reused,
            "last_solve": {
                "policy": last.policy,
                "method": last.method,
                "classes": [list(k) for k in last.shares],
                "shares": list(last.shares.values()),
                "worker_types": last.worker_types,
                "capacity": last.capacity,
                "objective": last.objective,
                "in_row": last.in_row,
            },
        }

    def set_state(self, state: dict[str, Any]) -> None:
        reused = state.get("reused", 0)
        self.reused = reused if isinstance(reused, int) and not isinstance(reused, bool) and reused >= 0 else 0
        saved = state.get("last_solve")
        self._last = None
        # Another policy's state, nothing solved yet, or a solve by another LAS variant or method
        # (the same keys, another LP): the next re-solve solves.
        if not isinstance(saved, dict) or saved.get("policy") != self.name or saved.get("method") != self.method:
            return
        self._last = read_last_solve(saved, self.name, self.method)


def read_last_solve(saved: dict[str, Any], policy: str, method: str) -> LastSolve:
    """The saved last solve, checked: InputError (one line) naming the field for anything that
    this version did not write (a reused share must be a number in [0, 1] per worker type)."""
    where = "memory.state.last_solve"

    def numbers(value: Any, what: str, width: int | None = None) -> list[float]:
        ok = isinstance(value, list) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value
        )
        if not ok or (width is not None and len(value) != width):
            size = "" if width is None else f" of {width}"
            raise InputError(f"{what} must be a list{size} finite numbers", field=where)
        return [float(v) for v in value]

    types = saved.get("worker_types")
    if not isinstance(types, list) or not types or not all(isinstance(w, str) for w in types):
        raise InputError("worker_types must be a list of names", field=where)
    capacity = numbers(saved.get("capacity"), "capacity", len(types))
    classes, shares = saved.get("classes"), saved.get("shares")
    if not isinstance(classes, list) or not isinstance(shares, list) or len(classes) != len(shares) or not classes:
        raise InputError("classes and shares must be lists of the same length", field=where)
    table: dict[tuple[float, ...], list[float]] = {}
    for key, share in zip(classes, shares):
        row = numbers(share, "each share", len(types))
        if not all(0.0 <= v <= 1.0 for v in row):
            raise InputError("each share must lie in [0, 1]", field=where)
        table[tuple(numbers(key, "each class", len(types) + 2))] = row
    objective, in_row = saved.get("objective"), saved.get("in_row", 0)
    if objective is not None:
        objective = numbers([objective], "objective")[0]
    if not isinstance(in_row, int) or isinstance(in_row, bool) or in_row < 0:
        raise InputError("in_row must be a whole number >= 0", field=where)
    return LastSolve(table, list(types), capacity, objective, policy, method, in_row)
