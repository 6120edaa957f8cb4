"""Policies with a formula instead of an optimisation: isolated and proportional."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.policies.base import Allocation
from planner.policies.no_jobs import unless_no_jobs
from planner.policies.problem import Problem


def isolated_allocation(problem: Problem) -> np.ndarray:
    """Equal 1/m share of every type, capped so a job's time sums to <= 1 (spec §4.0).

    Unlike Gavel, a type where the job cannot run gets no share (it would only
    be wasted there); on tables without zeros the result is Gavel's.
    """
    n = problem.n_jobs
    runnable = problem.throughput > 0
    share = np.where(runnable, problem.capacity[None, :] / (n * problem.scale[:, None]), 0.0)
    total = share.sum(axis=1, keepdims=True)
    return share / np.maximum(1.0, total)


@dataclass
class Isolated:
    name: str = "isolated"
    perf_aware: bool = False
    fifo: bool = False

    @unless_no_jobs
    def allocate(self, problem: Problem) -> Allocation:
        return Allocation(isolated_allocation(problem))


@dataclass
class Proportional:
    """x_ij = N_j / N (Gavel's normaliser), scaled down so that it fits the cluster.

    Gavel's raw proportional allocation over-commits the cluster when the jobs
    need more GPUs than exist; as a schedulable policy it is shrunk by
    min(1, N / Σ_i s_i) and restricted to types where each job can run.
    """

    name: str = "proportional"
    perf_aware: bool = False
    fifo: bool = False

    @unless_no_jobs
    def allocate(self, problem: Problem) -> Allocation:
        runnable = problem.throughput > 0
        x = np.where(runnable, problem.capacity[None, :] / problem.capacity.sum(), 0.0)
        need = (problem.scale[:, None] * x).sum(axis=0)
        factor = np.min(np.where(need > 0, problem.capacity / np.maximum(need, 1e-300), np.inf))
        return Allocation(x * min(1.0, factor))
