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

import numpy as np
import pyomo.environ as pyo
from pyomo.common.gc_manager import PauseGC

from planner.policies.lp import AllocationLP
from planner.table import JobType, ThroughputTable


Cell = tuple[int, int, JobType]  # (row c, worker type j, partner job type)


def pair_cells(throughput: np.ndarray, mult: np.ndarray, job_types: list[JobType], worker_types: list[str],
               table: ThroughputTable) -> tuple[list[Cell], list[float]]:
    """Every (row, type, partner type) that can share a GPU, and the row's co-located throughput there."""
    k, m = throughput.shape
    count = defaultdict(float)
    for c in range(k):
        count[job_types[c]] += mult[c]
    partner_types = list(dict.fromkeys(job_types))
    cells: list[Cell] = []
    coef: list[float] = []
    for c in range(k):
        for j in range(m):
            if throughput[c, j] <= 0:
                continue
            for partner in partner_types:
                if partner.scale_factor != job_types[c].scale_factor:
                    continue
                if partner == job_types[c] and count[partner] < 2:
                    continue
                own, other = table.pair(worker_types[j], job_types[c], partner)
                if own > 0 and other > 0:
                    cells.append((c, j, partner))
                    coef.append(own)
    return cells, coef


def group_pair_cells(cells: list[Cell], job_types: list[JobType]):
    """(cells of each row, cells of each (type j, own job type, partner job type)), in cell order."""
    by_row: dict[int, list[int]] = defaultdict(list)
    by_type: dict[tuple[int, JobType, JobType], list[int]] = defaultdict(list)
    for n, (c, j, partner) in enumerate(cells):
        by_row[c].append(n)
        by_type[(j, job_types[c], partner)].append(n)
    return by_row, by_type


class PackedLP(AllocationLP):
    def __init__(self, throughput: np.ndarray, scale: np.ndarray, capacity: np.ndarray,
                 multiplicity: np.ndarray, job_types: list[JobType], worker_types: list[str],
                 table: ThroughputTable):
        self._packing = (job_types, worker_types, table)
        super().__init__(throughput, scale, capacity, multiplicity)

    def _build_extra(self, model, throughput, scale, capacity, mult) -> None:
        job_types, worker_types, table = self._packing
        k, m = self.k, self.m
        cells, coef = pair_cells(throughput, mult, job_types, worker_types, table)
        self.pair_cells, self.pair_coef = cells, np.array(coef)
        self.job_types, self.mult = job_types, mult
        model.paired = pyo.Var(range(len(cells)), bounds=(0.0, 1.0))
        by_row, by_type = group_pair_cells(cells, job_types)
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
                pair_terms = [0.5 * float(mult[c] * scale[c]) * model.paired[n]
                              for n, (c, jj, _) in enumerate(cells) if jj == j]
                if pair_terms:
                    solo = [float(mult[c] * scale[c]) * model.x[self.cell_of[(c, j)]]
                            for c in range(k) if self.runnable[c, j]]
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

    def throughput_expr(self, c: int, factor: float = 1.0, per_type: np.ndarray | None = None,
                        per_type_shared: np.ndarray | None = None):
        solo = np.ones(self.m) if per_type is None else per_type
        shared = solo if per_type_shared is None else per_type_shared
        terms = [float(self.throughput[c, j] * factor * solo[j]) * self.model.x[self.cell_of[(c, j)]]
                 for j in range(self.m) if self.runnable[c, j]]
        terms += [float(self.pair_coef[n] * factor * shared[self.pair_cells[n][1]]) * self.model.paired[n]
                  for n in self.pairs_of_row.get(c, [])]
        return pyo.quicksum(terms) if terms else 0.0

    def pair_values(self) -> np.ndarray:
        return np.array([self.model.paired[n].value or 0.0 for n in range(len(self.pair_cells))])


def pair_allocation(lp: PackedLP, z: np.ndarray, class_index: np.ndarray, job_ids: list[str],
                    threshold: float = 1e-7) -> tuple[np.ndarray, dict[tuple[str, str], np.ndarray]]:
    """Job-pair time fractions from the type-level z, plus each job's pair time per type.

    Returns (pair time per job and type (n, m), {(id_a, id_b): row over types}).
    """
    m = lp.m
    members = defaultdict(list)  # class -> job indices
    for i, c in enumerate(class_index):
        members[int(c)].append(i)
    # per (type j, own type A, partner type B): [(job index, z)]
    groups = defaultdict(list)
    for n, (c, j, partner) in enumerate(lp.pair_cells):
        if z[n] > threshold:
            for i in members[c]:
                groups[(j, lp.job_types[c], partner)].append((i, z[n]))
    pairs: dict[tuple[str, str], np.ndarray] = {}
    for (j, a, b), own in groups.items():
        if a == b:
            total = sum(v for _, v in own)
            # x_ab = z_a z_b / total, rescaled so each job's pairs add up to its z
            for p, (ia, za) in enumerate(own):
                for ib, zb in own[p + 1:]:
                    value = za * zb / (total - (za + zb) / 2) if total > (za + zb) / 2 else 0.0
                    _add(pairs, job_ids[ia], job_ids[ib], j, value, m)
            continue
        if a.sort_key() > b.sort_key() or (a.sort_key() == b.sort_key() and a.label > b.label):
            continue  # handle each unordered type pair once
        other = groups.get((j, b, a), [])
        total = sum(v for _, v in own)
        if total <= 0:
            continue
        for ia, za in own:
            for ib, zb in other:
                _add(pairs, job_ids[ia], job_ids[ib], j, za * zb / total, m)
    per_job = np.zeros((len(job_ids), m))
    index = {jid: i for i, jid in enumerate(job_ids)}
    for (ia, ib), row in pairs.items():
        per_job[index[ia]] += row
        per_job[index[ib]] += row
    return per_job, pairs


def _add(pairs, a: str, b: str, j: int, value: float, m: int) -> None:
    key = (a, b) if a < b else (b, a)
    row = pairs.setdefault(key, np.zeros(m))
    row[j] += value
