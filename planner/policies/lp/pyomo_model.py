"""The Pyomo formulation of the allocation LP, for the policies not yet on the array builder.

`AllocationLP` holds x[c, j] for every class c and worker type j on which it can run,
with the capacity and time rows (spec B1-B3); `PackedLP` adds the space-sharing
variables and rows (packing.py). Policies add their own rows and objective and
solve through Pyomo's appsi HiGHS interface.
"""

from __future__ import annotations

import time

import numpy as np
import pyomo.environ as pyo
from pyomo.common.gc_manager import PauseGC
from pyomo.contrib.appsi.base import TerminationCondition
from pyomo.contrib.appsi.solvers import Highs

from planner.errors import SolverError
from planner.formats.table import JobType, ThroughputTable
from planner.policies.base import Allocation, Status
from planner.policies.lp.classes import Classes
from planner.policies.lp.highs import DEFAULT_METHOD, highs_options
from planner.policies.packing import group_pair_cells, pair_allocation, pair_cells
from planner.policies.problem import Problem
from planner.policies.space import space_classes


class AllocationLP:
    def __init__(
        self, throughput: np.ndarray, scale: np.ndarray, capacity: np.ndarray, multiplicity: np.ndarray | None = None
    ):
        started = time.perf_counter()
        self.k, self.m = throughput.shape
        self.runnable = throughput > 0
        mult = np.ones(self.k) if multiplicity is None else multiplicity
        self.cells = [(c, j) for c in range(self.k) for j in range(self.m) if self.runnable[c, j]]
        self.cell_of = {cell: n for n, cell in enumerate(self.cells)}
        model = pyo.ConcreteModel()
        model.x = pyo.Var(range(len(self.cells)), bounds=(0.0, 1.0))
        model.capacity = pyo.ConstraintList()
        model.time = pyo.ConstraintList()
        model.extra = pyo.ConstraintList()
        self.throughput = throughput
        self.capacity_row: dict[int, int] = {}
        self.time_row: dict[int, int] = {}
        with PauseGC():
            for j in range(self.m):
                terms = [
                    float(mult[c] * scale[c]) * model.x[self.cell_of[(c, j)]]
                    for c in range(self.k)
                    if self.runnable[c, j]
                ]
                if terms:
                    model.capacity.add(pyo.quicksum(terms) <= float(capacity[j]))
                    self.capacity_row[j] = len(model.capacity)
            for c in range(self.k):
                terms = [model.x[self.cell_of[(c, j)]] for j in range(self.m) if self.runnable[c, j]]
                if terms:
                    model.time.add(pyo.quicksum(terms) <= 1.0)
                    self.time_row[c] = len(model.time)
        self.model = model
        self._build_extra(model, throughput, scale, capacity, mult)
        self.build_s = time.perf_counter() - started

    def _build_extra(self, model, throughput, scale, capacity, mult) -> None:
        """Hook for subclasses that add variables (space sharing)."""

    def throughput_expr(
        self, c: int, factor: float = 1.0, per_type: np.ndarray | None = None, per_type_shared: np.ndarray | None = None
    ):
        """factor · (effective throughput of row c), each type's part optionally
        scaled by per_type[j] (solo) / per_type_shared[j] (co-located time)."""
        weights = self.throughput[c] * factor
        if per_type is not None:
            weights = weights * per_type
        return self.weighted_sum(c, weights)

    def weighted_sum(self, c: int, coefficients: np.ndarray):
        """Σ_j coefficients[j] · x[c, j] over the types row c can use."""
        terms = [
            float(coefficients[j]) * self.model.x[self.cell_of[(c, j)]]
            for j in range(self.m)
            if self.runnable[c, j] and coefficients[j] != 0
        ]
        return pyo.quicksum(terms) if terms else 0.0

    def set_objective(self, objective, sense=pyo.maximize) -> None:
        model = self.model
        if hasattr(model, "objective"):
            model.del_component(model.objective)
        model.objective = pyo.Objective(expr=objective, sense=sense)

    def _solver(self, method: str) -> Highs:
        """One persistent HiGHS per model: re-solves after small changes reuse its state."""
        cached = getattr(self, "_highs", None)
        if cached is not None and cached[0] == method:
            return cached[1]
        solver = Highs()
        solver.config.load_solution = False
        solver.config.stream_solver = False
        solver.highs_options = highs_options(method)
        self._highs = (method, solver)
        return solver

    def run(self, *, method: str = DEFAULT_METHOD, policy: str = "policy", allow_infeasible: bool = False):
        """Solve the current model. Returns (x (k, m), objective, seconds), or None when
        infeasible and `allow_infeasible`; any other non-optimal end raises SolverError."""
        solver = self._solver(method)
        started = time.perf_counter()
        try:
            results = solver.solve(self.model)
        except Exception as exc:  # solver crashed: report, never return a partial allocation
            raise SolverError(f"{policy}: HiGHS failed: {exc}") from None
        solve_s = time.perf_counter() - started
        condition = results.termination_condition
        if allow_infeasible and condition in (
            TerminationCondition.infeasible,
            TerminationCondition.infeasibleOrUnbounded,
        ):
            return None
        if condition != TerminationCondition.optimal:
            raise SolverError(f"{policy}: HiGHS ended '{condition.name}', not optimal; no allocation was produced")
        results.solution_loader.load_vars()
        self.results = results  # for duals
        x = np.zeros((self.k, self.m))
        for n, (c, j) in enumerate(self.cells):
            x[c, j] = self.model.x[n].value or 0.0
        return np.clip(x, 0.0, 1.0), float(results.best_feasible_objective), solve_s

    def duals(self, constraints) -> list[float]:
        """|dual| of each constraint in the last solve."""
        values = self.results.solution_loader.get_duals(cons_to_load=list(constraints))
        return [abs(values[c]) for c in constraints]

    def solve(
        self, objective, *, sense=pyo.maximize, method: str = DEFAULT_METHOD, policy: str = "policy"
    ) -> tuple[np.ndarray, float, float]:
        """Set the objective and solve; return (x as (k, m), objective value, solve seconds)."""
        self.set_objective(objective, sense)
        return self.run(method=method, policy=policy)


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


def build_pyomo_space(
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


def read_pyomo_allocation(
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
