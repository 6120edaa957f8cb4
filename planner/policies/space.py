"""The allocation space a policy optimises over, as LP variables and shared rows.

One `Space` covers the four cases every LP policy has: per job or per class of
identical jobs, and with or without space sharing. Its variables are x[c, j]
for every class c and worker type j where c can run (throughput > 0), and with
space sharing z[n] for every pair cell (packing.py). Its rows:
  capacity   Σ_c mult_c · s_c · x[c, j] <= N_j      (spec B2)
  time       Σ_j x[c, j] <= 1                       (spec B3)
  quota      Σ_{c of tenant e} mult_c · s_c · x[c, j] <= Q_ej   (docs/tenants.md)
and x in [0, 1] (B1); packed spaces extend them with the pair terms and add
the consistency rows. Quota rows exist only where the cluster gives a tenant a
quota below the type's size; a quota of 0 drops the tenant's cells on that type
instead (x = 0 there, so x = 0 stays feasible: quotas never make an LP
infeasible). Classes then never mix tenants. Packed spaces refuse quotas for
now. A policy's LP is `head`, the policy's own rows, then `tail`, in that
order (the row order fixes which optimal point HiGHS's interior-point method
returns, see lp/matrix.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import InputError
from planner.policies.base import Allocation, Status
from planner.policies.lp.classes import Classes, make_classes
from planner.policies.lp.matrix import INF, LPBuilder, Rows, stack
from planner.policies.packing import PairCells, packed_rows, pair_allocation, pair_cells
from planner.policies.problem import Problem, Quotas


def job_type_codes(problem: Problem) -> np.ndarray:
    codes: dict = {}
    return np.array([codes.setdefault(jt, len(codes)) for jt in problem.job_types], dtype=float)


def space_classes(
    problem: Problem,
    seen: np.ndarray,
    *keys: np.ndarray,
    packed: bool = False,
    aggregate: bool = True,
    quotas: Quotas | None = None,
) -> Classes:
    """Jobs agreeing on `seen` throughputs, scale factor and `keys` (and job type, if packed; and
    tenant, with `quotas`, the problem's) share a class."""
    if quotas is not None:
        if packed:
            raise InputError(
                "the cluster gives tenants quotas, which packing policies do not honour yet; "
                "choose a policy that does (docs/tenants.md) or drop the quotas",
                field="tenants",
            )
        keys = keys + (quotas.tenant.astype(float),)
    if packed:
        if problem.table is None or not problem.table.has_pairs():
            raise InputError(
                "packing policies need co-located pair rows in the throughput table "
                "(profile pairs, or fill them with 'rota table estimate')",
                field="partner_model",
            )
        keys = keys + (job_type_codes(problem),)
    return make_classes(seen, problem.scale, *keys, aggregate=aggregate)


@dataclass
class Space:
    classes: Classes
    throughput: np.ndarray  # (k, m) the throughput each class is seen to have
    cell_type: np.ndarray  # x variable n is x[cell_class[n], cell_type[n]]: by type, then class
    cell_class: np.ndarray
    by_class: np.ndarray  # the x variables again, class by class (type order within)
    per_class: np.ndarray  # how many x variables each class has
    head: Rows
    tail: Rows
    pairs: PairCells | None = None
    pairs_of_class: dict[int, list[int]] | None = None
    fixed_pairs: np.ndarray | None = None  # pair cells held at 0

    @property
    def n_cells(self) -> int:
        return len(self.cell_class)

    @property
    def n_pairs(self) -> int:
        return 0 if self.pairs is None else len(self.pairs.cells)

    def builder(self) -> LPBuilder:
        """A fresh LP holding this space's variables (x, then z), no rows yet."""
        lp = LPBuilder()
        lp.variables(self.n_cells)
        if self.pairs is not None:
            assert self.fixed_pairs is not None
            lp.variables(self.n_pairs, 0.0, np.where(self.fixed_pairs, 0.0, 1.0))
        return lp

    def throughput_rows(
        self, factor: np.ndarray, solo: np.ndarray | None = None, shared: np.ndarray | None = None
    ) -> Rows:
        """One row per class: factor_c · (its effective throughput), each type's solo part
        also times solo[c, j] and its co-located part times shared[c, j] (default: solo).
        Terms: x in type order, then the class's pair cells. Bounds left open."""
        c_of, typ_of = self.cell_class[self.by_class], self.cell_type[self.by_class]
        value = self.throughput[c_of, typ_of] * factor[c_of]
        if solo is not None:
            value = value * solo[c_of, typ_of]
        index, lengths = self.by_class, self.per_class
        if self.pairs is not None and self.n_pairs:
            index, value, lengths = self._with_pair_terms(factor, solo if shared is None else shared, value)
        return Rows(index, value, lengths, np.full(len(lengths), -INF), np.full(len(lengths), INF))

    def _with_pair_terms(
        self, factor: np.ndarray, shared: np.ndarray | None, solo_value: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert self.pairs is not None
        cells = np.array(self.pairs.cells, dtype=np.int64).reshape(-1, 3)
        pair_class, pair_type = cells[:, 0], cells[:, 1]
        pair_value = np.array(self.pairs.coef) * factor[pair_class]
        if shared is not None:
            pair_value = pair_value * shared[pair_class, pair_type]
        # class by class: its x terms, then its pair cells (both already in order)
        k = len(self.per_class)
        keys = np.concatenate((self.cell_class[self.by_class], pair_class))
        order = np.argsort(keys, kind="stable")
        index = np.concatenate((self.by_class, self.n_cells + np.arange(self.n_pairs)))[order]
        value = np.concatenate((solo_value, pair_value))[order]
        return index, value, np.bincount(keys, minlength=k)

    def read(
        self, values: np.ndarray, column: np.ndarray, *, signed_zeros: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(x as (classes, types), z per pair cell) from a solution's column values.

        HiGHS returns -0.0 for some zero columns. Most policies read it as 0.0; max-min
        fairness and unpacked finish-time fairness have always kept the sign
        (`signed_zeros`), and keep it so their allocations stay bit for bit what they were.
        """
        k, m = self.throughput.shape
        x = np.zeros((k, m))
        z = values[column[self.n_cells : self.n_cells + self.n_pairs]]
        x[self.cell_class, self.cell_type] = values[column[: self.n_cells]]
        if not signed_zeros:
            x, z = x + 0.0, z + 0.0  # -0.0 + 0.0 is 0.0
        return np.clip(x, 0.0, 1.0), z

    def allocation(
        self,
        problem: Problem,
        x: np.ndarray,
        z: np.ndarray,
        objective: float,
        *,
        method: str,
        build_s: float,
        solve_s: float,
        **info,
    ) -> Allocation:
        """The jobs' allocation from the classes' x (and pairs from z)."""
        pair_x = None
        if self.pairs is not None:
            pair_x = pair_allocation(self.pairs, x.shape[1], z, self.classes.index, problem.job_ids)
        if self.classes.n and self.classes.index.max(initial=0) >= self.classes.n:  # barred jobs: x = 0
            x = np.vstack((x, np.zeros((1, x.shape[1]))))
        return Allocation(
            x[self.classes.index],
            objective=objective,
            status=Status.OPTIMAL,
            solver=f"highs-{method}",
            build_s=build_s,
            solve_s=solve_s,
            n_classes=self.classes.n,
            pair_x=pair_x,
            info=info,
        )


def build_space(
    problem: Problem,
    seen: np.ndarray,
    *keys: np.ndarray,
    packed: bool = False,
    aggregate: bool = True,
    keep_barred: bool = False,
) -> Space:
    """The space over `seen` throughputs, one row per class (`space_classes`).

    With quotas, a class whose tenant has a quota of 0 on every type where it can run is
    barred: it is left out of the space (no variables, no rows; `classes.index` of its jobs is
    `classes.n`, and their allocation is 0), so that it does not pin a max-min level or a
    makespan at 0 for everyone, unless every class is barred or `keep_barred` (water-filling
    freezes such classes at level 0 itself)."""
    quotas = problem.quotas()
    classes = space_classes(problem, seen, *keys, packed=packed, aggregate=aggregate, quotas=quotas)
    runnable = seen[classes.representative] > 0
    if quotas is not None:
        runnable &= quotas.limit[quotas.tenant[classes.representative]] > 0  # a quota of 0: no cell there
        barred = ~runnable.any(axis=1)
        if not keep_barred and barred.any() and not barred.all():
            classes, runnable = without_classes(classes, barred), runnable[~barred]
    rep = classes.representative
    throughput = seen[rep]
    gpus = problem.scale[rep] * classes.multiplicity
    k, m = runnable.shape
    cell_type, cell_class = np.nonzero(runnable.T)
    per_type, per_class = np.bincount(cell_type, minlength=m), np.bincount(cell_class, minlength=k)
    by_class = np.lexsort((cell_type, cell_class))
    if not packed:
        n = len(cell_class)
        head = Rows(
            np.concatenate((np.arange(n), by_class)),
            np.concatenate((gpus[cell_class].astype(float), np.ones(n))),
            np.concatenate((per_type[per_type > 0], per_class[per_class > 0])),
            np.full(np.count_nonzero(per_type) + np.count_nonzero(per_class), -INF),
            np.concatenate((problem.capacity[per_type > 0], np.ones(np.count_nonzero(per_class)))).astype(float),
        )
        if quotas is not None:
            head = stack(head, quota_rows(quotas, rep, gpus, cell_class, cell_type, problem.capacity))
        return Space(classes, throughput, cell_type, cell_class, by_class, per_class, head, Rows.empty())
    assert problem.table is not None  # space_classes checked
    job_types = [problem.job_types[i] for i in rep]
    pairs = pair_cells(throughput, classes.multiplicity, job_types, problem.worker_types, problem.table)
    x_ids = np.full((k, m), -1, dtype=np.int64)
    x_ids[cell_class, cell_type] = np.arange(len(cell_class))
    rows = packed_rows(throughput, gpus, problem.capacity, classes.multiplicity, pairs, x_ids, len(cell_class))
    return Space(
        classes,
        throughput,
        cell_type,
        cell_class,
        by_class,
        per_class,
        rows.head,
        rows.tail,
        pairs,
        rows.by_row,
        rows.fixed,
    )


def without_classes(classes: Classes, dropped: np.ndarray) -> Classes:
    """`classes` less the `dropped` ones (a boolean per class), the rest renumbered in order;
    the jobs of dropped classes get index `n` (one past the last class)."""
    kept = ~dropped
    number = np.full(classes.n + 1, int(np.count_nonzero(kept)), dtype=np.int64)
    number[np.flatnonzero(kept)] = np.arange(np.count_nonzero(kept))
    return Classes(number[classes.index], classes.representative[kept], classes.multiplicity[kept])


def quota_rows(
    quotas: Quotas,
    rep: np.ndarray,
    gpus: np.ndarray,
    cell_class: np.ndarray,
    cell_type: np.ndarray,
    capacity: np.ndarray,
) -> Rows:
    """One row per (worker type, tenant) whose quota is below the type's GPUs and that has cells
    there: Σ mult_c · s_c · x[c, j] over the tenant's classes <= the quota. Rows by type, then
    tenant (in order of first appearance); terms in cell order. A quota of the type's size or
    more adds nothing the capacity row does not say."""
    tenant = quotas.tenant[rep][cell_class]  # the tenant of each cell
    limit = quotas.limit[tenant, cell_type]
    kept = np.flatnonzero(limit < capacity[cell_type])
    if not len(kept):
        return Rows.empty()
    n_tenants = quotas.limit.shape[0]
    key = cell_type[kept] * n_tenants + tenant[kept]
    order = np.argsort(key, kind="stable")
    cells, key = kept[order], key[order]
    rows, lengths = np.unique(key, return_counts=True)
    bound = quotas.limit[rows % n_tenants, rows // n_tenants]
    return Rows(
        cells.astype(np.int64),
        gpus[cell_class[cells]].astype(float),
        lengths.astype(np.int64),
        np.full(len(rows), -INF),
        bound.astype(float),
    )
