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
mechanism: x_ab = z[a,j,B] z[b,j,A] / Σ_{a' of type A} z[a',j,B] (Gavel's full pair
space: every job of A with every job of B). Above `PAIR_PARTNERS` partners per job that is
O(n²) entries for the mechanism (10^4-10^5 with a few hundred active jobs, ranked every
round and re-made at every arrival and completion), so a larger group is laid out as
interval matchings instead (`_layouts`): the same time per job next to kind B, O(n) pairs.
The LP rows are built as whole arrays (`packed_rows`), term for term the rows a loop over the
cells writes, so the LP and its answer do not depend on how they were built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.formats.table import JobType, ThroughputTable
from planner.policies.lp.matrix import INF, Rows, stack

Cell = tuple[int, int, int]  # (row c, worker type j, partner kind p): p indexes PairCells.kinds

# Job pairs per (worker type, kind A, partner kind B) group of `pair_allocation`: where a job
# of the group would have more partners than this in the full pair space (every job of A with
# every job of B), the group is laid out as `PAIR_LAYOUTS` interval matchings instead, which
# give each job the same total time next to kind B with one or two partners per matching.
# None: always the full pair space. Groups this small are the full pair space either way, so
# small cases (Gavel's, with a few jobs per kind) are unchanged.
PAIR_PARTNERS: int | None = 8
# Matchings per bounded group, averaged (spread shifts): more give the fill more partners to
# choose from, and the mechanism more entries to rank every round (1: the fewest pairs).
PAIR_LAYOUTS = 1


@dataclass
class PairCells:
    """The pair variables of a packed LP: one per (row, type, partner job type) that can share a GPU."""

    cells: list[Cell]
    coef: list[float]  # the row's own co-located throughput in each cell
    kinds: list[JobType]  # the rows' distinct job types, in order of first appearance
    kind_of: list[int]  # kinds index of each row's job type
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # the cells' rows, types, partner kinds

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, worker type, partner kind) of every cell, as arrays."""
        if self.arrays is None:
            cells = np.array(self.cells, dtype=np.int64).reshape(-1, 3)
            self.arrays = (cells[:, 0], cells[:, 1], cells[:, 2])
        return self.arrays


def pair_cells(
    throughput: np.ndarray, mult: np.ndarray, job_types: list[JobType], worker_types: list[str], table: ThroughputTable
) -> PairCells:
    """Every (row, type, partner type) that can share a GPU, and the row's co-located throughput there:
    equal scale factors, both members positive in the table, and a job type pairs with itself
    only when it has two jobs or more. Cells in (row, type, partner kind) order."""
    k, m = throughput.shape
    kinds = list(dict.fromkeys(job_types))
    number = {jt: i for i, jt in enumerate(kinds)}
    kind_of = [number[jt] for jt in job_types]
    kind = np.array(kind_of, dtype=np.int64)
    count = np.bincount(kind, weights=np.asarray(mult, dtype=float), minlength=len(kinds))
    scale = np.array([jt.scale_factor for jt in kinds])
    partners = scale[:, None] == scale[None, :]
    np.fill_diagonal(partners, count >= 2)
    own_rate = np.zeros((m, len(kinds), len(kinds)))
    allowed = np.zeros((m, len(kinds), len(kinds)), dtype=bool)
    for w_index, w in enumerate(worker_types):
        own, other = table.pair_matrix(w, kinds)
        own_rate[w_index] = own
        allowed[w_index] = partners & (own > 0) & (other > 0)
    # cell (c, j, p) exists where c runs on j and its kind may pair with p there
    mask = (throughput > 0)[:, :, None] & allowed[:, kind, :].transpose(1, 0, 2)
    c, j, p = np.nonzero(mask)
    coef = own_rate[j, kind[c], p]
    return PairCells(list(zip(c.tolist(), j.tolist(), p.tolist())), coef.tolist(), kinds, kind_of, (c, j, p))


def _cells_by_row(c: np.ndarray) -> dict[int, list[int]]:
    """Cells of each row that has some, in cell order (cells come row by row)."""
    rows, first, count = np.unique(c, return_index=True, return_counts=True)
    return {row: list(range(f, f + n)) for row, f, n in zip(rows.tolist(), first.tolist(), count.tolist())}


@dataclass
class PackedRows:
    """The rows a packed LP shares between policies, around the policy's own rows."""

    head: Rows  # capacity rows of types without pairs, time rows of rows without pairs
    tail: Rows  # time and capacity rows with pair terms, then the consistency rows
    fixed: np.ndarray  # (cells,) pair cells held at 0: their partner type has no way back
    by_row: dict[int, list[int]]


