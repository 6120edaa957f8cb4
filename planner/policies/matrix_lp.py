"""LPs handed to HiGHS as a sparse matrix, without Pyomo in between.

The simulator re-solves a small LP (tens of rows) hundreds of times per
trace; through Pyomo's solver interface each solve costs ~10 ms, nearly all
of it translation and logging set-up, while HiGHS itself needs ~1 ms. Policies
whose LP is a fixed matrix pattern (max-min fairness) can build it here with
numpy instead; their Pyomo formulation stays as the reference, and tests
check both reach the same optimum.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import highspy
import numpy as np
from pyomo.common.tee import capture_output

from planner.errors import SolverError
from planner.policies.lp import highs_options

INF = highspy.kHighsInf


@dataclass
class MatrixLP:
    """min/max cost·v  s.t.  row_lower <= A v <= row_upper,  lower <= v <= upper; A row-wise (CSR)."""

    cost: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    row_start: np.ndarray  # (rows + 1,)
    row_index: np.ndarray
    row_value: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray
    maximize: bool = True


@dataclass
class AllocationRows:
    """AllocationLP's columns x[c, j] and its capacity and time rows (lp.py), as arrays, in
    the order Pyomo hands them to HiGHS: columns are the runnable cells by type, then row c
    (they first appear in the capacity rows); capacity rows for types with a cell, then time
    rows for classes with one. Policies append their own rows (`with_rows`)."""

    typ: np.ndarray  # column n is x[cls[n], typ[n]]
    cls: np.ndarray
    by_class: np.ndarray  # the columns again, class by class (type order within)
    per_class: np.ndarray  # how many columns each class has
    index: np.ndarray
    value: np.ndarray
    lengths: np.ndarray
    upper: np.ndarray

    @property
    def n_cols(self) -> int:
        return len(self.cls)

    def with_rows(
        self,
        index: np.ndarray,
        value: np.ndarray,
        lengths: np.ndarray,
        lower: np.ndarray,
        upper: np.ndarray,
        *,
        cost: np.ndarray,
        col_lower: np.ndarray,
        col_upper: np.ndarray,
        maximize: bool,
    ) -> MatrixLP:
        """The whole LP: these rows, then the given ones (over the same columns and any added)."""
        lengths = np.concatenate((self.lengths, lengths))
        start = np.zeros(len(lengths) + 1, dtype=np.int32)
        np.cumsum(lengths, out=start[1:])
        return MatrixLP(
            cost=cost,
            lower=col_lower,
            upper=col_upper,
            row_start=start,
            row_index=np.concatenate((self.index, index)).astype(np.int32),
            row_value=np.concatenate((self.value, value)),
            row_lower=np.concatenate((np.full(len(self.lengths), -INF), lower)),
            row_upper=np.concatenate((self.upper, upper)).astype(float),
            maximize=maximize,
        )


def allocation_rows(throughput: np.ndarray, gpus: np.ndarray, capacity: np.ndarray) -> AllocationRows:
    """`gpus[c]`: GPUs row c holds per unit of x (class size times scale factor)."""
    runnable = throughput > 0
    k, m = runnable.shape
    typ, cls = np.nonzero(runnable.T)
    n = len(cls)
    per_type, per_class = np.bincount(typ, minlength=m), np.bincount(cls, minlength=k)
    by_class = np.lexsort((typ, cls))
    return AllocationRows(
        typ=typ,
        cls=cls,
        by_class=by_class,
        per_class=per_class,
        index=np.concatenate((np.arange(n), by_class)),
        value=np.concatenate((gpus[cls].astype(float), np.ones(n))),
        lengths=np.concatenate((per_type[per_type > 0], per_class[per_class > 0])),
        upper=np.concatenate((capacity[per_type > 0], np.ones(np.count_nonzero(per_class)))),
    )


class RowBuilder:
    """An LP written row by row as (variable, coefficient) terms, the way a Pyomo model
    reaches HiGHS: a variable's column is numbered where it first appears, repeated terms
    of a row are summed in order. Policies whose LP comes from Pyomo use it to hand HiGHS
    the same matrix directly, in the same row and column order (so interior-point answers
    agree)."""

    def __init__(self):
        self.column: dict = {}
        self.rows: list[dict] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []

    def add(self, terms, lower: float, upper: float) -> None:
        row: dict = {}
        for var, coef in terms:
            if var in row:
                row[var] += coef
            else:
                row[var] = coef
                self.column.setdefault(var, len(self.column))
        self.rows.append(row)
        self.row_lower.append(lower)
        self.row_upper.append(upper)

    def matrix(self, bounds: dict, maximize: dict) -> MatrixLP:
        """`bounds[var]` = (lower, upper) for every variable used; maximise Σ maximize[var]·var."""
        n = len(self.column)
        lower, upper, cost = np.zeros(n), np.zeros(n), np.zeros(n)
        for var, col in self.column.items():
            lower[col], upper[col] = bounds[var]
            cost[col] = maximize.get(var, 0.0)
        start = np.zeros(len(self.rows) + 1, dtype=np.int32)
        np.cumsum([len(r) for r in self.rows], out=start[1:])
        column = self.column
        index = np.fromiter((column[v] for r in self.rows for v in r), dtype=np.int32, count=int(start[-1]))
        value = np.fromiter((c for r in self.rows for c in r.values()), dtype=float, count=int(start[-1]))
        return MatrixLP(
            cost=cost,
            lower=lower,
            upper=upper,
            row_start=start,
            row_index=index,
            row_value=value,
            row_lower=np.array(self.row_lower, dtype=float),
            row_upper=np.array(self.row_upper, dtype=float),
        )


_SOLVERS: dict[tuple, highspy.Highs] = {}


def _solver(options: dict) -> highspy.Highs:
    """One HiGHS object per option set and process: passModel replaces the model and its
    solver state, so reuse changes no answer, and saves creating one per solve."""
    key = tuple(sorted(options.items()))
    if key not in _SOLVERS:
        with capture_output(capture_fd=True):  # HiGHS prints a banner when the first one is made
            solver = highspy.Highs()
        for name, value in options.items():
            solver.setOptionValue(name, value)
        _SOLVERS[key] = solver
    return _SOLVERS[key]


def load_matrix(lp: MatrixLP, *, method: str, policy: str, options: dict | None = None) -> highspy.Highs:
    """Hand `lp` to this process's HiGHS for `method` (or `options`), replacing its model and
    state; returns it for `run_loaded` (re-solves after `changeRowsBounds` warm-start from the
    last basis)."""
    model = highspy.HighsLp()
    model.num_col_, model.num_row_ = len(lp.cost), len(lp.row_lower)
    model.col_cost_, model.col_lower_, model.col_upper_ = lp.cost, lp.lower, lp.upper
    model.row_lower_, model.row_upper_ = lp.row_lower, lp.row_upper
    model.sense_ = highspy.ObjSense.kMaximize if lp.maximize else highspy.ObjSense.kMinimize
    model.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    model.a_matrix_.num_col_, model.a_matrix_.num_row_ = model.num_col_, model.num_row_
    model.a_matrix_.start_, model.a_matrix_.index_, model.a_matrix_.value_ = (lp.row_start, lp.row_index, lp.row_value)
    solver = _solver(highs_options(method) if options is None else {**options, "output_flag": False})
    try:
        solver.passModel(model)
    except Exception as exc:  # a malformed matrix: report, never return a partial allocation
        raise SolverError(f"{policy}: HiGHS refused the model: {exc}") from None
    return solver


def run_loaded(
    solver: highspy.Highs, *, policy: str, allow_infeasible: bool = False
) -> tuple[np.ndarray, float] | None:
    """Solve the loaded model: (values, objective), or None when infeasible and
    `allow_infeasible`; any other end but optimal raises SolverError."""
    try:
        solver.run()
    except Exception as exc:  # solver crashed: report, never return a partial allocation
        raise SolverError(f"{policy}: HiGHS failed: {exc}") from None
    status = solver.getModelStatus()
    if allow_infeasible and status in (
        highspy.HighsModelStatus.kInfeasible,
        highspy.HighsModelStatus.kUnboundedOrInfeasible,
    ):
        return None
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(
            f"{policy}: HiGHS ended '{solver.modelStatusToString(status)}', not optimal; no allocation was produced"
        )
    return np.asarray(solver.getSolution().col_value, dtype=float), float(solver.getInfo().objective_function_value)


def solve_matrix(
    lp: MatrixLP, *, method: str, policy: str, options: dict | None = None
) -> tuple[np.ndarray, float, float]:
    """Solve with the same HiGHS options as the Pyomo route (`highs_options(method)`, or
    `options` where a policy sets its own); (values, objective, seconds).
    Anything but an optimal end raises SolverError."""
    started = time.perf_counter()
    solver = load_matrix(lp, method=method, policy=policy, options=options)
    values, objective = run_loaded(solver, policy=policy)
    return values, objective, time.perf_counter() - started
