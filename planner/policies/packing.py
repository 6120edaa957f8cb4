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

from planner.formats.table import JobType, ThroughputTable
from planner.policies.lp.matrix import INF, Rows

Cell = tuple[int, int, int]  # (row c, worker type j, partner kind p): p indexes PairCells.kinds
Terms = list[tuple[int, float]]


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


def group_pair_cells(pairs: PairCells) -> tuple[dict[int, list[int]], dict[tuple[int, int, int], list[int]]]:
    """(cells of each row, cells of each (type j, own kind, partner kind)), in cell order."""
    by_row: dict[int, list[int]] = defaultdict(list)
    by_type: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    kind_of = pairs.kind_of
    for n, (c, j, p) in enumerate(pairs.cells):
        by_row[c].append(n)
        by_type[(j, kind_of[c], p)].append(n)
    return by_row, by_type


@dataclass
class PackedRows:
    """The rows a packed LP shares between policies, around the policy's own rows."""

    head: Rows  # capacity rows of types without pairs, time rows of rows without pairs
    tail: Rows  # time and capacity rows with pair terms, then the consistency rows
    fixed: np.ndarray  # (cells,) pair cells held at 0: their partner type has no way back
    by_row: dict[int, list[int]]


def packed_rows(
    throughput: np.ndarray,
    gpus: np.ndarray,
    capacity: np.ndarray,
    mult: np.ndarray,
    pairs: PairCells,
    x_ids: np.ndarray,
    z0: int,
) -> PackedRows:
    """Rows over x[c, j] = variable x_ids[c, j] and z[n] = variable z0 + n. `gpus[c]`: GPUs
    row c holds per unit of x (class size times scale factor)."""
    by_row, by_type = group_pair_cells(pairs)
    # Python lists: cheaper per element than numpy scalars, same float arithmetic.
    runnable, gpus_, x_id = (throughput > 0).tolist(), gpus.tolist(), x_ids.tolist()
    k, m = throughput.shape
    paired_types = {j for _, j, _ in pairs.cells}
    head: list[Terms] = []
    head_upper: list[float] = []
    for j in range(m):
        terms = [(x_id[c][j], float(gpus_[c])) for c in range(k) if runnable[c][j]]
        if terms and j not in paired_types:
            head.append(terms)
            head_upper.append(float(capacity[j]))
    for c in range(k):
        terms = [(x_id[c][j], 1.0) for j in range(m) if runnable[c][j]]
        if terms and not by_row.get(c):
            head.append(terms)
            head_upper.append(1.0)
    tail, lower, upper = _sharing_rows(runnable, gpus_, capacity, pairs, by_row, x_id, z0)
    for terms, low, up in zip(*_kind_rows(pairs, mult.tolist(), by_type, z0)):
        tail.append(terms)
        lower.append(low)
        upper.append(up)
    fixed = np.zeros(len(pairs.cells), dtype=bool)
    for (j, a, b), cells_ab in by_type.items():
        if a != b and (j, b, a) not in by_type:
            fixed[cells_ab] = True
    return PackedRows(
        Rows.from_terms(head, [-INF] * len(head), head_upper), Rows.from_terms(tail, lower, upper), fixed, by_row
    )


def _sharing_rows(
    runnable: list[list[bool]],
    gpus: list[float],
    capacity: np.ndarray,
    pairs: PairCells,
    by_row: dict[int, list[int]],
    x_id: list[list[int]],
    z0: int,
) -> tuple[list[Terms], list[float], list[float]]:
    """Time rows of rows with pair cells, then capacity rows of types with pair cells."""
    k, m = len(runnable), len(capacity)
    rows: list[Terms] = []
    for c in range(k):
        if by_row.get(c):
            own = [(x_id[c][j], 1.0) for j in range(m) if runnable[c][j]]
            rows.append(own + [(z0 + n, 1.0) for n in by_row[c]])
    upper = [1.0] * len(rows)
    pair_terms_of_type: dict[int, Terms] = {}
    for n, (c, j, _) in enumerate(pairs.cells):
        pair_terms_of_type.setdefault(j, []).append((z0 + n, 0.5 * float(gpus[c])))
    for j in range(m):
        pair_terms = pair_terms_of_type.get(j)
        if pair_terms:
            solo = [(x_id[c][j], float(gpus[c])) for c in range(k) if runnable[c][j]]
            rows.append(solo + pair_terms)
            upper.append(float(capacity[j]))
    return rows, [-INF] * len(rows), upper


