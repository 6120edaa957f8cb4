"""Space sharing (co-location) variables on top of the allocation LP.

Instead of one variable per job pair (O(n²), Gavel), a row c gets one
variable z[c, j, B] per worker type j and *partner job type* B: the fraction
of time c runs on type j sharing its GPUs with some job of type B.
  time         Σ_j x[c,j] + Σ_{j,B} z[c,j,B] <= 1
  capacity     Σ_c n_c s_c (x[c,j] + ½ Σ_B z[c,j,B]) <= N_j   (a pair holds s GPUs for two jobs)
  consistency  Σ_{c of type A} n_c z[c,j,B] = Σ_{c of type B} n_c z[c,j,A]   (A != B)
  same type    z[c,j,A] <= Σ_{other jobs of type A} z                          (no job pairs with itself)
  throughput   y_c = Σ_j T[c,j] x[c,j] + Σ_{j,B} T(c with B on j) z[c,j,B]
Pairs exist only between equal scale factors (a job type includes it) and
where the table has a positive co-located throughput for both members.
`pair_allocation` turns the type-level answer back into job pairs for the
mechanism: x_ab = z[a,j,B] z[b,j,A] / Σ_{a' of type A} z[a',j,B].
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo
from pyomo.common.gc_manager import PauseGC

from planner.formats.table import JobType, ThroughputTable
from planner.policies.lp import AllocationLP

Cell = tuple[int, int, int]  # (row c, worker type j, partner kind p): p indexes PairCells.kinds


@dataclass
class PairCells:
    """The pair variables of a packed LP: one per (row, type, partner job type) that can share a GPU."""

    cells: list[Cell]
    coef: list[float]  # the row's own co-located throughput in each cell
    kinds: list[JobType]  # the rows' distinct job types, in order of first appearance
    kind_of: list[int]  # kinds index of each row's job type


def pair_cells(
    throughput: np.ndarray, mult: np.ndarray, job_types: list[JobType], worker_types: list[str], table: ThroughputTable
) -> PairCells:
    """Every (row, type, partner type) that can share a GPU, and the row's co-located throughput there:
    equal scale factors, both members positive in the table, and a job type pairs with itself
    only when it has two jobs or more."""
    k, m = throughput.shape
    kinds = list(dict.fromkeys(job_types))
    number = {jt: i for i, jt in enumerate(kinds)}
    kind_of = [number[jt] for jt in job_types]
    count = np.zeros(len(kinds))
    for c in range(k):
        count[kind_of[c]] += mult[c]
    scale = np.array([jt.scale_factor for jt in kinds])
    rates = [table.pair_matrix(w, kinds) for w in worker_types]
    cells: list[Cell] = []
    coef: list[float] = []
    for c in range(k):
        a = kind_of[c]
        partners = scale == scale[a]
        if count[a] < 2:
            partners[a] = False
        for j in range(m):
            if throughput[c, j] <= 0:
                continue
            own, other = rates[j]
            for p in np.flatnonzero(partners & (own[a] > 0) & (other[a] > 0)).tolist():
                cells.append((c, j, p))
                coef.append(float(own[a, p]))
    return PairCells(cells, coef, kinds, kind_of)


def group_pair_cells(pairs: PairCells):
    """(cells of each row, cells of each (type j, own kind, partner kind)), in cell order."""
    by_row: dict[int, list[int]] = defaultdict(list)
    by_type: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    kind_of = pairs.kind_of
    for n, (c, j, p) in enumerate(pairs.cells):
        by_row[c].append(n)
        by_type[(j, kind_of[c], p)].append(n)
    return by_row, by_type


class PackedLP(AllocationLP):
    def __init__(
        self,
        throughput: np.ndarray,
        scale: np.ndarray,
        capacity: np.ndarray,
        multiplicity: np.ndarray,
        job_types: list[JobType],
        worker_types: list[str],
        table: ThroughputTable,
    ):
        self._packing = (job_types, worker_types, table)
        super().__init__(throughput, scale, capacity, multiplicity)

    def _build_extra(self, model, throughput, scale, capacity, mult) -> None:
        job_types, worker_types, table = self._packing
        k, m = self.k, self.m
        pairs = pair_cells(throughput, mult, job_types, worker_types, table)
        cells = pairs.cells
        self.pairs, self.pair_cells, self.pair_coef = pairs, cells, np.array(pairs.coef)
        self.mult = mult
        model.paired = pyo.Var(range(len(cells)), bounds=(0.0, 1.0))
        by_row, by_type = group_pair_cells(pairs)
        self.pairs_of_row = by_row
        model.packing = pyo.ConstraintList()
        with PauseGC():
            # time and capacity rows extended with the pair variables
            for c in range(k):
                if by_row[c]:
                    own = [model.x[self.cell_of[(c, j)]] for j in range(m) if self.runnable[c, j]]
                    model.packing.add(pyo.quicksum(own + [model.paired[n] for n in by_row[c]]) <= 1.0)
                    model.time[self.time_row[c]].deactivate()
            for j in range(m):
                pair_terms = [
                    0.5 * float(mult[c] * scale[c]) * model.paired[n] for n, (c, jj, _) in enumerate(cells) if jj == j
                ]
                if pair_terms:
                    solo = [
                        float(mult[c] * scale[c]) * model.x[self.cell_of[(c, j)]]
                        for c in range(k)
                        if self.runnable[c, j]
                    ]
                    model.packing.add(pyo.quicksum(solo + pair_terms) <= float(capacity[j]))
                    model.capacity[self.capacity_row[j]].deactivate()
            done = set()
            for (j, a, b), cells_ab in by_type.items():
                if a == b:
                    total = [float(mult[cells[n][0]]) * model.paired[n] for n in cells_ab]
                    for n in cells_ab:
                        # this row's pairing time <= that of the other jobs of its type
                        model.packing.add((1.0 + mult[cells[n][0]]) * model.paired[n] - pyo.quicksum(total) <= 0.0)
                    continue
                if (j, b, a) in done:
                    continue
                done.add((j, a, b))
                mirror = by_type.get((j, b, a), [])
                lhs = [float(mult[cells[n][0]]) * model.paired[n] for n in cells_ab]
                rhs = [-float(mult[cells[n][0]]) * model.paired[n] for n in mirror]
                model.packing.add(pyo.quicksum(lhs + rhs) == 0.0)
            for (j, a, b), cells_ab in by_type.items():
                if a != b and (j, b, a) not in by_type:
                    for n in cells_ab:  # partner type has no way back: no pairing
                        model.paired[n].fix(0.0)

    def throughput_expr(
        self, c: int, factor: float = 1.0, per_type: np.ndarray | None = None, per_type_shared: np.ndarray | None = None
    ):
        solo = np.ones(self.m) if per_type is None else per_type
        shared = solo if per_type_shared is None else per_type_shared
        terms = [
            float(self.throughput[c, j] * factor * solo[j]) * self.model.x[self.cell_of[(c, j)]]
            for j in range(self.m)
            if self.runnable[c, j]
        ]
        terms += [
            float(self.pair_coef[n] * factor * shared[self.pair_cells[n][1]]) * self.model.paired[n]
            for n in self.pairs_of_row.get(c, [])
        ]
        return pyo.quicksum(terms) if terms else 0.0

    def pair_values(self) -> np.ndarray:
        return np.array([self.model.paired[n].value or 0.0 for n in range(len(self.pair_cells))])


def pair_allocation(
    pairs: PairCells, m: int, z: np.ndarray, class_index: np.ndarray, job_ids: list[str], threshold: float = 1e-7
) -> dict[tuple[str, str], np.ndarray]:
    """Job-pair time fractions from the type-level z (one per cell of `pairs`, m worker
    types): {(id_a, id_b): row over types}."""
    kinds, kind_of = pairs.kinds, pairs.kind_of
    members = defaultdict(list)  # class -> job indices
    for i, c in enumerate(class_index):
        members[int(c)].append(i)
    # per (type j, own kind A, partner kind B): [(job index, z)]
    groups = defaultdict(list)
    for n, (c, j, partner) in enumerate(pairs.cells):
        if z[n] > threshold:
            for i in members[c]:
                groups[(j, kind_of[c], partner)].append((i, z[n]))
    pairs: dict[tuple[str, str], list[float]] = {}
    for (j, a, b), own in groups.items():
        if a == b:
            total = sum(v for _, v in own)
            # x_ab = z_a z_b / total, rescaled so each job's pairs add up to its z
            for p, (ia, za) in enumerate(own):
                for ib, zb in own[p + 1 :]:
                    value = za * zb / (total - (za + zb) / 2) if total > (za + zb) / 2 else 0.0
                    _add(pairs, job_ids[ia], job_ids[ib], j, value, m)
            continue
        ka, kb = kinds[a], kinds[b]
        if ka.sort_key() > kb.sort_key() or (ka.sort_key() == kb.sort_key() and ka.label > kb.label):
            continue  # handle each unordered type pair once
        other = groups.get((j, b, a), [])
        total = sum(v for _, v in own)
        if total <= 0:
            continue
        for ia, za in own:
            for ib, zb in other:
                _add(pairs, job_ids[ia], job_ids[ib], j, za * zb / total, m)
    return {key: np.array(row, dtype=float) for key, row in pairs.items()}


def _add(pairs: dict[tuple[str, str], list[float]], a: str, b: str, j: int, value: float, m: int) -> None:
    key = (a, b) if a < b else (b, a)
    row = pairs.get(key)
    if row is None:
        row = pairs[key] = [0.0] * m
    row[j] += value
