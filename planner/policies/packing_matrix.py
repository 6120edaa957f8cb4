"""Packed max-min fairness (LAS with space sharing) handed to HiGHS as a matrix.

The same LP as `PackedLP` plus the fairness rows of `MaxMinFairness`, written
with `RowBuilder` in the order the Pyomo route hands it to HiGHS: the base
capacity and time rows still active (those of types and rows without pair
variables), then the fairness rows, then the packing rows in the order
`PackedLP._build_extra` adds them. Same rows, columns and coefficients, so the
interior-point answer is the same point (tests compare both routes). Through
Pyomo a simulation spent ~100 ms per re-solve building this model; here it
takes a few milliseconds.
"""

from __future__ import annotations

import time

import numpy as np

from planner.formats.table import JobType
from planner.policies.base import Allocation, Status
from planner.policies.matrix_lp import INF, MatrixLP, RowBuilder, solve_matrix
from planner.policies.packing import PairCells, group_pair_cells, pair_allocation, pair_cells
from planner.policies.problem import Problem
from planner.policies.space import space_classes


def packed_max_min_matrix(
    throughput: np.ndarray,
    scale: np.ndarray,
    capacity: np.ndarray,
    mult: np.ndarray,
    factor: np.ndarray,
    job_types: list[JobType],
    worker_types: list[str],
    table,
) -> tuple[MatrixLP, RowBuilder, PairCells]:
    k, m = throughput.shape
    pairs = pair_cells(throughput, mult, job_types, worker_types, table)
    cells, coef = pairs.cells, pairs.coef
    by_row, by_type = group_pair_cells(pairs)
    # Python lists: cheaper per element than numpy scalars, same float arithmetic.
    rate, runnable = throughput.tolist(), (throughput > 0).tolist()
    mult_, scale_, factor_ = mult.tolist(), scale.tolist(), factor.tolist()
    paired_types = {j for _, j, _ in cells}
    # Variable ids (plain ints hash fastest): x[c, j] = c·m + j, z[n] = k·m + n, t last.
    z0, t = k * m, k * m + len(cells)
    rows = RowBuilder()
    # Base rows that have no pair variables stay as AllocationLP wrote them.
    for j in range(m):
        if j not in paired_types:
            terms = [(c * m + j, float(mult_[c] * scale_[c])) for c in range(k) if runnable[c][j]]
            if terms:
                rows.add(terms, -INF, float(capacity[j]))
    for c in range(k):
        if not by_row.get(c):
            terms = [(c * m + j, 1.0) for j in range(m) if runnable[c][j]]
            if terms:
                rows.add(terms, -INF, 1.0)
    # Fairness: t - factor_c (Σ_j T x + Σ co-located T z) <= 0.
    for c in range(k):
        terms = [(c * m + j, -float(rate[c][j] * factor_[c])) for j in range(m) if runnable[c][j]]
        terms += [(z0 + n, -float(coef[n] * factor_[c])) for n in by_row.get(c, [])]
        rows.add([(t, 1.0)] + terms, -INF, 0.0)
    # Packing rows, as PackedLP._build_extra adds them.
    for c in range(k):
        if by_row.get(c):
            own = [(c * m + j, 1.0) for j in range(m) if runnable[c][j]]
            rows.add(own + [(z0 + n, 1.0) for n in by_row[c]], -INF, 1.0)
    pair_terms_of_type: dict[int, list] = {}
    for n, (c, j, _) in enumerate(cells):
        pair_terms_of_type.setdefault(j, []).append((z0 + n, 0.5 * float(mult_[c] * scale_[c])))
    for j in range(m):
        pair_terms = pair_terms_of_type.get(j)
        if pair_terms:
            solo = [(c * m + j, float(mult_[c] * scale_[c])) for c in range(k) if runnable[c][j]]
            rows.add(solo + pair_terms, -INF, float(capacity[j]))
    done = set()
    for (j, a, b), cells_ab in by_type.items():
        if a == b:
            total = [(z0 + n, -float(mult_[cells[n][0]])) for n in cells_ab]
            for n in cells_ab:
                rows.add([(z0 + n, 1.0 + mult_[cells[n][0]])] + total, -INF, 0.0)
            continue
        if (j, b, a) in done:
            continue
        done.add((j, a, b))
        lhs = [(z0 + n, float(mult_[cells[n][0]])) for n in cells_ab]
        rhs = [(z0 + n, -float(mult_[cells[n][0]])) for n in by_type.get((j, b, a), [])]
        rows.add(lhs + rhs, 0.0, 0.0)
    bounds = {var: (0.0, 1.0) for var in rows.column}
    bounds[t] = (-INF, INF)
    for (j, a, b), cells_ab in by_type.items():
        if a != b and (j, b, a) not in by_type:
            for n in cells_ab:  # the partner type has no way back: no pairing
                bounds[z0 + n] = (0.0, 0.0)
    return rows.matrix(bounds, {t: 1.0}), rows, pairs


def allocate_packed_max_min(
    problem: Problem, seen: np.ndarray, factor: np.ndarray, *, aggregate: bool, method: str, policy: str
) -> Allocation:
    started = time.perf_counter()
    classes = space_classes(problem, seen, problem.weight, packed=True, aggregate=aggregate)
    rep = classes.representative
    job_types = [problem.job_types[i] for i in rep]
    lp, rows, pairs = packed_max_min_matrix(
        seen[rep],
        problem.scale[rep],
        problem.capacity,
        classes.multiplicity,
        factor[rep],
        job_types,
        problem.worker_types,
        problem.table,
    )
    build_s = time.perf_counter() - started
    values, objective, solve_s = solve_matrix(lp, method=method, policy=policy)
    k, m = seen[rep].shape
    x = np.zeros((k, m))
    z = np.zeros(len(pairs.cells))
    for var, col in rows.column.items():
        if var < k * m:
            x[var // m, var % m] = values[col]
        elif var < k * m + len(z):
            z[var - k * m] = values[col]
    pair_x = pair_allocation(pairs, m, z, classes.index, problem.job_ids)
    return Allocation(
        np.clip(x, 0.0, 1.0)[classes.index],
        objective=objective,
        status=Status.OPTIMAL,
        solver=f"highs-{method}",
        build_s=build_s,
        solve_s=solve_s,
        n_classes=classes.n,
        pair_x=pair_x,
    )