def _kind_rows(
    pairs: PairCells, mult: list[float], by_type: dict[tuple[int, int, int], list[int]], z0: int
) -> tuple[list[Terms], list[float], list[float]]:
    """Same-type rows (a row pairs with the other jobs of its type, not itself) and
    consistency rows (type A's time next to B equals B's next to A), by (type, kind, kind)."""
    cells = pairs.cells
    rows: list[Terms] = []
    lower: list[float] = []
    upper: list[float] = []
    done = set()
    for (j, a, b), cells_ab in by_type.items():
        if a == b:
            total = [(z0 + n, -float(mult[cells[n][0]])) for n in cells_ab]
            for n in cells_ab:
                rows.append([(z0 + n, 1.0 + mult[cells[n][0]])] + total)
                lower.append(-INF)
                upper.append(0.0)
            continue
        if (j, b, a) in done:
            continue
        done.add((j, a, b))
        lhs = [(z0 + n, float(mult[cells[n][0]])) for n in cells_ab]
        rhs = [(z0 + n, -float(mult[cells[n][0]])) for n in by_type.get((j, b, a), [])]
        rows.append(lhs + rhs)
        lower.append(0.0)
        upper.append(0.0)
    return rows, lower, upper


def pair_allocation(
    pairs: PairCells, m: int, z: np.ndarray, class_index: np.ndarray, job_ids: list[str], threshold: float = 1e-7
) -> dict[tuple[str, str], np.ndarray]:
    """Job-pair time fractions from the type-level z (one per cell of `pairs`, m worker
    types): {(id_a, id_b): row over types}."""
    groups = _jobs_by_cell_kind(pairs, z, class_index, threshold)
    shares: dict[tuple[str, str], list[float]] = {}
    for (j, a, b), own in groups.items():
        if a == b:
            _pair_within_kind(shares, own, j, job_ids, m)
        elif _handles_kind_pair(pairs.kinds[a], pairs.kinds[b]):
            _pair_across_kinds(shares, own, groups.get((j, b, a), []), j, job_ids, m)
    rows = np.array(list(shares.values()), dtype=float).reshape(len(shares), m)  # one array, a row per pair
    return dict(zip(shares, rows))


def _jobs_by_cell_kind(
    pairs: PairCells, z: np.ndarray, class_index: np.ndarray, threshold: float
) -> dict[tuple[int, int, int], list[tuple[int, float]]]:
    """Per (type j, own kind A, partner kind B): [(job index, z)] of the jobs sharing there."""
    members = defaultdict(list)  # class -> job indices
    for i, c in enumerate(class_index):
        members[int(c)].append(i)
    groups = defaultdict(list)
    for n, (c, j, partner) in enumerate(pairs.cells):
        if z[n] > threshold:
            for i in members[c]:
                groups[(j, pairs.kind_of[c], partner)].append((i, z[n]))
    return groups


def _handles_kind_pair(ka: JobType, kb: JobType) -> bool:
    """Each unordered pair of kinds is split once, from its smaller kind."""
    return not (ka.sort_key() > kb.sort_key() or (ka.sort_key() == kb.sort_key() and ka.label > kb.label))


def _pair_within_kind(
    shares: dict[tuple[str, str], list[float]], own: list[tuple[int, float]], j: int, job_ids: list[str], m: int
) -> None:
    """x_ab = z_a z_b / total, rescaled so each job's pairs add up to its z."""
    total = sum(v for _, v in own)
    for p, (ia, za) in enumerate(own):
        for ib, zb in own[p + 1 :]:
            value = za * zb / (total - (za + zb) / 2) if total > (za + zb) / 2 else 0.0
            _add(shares, job_ids[ia], job_ids[ib], j, value, m)


def _pair_across_kinds(
    shares: dict[tuple[str, str], list[float]],
    own: list[tuple[int, float]],
    other: list[tuple[int, float]],
    j: int,
    job_ids: list[str],
    m: int,
) -> None:
    """x_ab = z_a z_b / Σ z_a over the jobs of a's kind."""
    total = sum(v for _, v in own)
    if total <= 0:
        return
    partners = [(job_ids[ib], zb) for ib, zb in other]
    get = shares.get
    for ia, za in own:  # `_add` inlined: this loop runs once per job pair (10^5 of them at 2048 jobs)
        a = job_ids[ia]
        for b, zb in partners:
            key = (a, b) if a < b else (b, a)
            row = get(key)
            if row is None:
                row = shares[key] = [0.0] * m
            row[j] += za * zb / total


def _add(shares: dict[tuple[str, str], list[float]], a: str, b: str, j: int, value: float, m: int) -> None:
    key = (a, b) if a < b else (b, a)
    row = shares.get(key)
    if row is None:
        row = shares[key] = [0.0] * m
    row[j] += value
