"""What every policy returns, and the interface the mechanism calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from planner.policies.problem import Problem


@dataclass
class Allocation:
    """x[i, j]: fraction of wall-clock time job i should run on worker type j (on s_i GPUs)."""

    x: np.ndarray
    objective: float | None = None
    status: str = "closed-form"
    solver: str | None = None
    build_s: float = 0.0
    solve_s: float = 0.0
    n_classes: int | None = None
    # Packing policies: time fractions of co-located pairs, keyed by (job id, job id).
    pair_x: dict[tuple[str, str], np.ndarray] | None = None
    info: dict = field(default_factory=dict)


class Policy(Protocol):
    name: str
    perf_aware: bool  # False: blind to heterogeneity (treats all types alike)
    fifo: bool  # mechanism never runs entries with priority <= 0

    def allocate(self, problem: Problem) -> Allocation: ...


def empty_allocation(problem: Problem) -> Allocation:
    return Allocation(np.zeros((problem.n_jobs, len(problem.worker_types))), status="no jobs")
