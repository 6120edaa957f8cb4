"""Linear programs as arrays: the one formulation every LP policy writes.

A policy declares variables (integer ids), adds blocks of rows over those ids
and builds a `MatrixLP`: cost, column bounds and a row-wise sparse matrix,
ready for HiGHS (`lp.highs`) or for Pyomo (`lp.pyomo_export.to_pyomo`).

Columns are numbered deterministically: variables in the order they first
appear in the rows (row by row, term by term), then the variables no row uses,
by id. Rows keep the order they were added in. The order matters beyond
tidiness: HiGHS's interior-point method stops in the middle of the optimal
face, and which point it returns depends on the row and column order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

INF = math.inf  # HiGHS reads an infinite bound as "no bound" (highspy.kHighsInf is inf)


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
    integer: np.ndarray | None = None  # (columns,) True where the column must be integral

    @property
    def n_cols(self) -> int:
        return len(self.cost)

    @property
    def n_rows(self) -> int:
        return len(self.row_lower)


@dataclass
class Rows:
    """A block of rows over variable ids, row-wise: row r holds `lengths[r]` consecutive
    (index, value) entries and reads lower[r] <= Σ value·var[index] <= upper[r]."""

    index: np.ndarray
    value: np.ndarray
    lengths: np.ndarray
    lower: np.ndarray
    upper: np.ndarray

    @property
    def n(self) -> int:
        return len(self.lengths)

    @property
    def row_of_entry(self) -> np.ndarray:
        return np.repeat(np.arange(self.n), self.lengths)

    @staticmethod
    def from_terms(rows: list[list[tuple[int, float]]], lower: list[float], upper: list[float]) -> Rows:
        """Rows written as (variable, coefficient) terms; a variable repeated in a row is one
        entry, where it first appears, holding the coefficients summed in order."""
        index: list[int] = []
        value: list[float] = []
        lengths = []
        for terms in rows:
            row: dict[int, float] = {}
            for var, coef in terms:
                row[var] = row[var] + coef if var in row else coef
            index += row
            value += row.values()
            lengths.append(len(row))
        return Rows(
            np.array(index, dtype=np.int64),
            np.array(value, dtype=float),
            np.array(lengths, dtype=np.int64),
            np.array(lower, dtype=float),
            np.array(upper, dtype=float),
        )

    @staticmethod
    def empty() -> Rows:
        nothing = np.zeros(0)
        return Rows(nothing.astype(np.int64), nothing, nothing.astype(np.int64), nothing, nothing)

    def bounded(self, lower: np.ndarray | float, upper: np.ndarray | float) -> Rows:
        """The same rows with these bounds (scalars apply to every row)."""
        return Rows(
            self.index,
            self.value,
            self.lengths,
            _per_row(lower, self.n).copy(),
            _per_row(upper, self.n).copy(),
        )

    def scaled(self, factor: np.ndarray | float) -> Rows:
        """Every coefficient of row r times factor[r] (or one factor for all)."""
        factor = np.asarray(factor, dtype=float)
        if factor.ndim == 0:  # one factor: the same products, without spelling it out per entry
            return Rows(self.index, self.value * factor, self.lengths, self.lower, self.upper)
        per_entry = np.repeat(np.broadcast_to(factor, (self.n,)), self.lengths)
        return Rows(self.index, self.value * per_entry, self.lengths, self.lower, self.upper)

    def led_by(self, var: np.ndarray | int, coef: np.ndarray | float) -> Rows:
        """Each row with a first term coef[r]·var[r] put in front of its own."""
        lengths = self.lengths + 1
        # Where each row's new first term lands: rows start at the running total of the new lengths
        # (what np.insert at each old row start gives, without its sorting and masking).
        lead = np.zeros(self.n, dtype=np.int64)
        np.cumsum(lengths[:-1], out=lead[1:])
        rest = np.ones(len(self.index) + self.n, dtype=bool)
        rest[lead] = False
        index = np.empty(len(rest), dtype=self.index.dtype)
        value = np.empty(len(rest), dtype=self.value.dtype)
        index[lead], index[rest] = var, self.index
        value[lead], value[rest] = coef, self.value
        return Rows(index, value, lengths, self.lower, self.upper)

    def select(self, keep: np.ndarray) -> Rows:
        """The rows where `keep` (a boolean per row) is set, in order."""
        entries = np.repeat(keep, self.lengths)
        return Rows(self.index[entries], self.value[entries], self.lengths[keep], self.lower[keep], self.upper[keep])


def _per_row(value: np.ndarray | float, n: int) -> np.ndarray:
    """`value` as n floats: a scalar repeated (np.full, cheaper than broadcast_to), an array as is."""
    value = np.asarray(value, dtype=float)
    if value.ndim == 0:
        return np.full(n, float(value))
    return np.broadcast_to(value, (n,))


def stack(*blocks: Rows) -> Rows:
    """The blocks' rows one after another."""
    return Rows(
        np.concatenate([b.index for b in blocks]),
        np.concatenate([b.value for b in blocks]),
        np.concatenate([b.lengths for b in blocks]),
        np.concatenate([b.lower for b in blocks]),
        np.concatenate([b.upper for b in blocks]),
    )