def _block(
    index: list[np.ndarray], value: list[np.ndarray], lengths: list[int], lower: float, upper: list[float]
) -> Rows:
    """Rows given as one (index, value) array pair each."""
    if not lengths:
        return Rows.empty()
    return Rows(
        np.concatenate(index).astype(np.int64),
        np.concatenate(value).astype(float),
        np.array(lengths, dtype=np.int64),
        np.full(len(lengths), lower),
        np.array(upper, dtype=float),
    )


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
    row c holds per unit of x (class size times scale factor).

    Whole arrays at a time (a solve of a few hundred jobs has thousands of cells and re-solves
    come with every arrival); the rows, their terms and their order are those of writing
    each row out term by term (`Rows.from_terms`), which fix the interior-point answer."""
    k, m = throughput.shape
    cc, cj, cp = pairs.columns()
    n_cells = len(cc)
    runnable = throughput > 0
    gpus = np.asarray(gpus, dtype=float)
    x_ids = np.asarray(x_ids, dtype=np.int64)
    has_cells = np.bincount(cc, minlength=k) > 0
    paired_type = np.bincount(cj, minlength=m) > 0
    types_c = [np.flatnonzero(runnable[:, j]) for j in range(m)]  # rows that run on each type
    # head: capacity rows of types without pairs, then time rows of rows without pairs
    index, value, lengths, upper = [], [], [], []
    for j in range(m):
        if len(types_c[j]) and not paired_type[j]:
            index.append(x_ids[types_c[j], j])
            value.append(gpus[types_c[j]])
            lengths.append(len(types_c[j]))
            upper.append(float(capacity[j]))
    rc, rj = np.nonzero(runnable & ~has_cells[:, None])
    per_row = np.bincount(rc, minlength=k)
    per_row = per_row[per_row > 0]
    solo_time = Rows(x_ids[rc, rj], np.ones(len(rc)), per_row, np.full(len(per_row), -INF), np.ones(len(per_row)))
    head = stack(_block(index, value, lengths, -INF, upper), solo_time)
    # tail: time rows of rows with pairs (their x, then their cells)
    xc, xj = np.nonzero(runnable & has_cells[:, None])
    keys = np.concatenate((xc, cc))
    order = np.argsort(keys, kind="stable")
    per_row = np.bincount(keys, minlength=k)[has_cells]
    shared_time = Rows(
        np.concatenate((x_ids[xc, xj], z0 + np.arange(n_cells)))[order],
        np.ones(len(keys)),
        per_row,
        np.full(len(per_row), -INF),
        np.ones(len(per_row)),
    )
    # capacity rows of types with pairs: solo terms, then the pair cells there (half the GPUs each)
    index, value, lengths, upper = [], [], [], []
    for j in np.flatnonzero(paired_type).tolist():
        here = np.flatnonzero(cj == j)
        index += [x_ids[types_c[j], j], z0 + here]
        value += [gpus[types_c[j]], 0.5 * gpus[cc[here]]]
        lengths.append(len(types_c[j]) + len(here))
        upper.append(float(capacity[j]))
    shared_capacity = _block(index, value, lengths, -INF, upper)
    kind_rows, fixed = _kind_rows(pairs, np.asarray(mult, dtype=float), z0)
    return PackedRows(head, stack(shared_time, shared_capacity, kind_rows), fixed, _cells_by_row(cc))


def _kind_rows(pairs: PairCells, mult: np.ndarray, z0: int) -> tuple[Rows, np.ndarray]:
    """Same-type rows (a row pairs with the other jobs of its type, not itself) and
    consistency rows (type A's time next to B equals B's next to A), by (type, kind, kind)
    group in order of first appearance; and the cells held at 0 (their group has no way back).

    A same-type group of cells g writes one row per cell n, z_n <= (the group's jobs' time) - z_n
    (the other jobs of the type: the row's own other jobs count, a class of mult jobs being mult
    jobs, not one): n first (coefficient 2 - mult, as the terms add up), then the group's other
    cells at -mult. A pair of groups
    (j, A, B), (j, B, A) writes one row where the first of them appears: its cells at +mult,
    then the other's at -mult, = 0."""
    cc, cj, cp = pairs.columns()
    n_cells = len(cc)
    if not n_cells:
        return Rows.empty(), np.zeros(0, dtype=bool)
    n_kinds = len(pairs.kinds)
    own = np.asarray(pairs.kind_of, dtype=np.int64)[cc]
    key = (cj * n_kinds + own) * n_kinds + cp
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))  # groups by first appearance
    group = rank[inverse.reshape(-1)]  # per cell
    n_groups = len(uniq)
    g_key = np.empty(n_groups, dtype=np.int64)
    g_key[rank] = uniq
    g_type, rest = np.divmod(g_key, n_kinds * n_kinds)
    g_own, g_partner = np.divmod(rest, n_kinds)
    size = np.bincount(group, minlength=n_groups)
    members = np.argsort(group, kind="stable")  # cells group by group, in cell order
    start = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(size, out=start[1:])
    position = np.empty(n_cells, dtype=np.int64)
    position[members] = np.arange(n_cells) - start[group[members]]
    same = g_own == g_partner
    back_key = (g_type * n_kinds + g_partner) * n_kinds + g_own
    at = np.minimum(np.searchsorted(uniq, back_key), len(uniq) - 1)
    back = np.where((uniq[at] == back_key) & ~same, rank[at], -1)  # the (j, B, A) group, or -1
    writes = same | (back < 0) | (np.arange(n_groups) < back)
    fixed = ((back < 0) & ~same)[group]
    rows_of = np.where(same, size, writes.astype(np.int64))
    row0 = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(rows_of, out=row0[1:])
    n_rows = int(row0[-1])
    value_of = -mult[cc]  # a cell's coefficient in rows of other cells (same type) or of its partner group
    # Entries as (row, part, order) -> (cell, value); part 0: the row's own cells, part 1: the others.
    rows_e, part_e, order_e, cell_e, value_e = [], [], [], [], []
    across = writes[group] & ~same[group]  # cells of groups that write a consistency row
    n = np.flatnonzero(across)
    rows_e.append(row0[group[n]])
    part_e.append(np.zeros(len(n), dtype=np.int64))
    order_e.append(position[n])
    cell_e.append(n)
    value_e.append(mult[cc[n]])
    taken = np.flatnonzero(~same & (back >= 0) & ~writes)  # groups written by their partner's row
    n = np.flatnonzero(np.isin(group, taken))
    rows_e.append(row0[back[group[n]]])
    part_e.append(np.ones(len(n), dtype=np.int64))
    order_e.append(position[n])
    cell_e.append(n)
    value_e.append(value_of[n])
    # same type: the row of cell o (group g, position r) holds every cell of g
    owner = np.flatnonzero(same[group])
    if len(owner):
        reps = size[group[owner]]
        o = np.repeat(owner, reps)
        offset = np.arange(len(o)) - np.repeat(np.cumsum(reps) - reps, reps)
        cell = members[start[group[o]] + offset]
        mine = cell == o
        rows_e.append(row0[group[o]] + position[o])
        part_e.append(np.where(mine, 0, 1))
        order_e.append(offset)
        cell_e.append(cell)
        value_e.append(np.where(mine, 2.0 + value_of[cell], value_of[cell]))
    rows_all = np.concatenate(rows_e)
    sort = np.lexsort((np.concatenate(order_e), np.concatenate(part_e), rows_all))
    lower = np.where(np.repeat(same, rows_of), -INF, 0.0)
    return (
        Rows(
            z0 + np.concatenate(cell_e)[sort],
            np.concatenate(value_e)[sort],
            np.bincount(rows_all, minlength=n_rows),
            lower,
            np.zeros(n_rows),
        ),
        fixed,
    )


