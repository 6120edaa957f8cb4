"""What every policy returns, and the interface the mechanism calls."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import numpy as np

from planner.policies.problem import Problem


class Status(StrEnum):
    """How an allocation was obtained; written verbatim into schedules and state files."""

    CLOSED_FORM = "closed-form"
    OPTIMAL = "optimal"
    NO_JOBS = "no jobs"
    INFEASIBLE = "infeasible"
    FALLBACK_ISOLATED = "fallback: isolated"
    SLOS_DROPPED = "optimal (SLOs infeasible, dropped)"
    RESTORED = "restored"
    REUSED = "reused"  # the last solve's shares, its job classes unchanged (policies/reuse.py)


@dataclass
class Allocation:
    """x[i, j]: fraction of wall-clock time job i should run on worker type j (on s_i GPUs)."""

    x: np.ndarray
    objective: float | None = None
    status: Status = Status.CLOSED_FORM
    solver: str | None = None
    build_s: float = 0.0
    solve_s: float = 0.0
    n_classes: int | None = None
    # Packing policies: time fractions of co-located pairs, keyed by (job id, job id).
    pair_x: dict[tuple[str, str], np.ndarray] | None = None
    info: dict = field(default_factory=dict)

    def summary(self) -> Allocation:
        """The same record without its per-job parts (x with no rows, no pairs, no info):
        what a run keeps of its earlier re-solves."""
        return replace(self, x=np.zeros((0, self.x.shape[1])), pair_x=None, info={})


class Policy(Protocol):
    # Read-only: a policy may compute these from its options.
    @property
    def name(self) -> str: ...

    @property
    def perf_aware(self) -> bool: ...  # False: blind to heterogeneity (treats all types alike)

    @property
    def fifo(self) -> bool: ...  # the mechanism never runs entries with priority <= 0

    def allocate(self, problem: Problem) -> Allocation: ...


@runtime_checkable
class Stateful(Protocol):
    """A policy that remembers something between calls (history, random stream, partners).

    Next-round mode saves `get_state()` in the state file and hands it back through
    `set_state()`, so K single-round calls equal one K-round plan. The state must be
    JSON-encodable with planner's state encoder (tuples, dict keys of tuples, random streams);
    entries named like private attributes (`_rng`) are filed under the state file's
    `memory.attributes`, the others under `memory.state`. `set_state` may receive another
    policy's state (the policy changed between calls): it takes what it knows.
    """

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any]) -> None: ...


def copy_random(rng: random.Random) -> random.Random:
    """An independent random stream in the same state (what get_state hands out)."""
    twin = random.Random()
    twin.setstate(rng.getstate())
    return twin


def empty_allocation(problem: Problem) -> Allocation:
    return Allocation(np.zeros((problem.n_jobs, len(problem.worker_types))), status=Status.NO_JOBS)
