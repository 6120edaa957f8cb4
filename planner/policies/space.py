"""Build the allocation space a policy optimises over, and read the answer back.

One call covers the four cases every LP policy has: per job or per class of
identical jobs, and with or without space sharing.
"""

from __future__ import annotations

import numpy as np

from planner.errors import InputError
from planner.policies.base import Allocation, Status
from planner.policies.lp import AllocationLP, Classes, make_classes
from planner.policies.packing import PackedLP, pair_allocation
from planner.policies.problem import Problem


def job_type_codes(problem: Problem) -> np.ndarray:
    codes: dict = {}
    return np.array([codes.setdefault(jt, len(codes)) for jt in problem.job_types], dtype=float)


def space_classes(
    problem: Problem, seen: np.ndarray, *keys: np.ndarray, packed: bool = False, aggregate: bool = True
) -> Classes:
    """Jobs agreeing on `seen` throughputs, scale factor and `keys` (and job type, if packed) share a class."""
    if packed:
        if problem.table is None or not problem.table.has_pairs():
            raise InputError(
                "packing policies need co-located pair rows in the throughput table "
                "(profile pairs, or fill them with 'rota table estimate')",
                field="partner_model",
            )
        keys = keys + (job_type_codes(problem),)
    return make_classes(seen, problem.scale, *keys, aggregate=aggregate)


def build_space(
    problem: Problem, seen: np.ndarray, *keys: np.ndarray, packed: bool = False, aggregate: bool = True
) -> tuple[AllocationLP, Classes]:
    """LP over `seen` throughputs, one row per class (`space_classes`)."""
    classes = space_classes(problem, seen, *keys, packed=packed, aggregate=aggregate)
    rep = classes.representative
    if packed:
        lp = PackedLP(
            seen[rep],
            problem.scale[rep],
            problem.capacity,
            classes.multiplicity,
            [problem.job_types[i] for i in rep],
            problem.worker_types,
            problem.table,
        )
    else:
        lp = AllocationLP(seen[rep], problem.scale[rep], problem.capacity, classes.multiplicity)
    return lp, classes


def read_allocation(
    lp: AllocationLP,
    classes: Classes,
    problem: Problem,
    x: np.ndarray,
    objective: float,
    solve_s: float,
    method: str,
    **info,
) -> Allocation:
    pair_x = None
    if isinstance(lp, PackedLP):
        pair_x = pair_allocation(lp.pairs, lp.m, lp.pair_values(), classes.index, problem.job_ids)
    return Allocation(
        x[classes.index],
        objective=objective,
        status=Status.OPTIMAL,
        solver=f"highs-{method}",
        build_s=lp.build_s,
        solve_s=solve_s,
        n_classes=classes.n,
        pair_x=pair_x,
        info=info,
    )