def pair_allocation(
    pairs: PairCells, m: int, z: np.ndarray, class_index: np.ndarray, job_ids: list[str], threshold: float = 1e-7
) -> dict[tuple[str, str], np.ndarray]:
    """Job-pair time fractions from the type-level z (one per cell of `pairs`, m worker
    types): {(id_a, id_b): row over types}, id_a < id_b, pairs in order of first appearance.

    Per group (type j, kind A, partner kind B) of cells with z above `threshold`, in order of
    first appearance, the group's jobs (cell by cell, each cell's class members in job order):
    within a kind, x_ab = z_a z_b / (Σz - (z_a + z_b) / 2) for every two of them; across two
    kinds (from the kind that sorts first, `_kind_rank`), x_ab = z_a z_b / Σ_A z for every a of
    A and b of B. Where a job would so get more than `PAIR_PARTNERS` partners, the group's pairs
    come from `_layouts` instead (`PAIR_LAYOUTS` matchings): the same time per job next to the
    other kind, one or two partners per matching."""
    limit = PAIR_PARTNERS
    cc, cj, cp = pairs.columns()
    live = np.flatnonzero(np.asarray(z) > threshold)
    if not len(live):
        return {}
    # One entry per (live cell, member job), cell by cell, members in job order.
    class_index = np.asarray(class_index, dtype=np.int64)
    by_class = np.argsort(class_index, kind="stable")
    size = np.bincount(class_index, minlength=int(cc.max()) + 1)
    class_start = np.cumsum(size) - size
    per_cell = size[cc[live]]
    cell = np.repeat(live, per_cell)
    offset = np.arange(len(cell)) - np.repeat(np.cumsum(per_cell) - per_cell, per_cell)
    job = by_class[class_start[cc[cell]] + offset]
    value = np.asarray(z, dtype=float)[cell]
    n_kinds = len(pairs.kinds)
    kind_of = np.asarray(pairs.kind_of, dtype=np.int64)
    key = (cj[cell] * n_kinds + kind_of[cc[cell]]) * n_kinds + cp[cell]
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    entries = np.argsort(inverse.reshape(-1), kind="stable")  # group by group, in entry order
    job, value = job[entries], value[entries]
    bounds = np.zeros(len(uniq) + 1, dtype=np.int64)
    np.cumsum(np.bincount(inverse.reshape(-1), minlength=len(uniq)), out=bounds[1:])
    n_groups = len(uniq)
    size = np.diff(bounds)
    position = np.empty(n_groups, dtype=np.int64)
    position[np.argsort(first, kind="stable")] = np.arange(n_groups)  # groups as they first appear
    g_type, rest = np.divmod(uniq, n_kinds * n_kinds)
    g_own, g_partner = np.divmod(rest, n_kinds)
    lo, hi = bounds[:-1], bounds[1:]
    out = _PairBuilder(job, value)
    values = value.tolist()
    same = g_own == g_partner
    small = size - 1 <= limit if limit is not None else np.ones(n_groups, dtype=bool)
    for dense, pick in ((True, same & small), (False, same & ~small)):
        g = np.flatnonzero(pick)
        out.add(position[g], g_type[g], lo[g], hi[g], lo[g], hi[g], within=True, dense=dense, values=values)
    # across two kinds: each unordered pair of kinds once, from its smaller kind, where the
    # partner kind has jobs there too
    back_key = (g_type * n_kinds + g_partner) * n_kinds + g_own
    at = np.minimum(np.searchsorted(uniq, back_key), n_groups - 1)
    rank = _kind_rank(pairs.kinds)
    across = ~same & (uniq[at] == back_key) & (rank[g_own] <= rank[g_partner])
    both = np.maximum(size, size[at])
    small = both <= limit if limit is not None else np.ones(n_groups, dtype=bool)
    for dense, pick in ((True, across & small), (False, across & ~small)):
        g = np.flatnonzero(pick)
        out.add(position[g], g_type[g], lo[g], hi[g], lo[at[g]], hi[at[g]], within=False, dense=dense, values=values)
    return out.shares(job_ids, m)


