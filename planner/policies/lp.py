"""The Pyomo pieces every allocation LP repeats, solved with HiGHS.

`AllocationLP` holds x[c, j] for every row c (a job, or a class of identical
jobs) and worker type j on which the row can run (throughput > 0), with
  capacity   Σ_c mult_c · s_c · x[c, j] <= N_j      (spec B2)
  time       Σ_j x[c, j] <= 1                       (spec B3)
and x in [0, 1] (B1). Policies add their own rows and objective.

Identical jobs (same throughput row, scale factor and weight) are
interchangeable in these convex problems: averaging an optimal solution over
permutations of a class gives one where all members share x, so one variable
per class with the class size as multiplicity has the same optimum.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo
from pyomo.common.gc_manager import PauseGC
from pyomo.contrib.appsi.base import TerminationCondition
from pyomo.contrib.appsi.solvers import Highs

from planner.errors import SolverError

# HiGHS interior point without crossover returns a point in the middle of the
# optimal face (like Gavel's ECOS) instead of a vertex; it is also the fastest
# method on these LPs (see README, "Solver choice").
DEFAULT_METHOD = "ipm"
LP_METHODS = ("ipm", "simplex")  # what users choose between
METHODS = LP_METHODS + ("mip", "mip-no-presolve")  # the mip ones: HiGHS branch and bound, internal


@dataclass(frozen=True)
class Classes:
    """Rows of the LP: `members[c]` are the job indices of class c."""

    index: np.ndarray  # (n,) class of each job
    representative: np.ndarray  # (k,) one job index per class
    multiplicity: np.ndarray  # (k,) class sizes

    @property
    def n(self) -> int:
        return len(self.representative)


def make_classes(*arrays: np.ndarray, aggregate: bool = True) -> Classes:
    """Group jobs whose rows agree in every given array (each (n,) or (n, m))."""
    n = len(arrays[0])
    if not aggregate or n == 0:
        idx = np.arange(n)
        return Classes(idx, idx, np.ones(n, dtype=float))
    rows = [tuple(r) for r in np.hstack([a.reshape(n, -1) for a in arrays]).tolist()]
    first: dict[tuple, int] = {}
    for i, row in enumerate(rows):
        first.setdefault(row, i)
    # Classes in sorted key order (as np.unique would number them, ~50x slower on small inputs):
    # the LP's row order, and so the interior-point answer, depends on it.
    ordered = sorted(first)
    number = {row: c for c, row in enumerate(ordered)}
    index = np.array([number[row] for row in rows])
    counts = np.bincount(index, minlength=len(ordered)).astype(float)
    return Classes(index, np.array([first[row] for row in ordered]), counts)


def highs_options(method: str) -> dict:
    """HiGHS options for `method`; shared by the Pyomo route and the direct one (matrix_lp)."""
    if method not in METHODS:
        raise ValueError(f"unknown solver method {method!r}; use one of {METHODS}")
    options = {
        "solver": method,
        "primal_feasibility_tolerance": 1e-9,
        "dual_feasibility_tolerance": 1e-9,
        "mip_rel_gap": 1e-9,
    }
    if method == "ipm":
        options.update(run_crossover="off", ipm_optimality_tolerance=1e-9)
    if method.startswith("mip"):
        # HiGHS 1.16's MIP presolve wrongly reported a few feasible water-filling MILPs
        # infeasible; callers retry those with "mip-no-presolve".
        options = {}  # the objective counts jobs: the default gap (1e-4) cannot lose one
        if method == "mip-no-presolve":
            options["presolve"] = "off"
    options["output_flag"] = False  # no per-solve log callbacks: about half the time of a small solve
    return options


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
