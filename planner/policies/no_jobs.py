"""The one answer every policy gives to a problem without jobs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from planner.policies.base import Allocation, empty_allocation
from planner.policies.problem import Problem

P = TypeVar("P")


def unless_no_jobs(allocate: Callable[[P, Problem], Allocation]) -> Callable[[P, Problem], Allocation]:
    """Wrap a policy's `allocate`: without jobs it returns the empty allocation (status
    'no jobs') and the policy itself never runs."""

    @functools.wraps(allocate)
    def guarded(policy: P, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        return allocate(policy, problem)

    return guarded