def _kind_rank(kinds: list[JobType]) -> np.ndarray:
    """Each kind's place in (sort key, label) order, equal ones sharing it: a pair of kinds is
    split from the kind that comes first; equal ones split from both (as ever)."""
    keys = [(jt.sort_key(), jt.label) for jt in kinds]
    order = sorted(set(keys))
    place = {k: i for i, k in enumerate(order)}
    return np.array([place[k] for k in keys], dtype=np.int64)


class _PairBuilder:
    """The job pairs of `pair_allocation`, group by group, as arrays: built in bulk per kind of
    group (full within a kind, full across kinds, laid out), ordered as the groups came."""

    def __init__(self, job: np.ndarray, value: np.ndarray):
        self.job, self.value = job, value
        self.full: dict[bool, tuple[np.ndarray, ...]] = {}  # within? -> (position, type, lo, hi, o_lo, o_hi, total)
        self.laid: list[tuple[np.ndarray, ...]] = []  # (position, type, lo, hi, o_lo, o_hi, within)
        self.parts: list[tuple[np.ndarray, ...]] = []  # (position, local order, a, b, type, value)

    def add(self, position, j, lo, hi, o_lo, o_hi, *, within: bool, dense: bool, values: list[float]) -> None:
        """Groups whose entries are lo:hi (kind A) and o_lo:o_hi (kind B, or A again); `dense`:
        the full pair space there, with Σz of A summed one entry after another (`values`)."""
        if not len(position):
            return
        if dense:
            total = np.array([sum(values[s:e]) for s, e in zip(lo.tolist(), hi.tolist())], dtype=float)
            self.full[within] = (position, j, lo, hi, o_lo, o_hi, total)
        else:
            self.laid.append((position, j, lo, hi, o_lo, o_hi, np.full(len(position), within)))

    def _full_within(self) -> None:
        """Every two jobs of a group, in (first, second) order: z_a z_b / (total - (z_a + z_b) / 2)."""
        if True not in self.full:
            return
        position, j, lo, hi, _, _, total = self.full[True]
        n = hi - lo
        count = n * (n - 1) // 2
        group = np.repeat(np.arange(len(n)), count)
        local = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        # the local-th pair (p, q), p < q, of n items in row-major order
        first, second = _upper_pair(local, n[group])
        ia, ib = lo[group] + first, lo[group] + second
        za, zb, t = self.value[ia], self.value[ib], total[group]
        half = (za + zb) / 2
        share = np.where(t > half, za * zb / np.where(t > half, t - half, 1.0), 0.0)
        self.parts.append((position[group], local, self.job[ia], self.job[ib], j[group], share))

    def _full_across(self) -> None:
        """Every job of A with every job of B, A's jobs outer: z_a z_b / Σ_A z."""
        if False not in self.full:
            return
        position, j, lo, hi, o_lo, o_hi, total = self.full[False]
        n_a, n_b = hi - lo, o_hi - o_lo
        count = np.where(total > 0, n_a * n_b, 0)
        group = np.repeat(np.arange(len(n_a)), count)
        local = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        ia, ib = lo[group] + local // n_b[group], o_lo[group] + local % n_b[group]
        share = self.value[ia] * self.value[ib] / total[group]
        self.parts.append((position[group], local, self.job[ia], self.job[ib], j[group], share))

    def _laid_out(self) -> None:
        if not self.laid:
            return
        position, j, lo, hi, o_lo, o_hi, within = (np.concatenate(c) for c in zip(*self.laid))
        group, a, b, share = _layouts(self.value, lo, hi, o_lo, o_hi, within, PAIR_LAYOUTS)
        first = np.searchsorted(group, np.arange(len(lo)))  # pairs come group by group
        self.parts.append(
            (position[group], np.arange(len(group)) - first[group], self.job[a], self.job[b], j[group], share)
        )

    def shares(self, job_ids: list[str], m: int) -> dict[tuple[str, str], np.ndarray]:
        """{(id_a, id_b): row over types}, id_a < id_b, in order of first appearance."""
        self._full_within()
        self._full_across()
        self._laid_out()
        if not self.parts:
            return {}
        position, local, a, b, j, share = (np.concatenate(c) for c in zip(*self.parts))
        order = np.lexsort((local, position))
        a, b, j, share = a[order], b[order], j[order], share[order]
        rank = np.empty(len(job_ids), dtype=np.int64)  # job ids in string order: keys are (smaller, larger)
        rank[sorted(range(len(job_ids)), key=job_ids.__getitem__)] = np.arange(len(job_ids))
        swap = rank[a] > rank[b]
        a, b = np.where(swap, b, a), np.where(swap, a, b)
        code, first, inverse = np.unique(a * len(job_ids) + b, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # pairs as they first appear
        number = np.empty(len(code), dtype=np.int64)
        number[order] = np.arange(len(code))
        rows = np.zeros((len(code), m))
        np.add.at(rows, (number[inverse.reshape(-1)], j), share)
        ids, pick = np.array(job_ids, dtype=object), first[order]
        return dict(zip(zip(ids[a[pick]].tolist(), ids[b[pick]].tolist()), rows))


def _upper_pair(local: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The local-th pair (p, q), p < q, of n items, in row-major order (as nested loops give them)."""
    p, q = np.zeros(len(local), dtype=np.int64), np.zeros(len(local), dtype=np.int64)
    for size in np.unique(n).tolist():
        here = np.flatnonzero(n == size)
        rows, cols = np.triu_indices(size, 1)
        p[here], q[here] = rows[local[here]], cols[local[here]]
    return p, q


def _layout_pairs(
    ids_a: np.ndarray, u: np.ndarray, ids_b: np.ndarray | None, v: np.ndarray | None, layouts: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_layouts` for one group: (jobs a, jobs b, x_ab); `ids_b` None: within one kind."""
    n_a = len(u)
    if ids_b is None or v is None:
        value = np.asarray(u, dtype=float)
        span = (np.array([0]), np.array([n_a]), np.array([0]), np.array([n_a]), np.array([True]))
        ids = np.asarray(ids_a)
    else:
        value = np.concatenate((np.asarray(u, dtype=float), np.asarray(v, dtype=float)))
        span = (np.array([0]), np.array([n_a]), np.array([n_a]), np.array([n_a + len(v)]), np.array([False]))
        ids = np.concatenate((np.asarray(ids_a), np.asarray(ids_b)))
    _, a, b, share = _layouts(value, *span, layouts)
    return ids[a], ids[b], share


def _layouts(
    value: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    o_lo: np.ndarray,
    o_hi: np.ndarray,
    within: np.ndarray,
    layouts: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The bounded decomposition of many groups at once: (group, entry a, entry b, x_ab) with
    a, b indices into `value` (the entries' z), each unordered pair once, group by group and by
    (a, b) within a group. Group g pairs entries lo[g]:hi[g] (kind A) with o_lo[g]:o_hi[g]
    (kind B; the same entries where `within[g]`).

    Lay the entries' z end to end on a circle (in entry order: class, then job order) and pair
    each point with one point of the partners' circle: a's time next to b is the overlap of a's
    interval with b's. Across kinds B is laid on its own circle scaled to A's total (the full
    space's sums: each b gets z_b in all, each a gets z_a Σz_B / Σz_A); within a kind a point
    pairs with the point a shift s away, which is symmetric when the shifts come in pairs ±s
    around half the circle and never pairs an entry with itself while s stays in
    [z_max, total - z_max] (the LP keeps z_a <= half the kind's total). One matching gives each
    entry one or two partners per interval of the other side it spans (one, where the two
    kinds have as many jobs of equal z); `layouts` matchings at spread shifts, averaged, give
    the fill more partners to swap between."""
    layouts = max(1, int(layouts))
    n_groups = len(lo)
    # the entries of each side, group by group
    side_a, group_a = _ranges(lo, hi)
    side_b, group_b = _ranges(o_lo, o_hi)
    u, v = value[side_a], value[side_b]
    total_a = np.bincount(group_a, weights=u, minlength=n_groups)
    total = np.bincount(group_b, weights=v, minlength=n_groups)
    u = np.where(within[group_a], u, u * (total / np.where(total_a > 0, total_a, 1.0))[group_a])
    starts_a, ends_a = _intervals(u, group_a, total)
    starts_b, _ = _intervals(v, group_b, total)
    largest = np.zeros(n_groups)
    np.maximum.at(largest, group_a, u)
    step = np.linspace(-1.0, 1.0, layouts) if layouts > 1 else np.zeros(1)
    shifts = np.where(
        within[:, None],
        total[:, None] / 2 + np.maximum(0.0, total / 2 - largest)[:, None] * step[None, :],
        total[:, None] * (np.arange(layouts) / layouts)[None, :],
    )
    # One circle per (group, shift): cut at every A start, every shifted B start and the end;
    # each piece then lies in one a (the last A start before it) and one b (the last shifted B
    # start before it, or the B interval that wraps past the end).
    n_b = np.bincount(group_b, minlength=n_groups)
    circle_a = (group_a * layouts)[:, None] + np.arange(layouts)  # (A entries, shifts)
    circle_b = (group_b * layouts)[:, None] + np.arange(layouts)
    n_circles = n_groups * layouts
    circle = np.concatenate((circle_a.ravel(), np.arange(n_circles), circle_b.ravel()))
    point = np.concatenate(
        (
            np.repeat(starts_a, layouts),
            np.repeat(total, layouts),
            np.mod(starts_b[:, None] + shifts[group_b], np.repeat(total, n_b)[:, None]).ravel(),
        )
    )
    kind = np.concatenate((np.zeros(circle_a.size), np.full(n_circles, 2), np.ones(circle_b.size))).astype(np.int8)
    entry = np.concatenate(
        (
            np.repeat(np.arange(len(side_a)), layouts),
            np.zeros(n_circles, dtype=np.int64),
            np.repeat(np.arange(len(side_b)), layouts),
        )
    )
    order = np.lexsort((kind, point, circle))
    circle, point, kind, entry = circle[order], point[order], kind[order], entry[order]
    first = np.searchsorted(circle, np.arange(n_circles))  # each circle's first cut
    count_a = np.cumsum(kind == 0) - np.concatenate(([0], np.cumsum(kind == 0)))[first][circle]
    is_b = kind == 1
    count_b = np.cumsum(is_b) - np.concatenate(([0], np.cumsum(is_b)))[first][circle]
    b_sorted = entry[is_b]  # the B entries of each circle in circle order
    b_first = np.searchsorted(circle[is_b], np.arange(n_circles))
    n_b_circle = np.repeat(n_b, layouts)
    # pieces: from each cut to the next one of the same circle
    piece = np.flatnonzero(circle[:-1] == circle[1:])
    c = circle[piece]
    g = c // layouts
    length = point[piece + 1] - point[piece]
    keep = (length > 1e-9 * total[g]) & (count_a[piece] > 0)  # drops slivers of rounding
    piece, c, g, length = piece[keep], c[keep], g[keep], length[keep]
    a = side_a[np.searchsorted(group_a, g) + count_a[piece] - 1]  # A entries are in circle order
    wrap = np.where(count_b[piece] > 0, count_b[piece] - 1, n_b_circle[c] - 1)
    b = side_b[b_sorted[b_first[c] + wrap]]
    weight = length / layouts
    is_within = within[g]
    # within a kind both orders of a pair were laid (shifts ±s): x_ab is half their sum; a == b
    # (a sliver of rounding where an entry would meet itself) is dropped
    a, b = np.where(is_within, np.minimum(a, b), a), np.where(is_within, np.maximum(a, b), b)
    weight = np.where(is_within, weight / 2, weight)
    apart = a != b
    g, a, b, weight = g[apart], a[apart], b[apart], weight[apart]
    size = len(value)
    code, inverse = np.unique((g * size + a) * size + b, return_inverse=True)
    share = np.bincount(inverse.reshape(-1), weights=weight, minlength=len(code))
    rest, b = np.divmod(code, size)
    g, a = np.divmod(rest, size)
    return g, a, b, share


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The indices lo[g]:hi[g] of every group g, one after another, and their group."""
    size = hi - lo
    group = np.repeat(np.arange(len(lo)), size)
    return lo[group] + np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size), group


def _intervals(length: np.ndarray, group: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each entry's [start, end) on its group's circle (entries group by group): ends are running
    sums within the group, the group's first start 0 and last end its total, exactly."""
    ends = np.cumsum(length)
    first = np.searchsorted(group, group)  # the first entry of each entry's group
    before = np.concatenate(([0.0], ends))[first]
    ends = ends - before
    last = np.r_[group[1:] != group[:-1], True]
    ends[last] = total[group[last]]
    starts = ends - length
    starts[first == np.arange(len(group))] = 0.0
    return starts, ends