class LPBuilder:
    """Variables and blocks of rows, assembled into a `MatrixLP` by `build`."""

    def __init__(self) -> None:
        self._lower: list[np.ndarray] = []
        self._upper: list[np.ndarray] = []
        self._integer: list[np.ndarray] = []
        self._blocks: list[Rows] = []
        self.n_vars = 0
        self.n_rows = 0

    def variables(
        self, n: int, lower: np.ndarray | float = 0.0, upper: np.ndarray | float = 1.0, *, integer: bool = False
    ) -> np.ndarray:
        """Declare n variables with these bounds; returns their ids."""
        self._lower.append(_per_row(lower, n))
        self._upper.append(_per_row(upper, n))
        self._integer.append(np.full(n, integer))
        ids = np.arange(self.n_vars, self.n_vars + n)
        self.n_vars += n
        return ids

    def add(self, rows: Rows) -> np.ndarray:
        """Append rows; returns their row numbers in the LP."""
        self._blocks.append(rows)
        numbers = np.arange(self.n_rows, self.n_rows + rows.n)
        self.n_rows += rows.n
        return numbers

    def build(self, cost: np.ndarray, *, maximize: bool) -> tuple[MatrixLP, np.ndarray]:
        """The LP with `cost[v]` on variable v; also the column of each variable id.

        A fixed variable (equal bounds) is a constant: it keeps its column, numbered where it
        first appears, but its row entries move into the row bounds and it costs nothing.
        """
        rows = stack(*self._blocks) if self._blocks else Rows.empty()
        column = self.column_order(rows.index)
        order = np.empty(self.n_vars, dtype=np.int64)
        order[column] = np.arange(self.n_vars)
        lower = np.concatenate(self._lower) if self._lower else np.zeros(0)
        upper = np.concatenate(self._upper) if self._upper else np.zeros(0)
        fixed = lower == upper
        rows = _without_fixed(rows, fixed, lower)
        start = np.zeros(rows.n + 1, dtype=np.int32)
        np.cumsum(rows.lengths, out=start[1:])
        integer = np.concatenate(self._integer)[order] if self._integer else np.zeros(0, dtype=bool)
        cost = np.where(fixed, 0.0, np.asarray(cost, dtype=float))[order]
        lower, upper = lower[order], upper[order]
        if not self.n_vars:  # e.g. every job barred by a tenant quota: HiGHS calls a model without
            # columns 'Empty', not optimal; one column fixed at 0 that no variable uses solves it
            cost, lower, upper, integer = np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1, dtype=bool)
        lp = MatrixLP(
            cost=cost,
            lower=lower,
            upper=upper,
            row_start=start,
            row_index=column[rows.index].astype(np.int32),
            row_value=rows.value.astype(float),
            row_lower=rows.lower.astype(float),
            row_upper=rows.upper.astype(float),
            maximize=maximize,
            integer=integer if integer.any() else None,
        )
        return lp, column

    def column_order(self, used: np.ndarray) -> np.ndarray:
        """Column of each variable: first appearance in `used` (the rows' entries, in order),
        then the variables never used, by id."""
        ids, first = np.unique(used, return_index=True)
        appearing = ids[np.argsort(first, kind="stable")]
        is_used = np.zeros(self.n_vars, dtype=bool)
        is_used[ids] = True
        unused = np.flatnonzero(~is_used)  # ascending, as setdiff1d gave them
        column = np.empty(self.n_vars, dtype=np.int64)
        column[np.concatenate((appearing, unused)).astype(np.int64)] = np.arange(self.n_vars)
        return column


def _without_fixed(rows: Rows, fixed: np.ndarray, value: np.ndarray) -> Rows:
    """`rows` with the entries of fixed variables (at `value`) moved into the bounds."""
    constant = fixed[rows.index]
    if not constant.any():
        return rows
    row = rows.row_of_entry[constant]
    shift = np.zeros(rows.n)
    np.add.at(shift, row, rows.value[constant] * value[rows.index[constant]])
    touched = np.zeros(rows.n, dtype=bool)
    touched[row] = True
    keep = ~constant
    return Rows(
        rows.index[keep],
        rows.value[keep],
        np.bincount(rows.row_of_entry[keep], minlength=rows.n),
        np.where(touched, rows.lower - shift, rows.lower),
        np.where(touched, rows.upper - shift, rows.upper),
    )
