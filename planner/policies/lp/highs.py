"""HiGHS as the solver of every `MatrixLP`: options, loading, solving, duals, status.

The simulator re-solves small LPs (tens of rows) hundreds of times per trace:
HiGHS itself needs ~1 ms for one, so everything around the solve is kept thin.
Anything but an optimal end is a `SolverError` naming the policy, never a
partial allocation.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import highspy
import numpy as np
from pyomo.common.tee import capture_output

from planner.errors import SolverError
from planner.policies.lp import dense_ipm
from planner.policies.lp.matrix import MatrixLP

# HiGHS interior point without crossover returns a point in the middle of the
# optimal face (like Gavel's ECOS) instead of a vertex; it is also the fastest
# method on these LPs (see README, "Solver choice").
DEFAULT_METHOD = "ipm"
# rota's own compiled interior point for small LPs (planner.policies.lp.dense_ipm); HiGHS's
# interior point solves every LP it does not (too large, another form, no numba, no convergence)
DENSE_METHOD = "compiled-ipm"
LP_METHODS = ("ipm", "simplex", DENSE_METHOD)  # what users choose between
METHODS = LP_METHODS + ("mip", "mip-no-presolve")  # the mip ones: HiGHS branch and bound, internal


def highs_options(method: str) -> dict[str, str | float | bool]:
    """HiGHS options for `method`."""
    if method not in METHODS:
        raise ValueError(f"unknown solver method {method!r}; use one of {METHODS}")
    if method == DENSE_METHOD:
        method = "ipm"
    options: dict[str, str | float | bool] = {
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


_ROWWISE = int(highspy.MatrixFormat.kRowwise)
_SENSE = {True: int(highspy.ObjSense.kMaximize), False: int(highspy.ObjSense.kMinimize)}


def pass_model(solver: highspy.Highs, lp: MatrixLP) -> highspy.HighsStatus:
    """Hand `lp` to `solver` as arrays (the array overload of passModel: ~15x cheaper than
    filling a HighsLp record field by field, which converts every array on assignment)."""
    # The array overload takes its counts from cost, row_lower and row_index and checks nothing
    # else: a shorter array would be read past its end, so the shapes are checked here.
    n, m = lp.n_cols, lp.n_rows
    sizes = (len(lp.lower), len(lp.upper), len(lp.row_upper), len(lp.row_value))
    starts_ok = len(lp.row_start) == m + 1 or (m == 0 and len(lp.row_start) == 0)
    if sizes != (n, n, m, len(lp.row_index)) or not starts_ok or (lp.integer is not None and len(lp.integer) != n):
        raise ValueError("its arrays disagree in length")  # load_matrix reports it as a SolverError
    # One flag per column (0 continuous, 1 integer): the binding reads n_cols of them, even for an LP.
    integrality = np.zeros(lp.n_cols, np.int32) if lp.integer is None else lp.integer.astype(np.int32)
    return solver.passModel(
        lp.n_cols,
        lp.n_rows,
        len(lp.row_index),
        _ROWWISE,
        _SENSE[lp.maximize],
        0.0,  # objective offset
        lp.cost,
        lp.lower,
        lp.upper,
        lp.row_lower,
        lp.row_upper,
        lp.row_start,
        lp.row_index,
        lp.row_value,
        integrality,
    )


def load_matrix(lp: MatrixLP, *, method: str, policy: str, options: dict | None = None) -> highspy.Highs:
    """Hand `lp` to this process's HiGHS for `method` (or `options`), replacing its model and
    state; returns it for `run_loaded` (re-solves after `changeRowsBounds` warm-start from the
    last basis)."""
    solver = _solver(highs_options(method) if options is None else {**options, "output_flag": False})
    try:
        status = pass_model(solver, lp)
    except Exception as exc:  # a malformed matrix: report, never return a partial allocation
        raise SolverError(f"{policy}: HiGHS refused the model: {exc}") from None
    if status == highspy.HighsStatus.kError:  # e.g. an entry outside the columns
        raise SolverError(f"{policy}: HiGHS refused the model (its checks failed)")
    return solver


def run_loaded(
    solver: highspy.Highs, *, policy: str, allow_infeasible: bool = False
) -> tuple[np.ndarray, float] | None:
    """Solve the loaded model: (values, objective), or None when infeasible and
    `allow_infeasible`; any other end but optimal raises SolverError."""
    status = _run(solver, policy)
    if status == highspy.HighsModelStatus.kUnknown and _option(solver, "run_crossover") == "off":
        # The interior point method without crossover can stop short of its tolerances on a
        # degenerate LP ('Unknown'); crossover from where it stopped reaches an optimal vertex.
        # Only such LPs take this path: every other answer stays as it was.
        solver.setOptionValue("run_crossover", "on")
        try:
            status = _run(solver, policy)
        finally:
            solver.setOptionValue("run_crossover", "off")
    if allow_infeasible and status in (
        highspy.HighsModelStatus.kInfeasible,
        highspy.HighsModelStatus.kUnboundedOrInfeasible,
    ):
        return None
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(
            f"{policy}: HiGHS ended '{solver.modelStatusToString(status)}', not optimal; no allocation was produced"
        )
    return np.asarray(solver.getSolution().col_value, dtype=float), float(solver.getObjectiveValue())


def _option(solver: highspy.Highs, name: str) -> object:
    value = solver.getOptionValue(name)
    return value[1] if isinstance(value, tuple) else value  # (status, value) in recent highspy


def _run(solver: highspy.Highs, policy: str) -> highspy.HighsModelStatus:
    try:
        solver.run()
    except Exception as exc:  # solver crashed: report, never return a partial allocation
        raise SolverError(f"{policy}: HiGHS failed: {exc}") from None
    return solver.getModelStatus()


def row_duals(solver: highspy.Highs, rows: np.ndarray) -> np.ndarray:
    """|dual value| of these rows in the last solve."""
    return np.abs(np.asarray(solver.getSolution().row_dual, dtype=float)[rows])


# Answers to recent LPs, keyed by the LP's exact bytes and the options: a simulation re-solves
# when the job set changes, and the same set of job classes (so the very same LP) comes back
# now and then. HiGHS is deterministic, and passModel drops all earlier state (see `_solver`),
# so the stored answer is the one a new solve would return. Only small LPs are kept.
_ANSWERS: OrderedDict[bytes, tuple[np.ndarray, float]] = OrderedDict()
ANSWERS_KEPT = 256
ANSWER_MAX_BYTES = 1 << 16  # LP data larger than this is solved every time (and takes longer anyway)


def forget_answers() -> None:
    """Drop the stored answers (a benchmark times every run from the same start)."""
    _ANSWERS.clear()


def _answer_key(lp: MatrixLP, options: dict) -> bytes | None:
    """The LP as HiGHS receives it, with the options, as bytes; None for a large LP."""
    arrays = [lp.cost, lp.lower, lp.upper, lp.row_start, lp.row_index, lp.row_value, lp.row_lower, lp.row_upper]
    if lp.integer is not None:
        arrays.append(lp.integer)
    if sum(a.nbytes for a in arrays) > ANSWER_MAX_BYTES:
        return None
    shape = [(a.dtype.str, a.shape) for a in arrays]
    header = repr((sorted(options.items()), lp.maximize, lp.integer is not None, shape)).encode()
    return b"".join((header, *(a.tobytes() for a in arrays)))


def solve_matrix(
    lp: MatrixLP, *, method: str, policy: str, options: dict | None = None
) -> tuple[np.ndarray, float, float]:
    """Solve with `highs_options(method)` (or `options`, where a policy sets its own):
    (values, objective, seconds). Anything but an optimal end raises SolverError.
    An LP identical to a recent one gets that one's answer without a solve."""
    started = time.perf_counter()
    if method == DENSE_METHOD and options is None:
        # no answer store: the compiled solve of a small LP costs about what its key would
        result = dense_ipm.try_solve(lp)
        if result is not None:
            return result[0], result[1], time.perf_counter() - started
    key = _answer_key(lp, {**(highs_options(method) if options is None else options), "rota_method": method})
    known = None if key is None else _ANSWERS.get(key)
    if known is not None:
        _ANSWERS.move_to_end(key)  # type: ignore[arg-type]
        return known[0].copy(), known[1], time.perf_counter() - started
    solver = load_matrix(lp, method=method, policy=policy, options=options)
    result = run_loaded(solver, policy=policy)
    assert result is not None  # only allow_infeasible returns None
    values, objective = result
    if key is not None:
        _ANSWERS[key] = (values.copy(), objective)
        if len(_ANSWERS) > ANSWERS_KEPT:
            _ANSWERS.popitem(last=False)
    return values, objective, time.perf_counter() - started


class BoundProbe:
    """An LP loaded once whose `rows` get new lower bounds before each solve (bisection over
    a horizon or a finish-time ratio): every re-solve warm-starts from the previous basis."""

    def __init__(self, lp: MatrixLP, rows: np.ndarray, *, method: str, policy: str):
        self.lp, self.rows, self.method, self.policy = lp, rows.astype(np.int32), method, policy
        self._solver: highspy.Highs | None = None
        self._upper = lp.row_upper[rows].copy()

    def solve(self, lower: np.ndarray) -> tuple[np.ndarray, float] | None:
        """(values, objective) with `lower` as the rows' lower bounds, None if infeasible."""
        if self._solver is None:
            self.lp.row_lower[self.rows] = lower
            self._solver = load_matrix(self.lp, method=self.method, policy=self.policy)
        else:
            # (highspy 1.16's type stubs omit changeRowsBounds; the binding has it)
            self._solver.changeRowsBounds(len(self.rows), self.rows, lower, self._upper)  # type: ignore[attr-defined]
        return run_loaded(self._solver, policy=self.policy, allow_infeasible=True)
