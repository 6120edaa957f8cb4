"""The compiled interior point (`--solver-method compiled-ipm`) against HiGHS on the same LPs."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from typer.testing import CliRunner

import planner.policies.lp.highs as highs
from planner.cli import app
from planner.errors import SolverError
from planner.formats.cluster import parse_cluster
from planner.formats.gavel_json import import_gavel
from planner.modes.generator import GeneratorConfig, JobGenerator
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.policies.lp import dense_ipm
from planner.policies.lp.matrix import INF, MatrixLP

pytestmark = pytest.mark.skipif(not dense_ipm.available(), reason="numba is not installed (the `fast` extra)")


def _lp(A: np.ndarray, upper_rows: np.ndarray, cost: np.ndarray, lower: np.ndarray, upper: np.ndarray, *,
        maximize: bool = True, row_lower: np.ndarray | None = None) -> MatrixLP:  # fmt: skip
    starts, index, value = [0], [], []
    for row in A:
        cols = np.flatnonzero(row)
        index.extend(cols.tolist())
        value.extend(row[cols].tolist())
        starts.append(len(index))
    m = len(A)
    return MatrixLP(
        cost=cost.astype(float), lower=lower.astype(float), upper=upper.astype(float),
        row_lower=np.full(m, -INF) if row_lower is None else row_lower, row_upper=upper_rows.astype(float),
        row_start=np.array(starts, dtype=np.int32), row_index=np.array(index, dtype=np.int32),
        row_value=np.array(value, dtype=float), maximize=maximize,
    )  # fmt: skip


def _las_like(rng: np.random.Generator, classes: int, types: int) -> MatrixLP:
    """max t s.t. capacity per type, at most all of the time per class, t <= a class's throughput."""
    n = classes * types + 1
    rows, bounds = [], []
    sizes = rng.integers(1, 4, classes)
    for w in range(types):
        row = np.zeros(n)
        row[w * classes : (w + 1) * classes] = sizes
        rows.append(row)
        bounds.append(float(rng.integers(1, 2 * classes)))
    for c in range(classes):
        row = np.zeros(n)
        row[[w * classes + c for w in range(types)]] = 1.0
        rows.append(row)
        bounds.append(1.0)
    rates = rng.uniform(0.1, 3.0, (classes, types)) * (rng.random((classes, types)) > 0.2)
    for c in range(classes):
        row = np.zeros(n)
        row[[w * classes + c for w in range(types)]] = -rates[c]
        row[-1] = 1.0
        rows.append(row)
        bounds.append(0.0)
    cost = np.zeros(n)
    cost[-1] = 1.0
    lower, upper = np.zeros(n), np.ones(n)
    lower[-1], upper[-1] = -INF, INF
    return _lp(np.array(rows), np.array(bounds), cost, lower, upper)


def _highs(lp: MatrixLP) -> tuple[np.ndarray, float]:
    answer = highs.run_loaded(highs.load_matrix(lp, method="ipm", policy="test"), policy="test")
    assert answer is not None
    return answer


@pytest.mark.parametrize("seed", range(40))
def test_random_las_lps_reach_highs_optimum_and_stay_feasible(seed):
    rng = np.random.default_rng(seed)
    lp = _las_like(rng, int(rng.integers(1, 30)), int(rng.integers(1, 5)))
    answer = dense_ipm.try_solve(lp)
    assert answer is not None
    x, objective = answer
    reference = _highs(lp)[1]
    assert abs(objective - reference) <= 1e-7 * max(1.0, abs(reference))
    assert np.all(x >= lp.lower - 1e-8) and np.all(x <= lp.upper + 1e-8)
    A = np.zeros((lp.n_rows, lp.n_cols))
    for r in range(lp.n_rows):
        span = slice(lp.row_start[r], lp.row_start[r + 1])
        A[r, lp.row_index[span]] = lp.row_value[span]
    assert np.all(A @ x <= lp.row_upper + 1e-7)


@pytest.mark.parametrize("seed", range(20))
def test_random_lps_with_one_sided_and_free_columns(seed):
    """min c'x over A x <= b with columns bounded below only, above only, boxed or free."""
    rng = np.random.default_rng(100 + seed)
    m, n = int(rng.integers(2, 12)), int(rng.integers(2, 12))
    A = rng.normal(size=(m, n)) * (rng.random((m, n)) > 0.3)
    x0 = rng.uniform(-1, 1, n)  # a feasible point inside every bound below
    b = A @ x0 + rng.uniform(0.1, 1.0, m)
    lower, upper = x0 - rng.uniform(0.5, 2, n), x0 + rng.uniform(0.5, 2, n)
    kind = rng.integers(0, 4, n)
    lower[kind == 1], upper[kind == 2] = -INF, INF
    lower[kind == 3], upper[kind == 3] = -INF, INF
    cost = rng.normal(size=n)
    cost[kind == 3] = 0.0  # a free column with a cost could make the LP unbounded
    lp = _lp(A, b, cost, lower, upper, maximize=bool(seed % 2))
    try:
        reference = _highs(lp)
    except SolverError:  # unbounded (a one-sided column): no optimum to claim
        assert dense_ipm.try_solve(lp) is None
        return
    answer = dense_ipm.try_solve(lp)
    assert answer is not None
    assert abs(answer[1] - reference[1]) <= 1e-6 * max(1.0, abs(reference[1]))


def test_an_lp_without_an_optimum_is_left_to_highs():
    one = np.array([[1.0]])
    infeasible = _lp(one, np.array([-1.0]), np.array([1.0]), np.array([0.0]), np.array([1.0]))
    unbounded = _lp(-one, np.array([0.0]), np.array([1.0]), np.array([-INF]), np.array([INF]))
    assert dense_ipm.try_solve(infeasible) is None
    assert dense_ipm.try_solve(unbounded) is None
    for lp in (infeasible, unbounded):  # solve_matrix then asks HiGHS, which says why
        with pytest.raises(SolverError, match="not optimal"):
            highs.solve_matrix(lp, method=highs.DENSE_METHOD, policy="p")


def test_lps_without_rows_or_with_a_fixed_column_go_to_highs():
    """A NaN must never come back as an optimum (an LP without rows used to converge on one), and a
    fixed column has no interior to start in."""
    empty = np.zeros((0, 2))
    unbounded = _lp(empty, np.zeros(0), np.array([1.0, 0.0]), np.zeros(2), np.array([INF, 1.0]))
    fixed = _lp(np.array([[1.0, 1.0]]), np.array([1.5]), np.array([1.0, 1.0]), np.zeros(2), np.array([0.0, 1.0]))
    assert dense_ipm.try_solve(unbounded) is None and dense_ipm.try_solve(fixed) is None
    assert highs.solve_matrix(fixed, method=highs.DENSE_METHOD, policy="p")[1] == pytest.approx(1.0)


def test_a_large_bound_does_not_loosen_the_other_rows():
    """Feasibility is judged row by row: x2 + x3 <= 0.5 stays met beside x1 <= 1e7."""
    A = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 1.0, -1.0]])
    lp = _lp(A, np.array([1e7, 0.5, 0.0]), np.array([1.0, 1.0, 0.3]), np.zeros(3), np.full(3, INF))
    answer = dense_ipm.try_solve(lp)
    assert answer is not None
    assert answer[0][1] + answer[0][2] <= 0.5 + 1e-7 * 1.5


def test_nan_never_converges():
    lp = _las_like(np.random.default_rng(0), 4, 2)
    lp.cost[-1] = np.nan
    assert dense_ipm.try_solve(lp) is None


def test_forms_it_does_not_take_go_to_highs():
    lp = _las_like(np.random.default_rng(1), 3, 2)
    ranged = _lp(np.array([[1.0, 1.0]]), np.array([2.0]), np.array([1.0, 1.0]), np.zeros(2), np.ones(2),
                 row_lower=np.array([0.5]))  # fmt: skip
    assert dense_ipm.try_solve(ranged) is None
    integer = _las_like(np.random.default_rng(1), 3, 2)
    integer.integer = np.zeros(integer.n_cols, dtype=np.int8)
    assert dense_ipm.try_solve(integer) is None
    assert dense_ipm.try_solve(lp) is not None


def test_the_same_lp_gives_the_same_bits():
    lp = _las_like(np.random.default_rng(7), 20, 3)
    first, second = dense_ipm.try_solve(lp), dense_ipm.try_solve(lp)
    assert first is not None and second is not None
    assert first[0].tobytes() == second[0].tobytes() and first[1] == second[1]


def test_solve_matrix_uses_it_and_keeps_its_answers_apart_from_highs():
    highs.forget_answers()
    lp = _las_like(np.random.default_rng(3), 12, 3)
    ipm_values, ipm_objective, _ = highs.solve_matrix(lp, method="ipm", policy="p")
    values, objective, _ = highs.solve_matrix(lp, method=highs.DENSE_METHOD, policy="p")
    own = dense_ipm.try_solve(lp)
    assert own is not None
    assert values.tobytes() == own[0].tobytes()  # not HiGHS's stored answer to the same LP
    assert abs(objective - ipm_objective) <= 1e-7 * abs(ipm_objective)
    assert not np.array_equal(values, ipm_values)  # a point of the same optimal face, found differently


def test_without_the_compiled_solver_highs_solves(monkeypatch):
    highs.forget_answers()
    lp = _las_like(np.random.default_rng(4), 6, 3)
    monkeypatch.setattr(dense_ipm, "try_solve", lambda lp: None)
    values, objective, _ = highs.solve_matrix(lp, method=highs.DENSE_METHOD, policy="p")
    reference = _highs(lp)
    assert values.tobytes() == reference[0].tobytes() and objective == reference[1]


GAVEL = DATA / "gavel" / "simulation_throughputs.json"
RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "gavel_simulator_times.json"


def _simulate_point(point: dict, method: str, reuse: int = 0):
    table = import_gavel(GAVEL)
    gen = JobGenerator(table, GeneratorConfig(seed=point["seed"], rate_per_hour=point["rate_per_hour"]))
    window = tuple(point["window"]) if point.get("window") else None
    config = SimulationConfig(
        policy=point["policy"], seed=point["seed"], gavel_compat=True, window=window, solver_method=method,
        reuse_solves=reuse,
    )  # fmt: skip
    workload = Workload(generator=gen, num_jobs=point.get("jobs"))
    return run_simulation(table, parse_cluster(point["cluster"]), workload, config)


def _recorded_points() -> list[dict]:
    return json.loads(RECORDED.read_text())["points"]


@functools.cache
def _reference(n: int):
    return _simulate_point(_recorded_points()[n], "ipm")


@pytest.mark.slow
@pytest.mark.parametrize("reuse", [0, 3])
@pytest.mark.parametrize("n", range(len(_recorded_points())))
def test_every_recorded_point_stays_within_issue_31s_bounds(n, reuse):
    """The fast path (the compiled interior point, alone and with --reuse-solves 3, as
    bench_simulate.py times it) against the reference (HiGHS's interior point, every re-solve
    solved) on every recorded point: average JCT within 0.5 %, makespan within 1 %, and average
    JCT within 5 % of Gavel's own recorded result."""
    point = _recorded_points()[n]
    reference, fast = _reference(n), _simulate_point(point, highs.DENSE_METHOD, reuse)
    assert reference.status == fast.status == "ok"
    jct = fast.metrics["jct_s"]["mean"] / reference.metrics["jct_s"]["mean"] - 1
    span = fast.metrics["makespan_s"] / reference.metrics["makespan_s"] - 1
    assert abs(jct) <= 0.005 and abs(span) <= 0.01, (jct, span)
    gavel = fast.metrics["jct_s"]["mean"] / 3600 / point["avg_jct_h"] - 1
    assert abs(gavel) <= 0.05, gavel
    assert fast.jobs != reference.jobs  # the two really solved differently (a silent fallback would pass)
    assert fast.config["solver_method"] == highs.DENSE_METHOD
    assert (fast.metrics.get("resolves_reused", 0) > 0) == (reuse > 0)


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_the_cli_runs_it_and_refuses_it_without_numba(tmp_path, monkeypatch):
    out = tmp_path / "sim"
    args = ["simulate", "-t", str(GAVEL), "-c", "2:2:2", "-n", "8", "--policy", "max_min_fairness_perf", "-o"]
    result = _cli(*args, str(out), "--solver-method", highs.DENSE_METHOD, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["config"]["solver_method"] == highs.DENSE_METHOD
    monkeypatch.setattr(dense_ipm, "available", lambda: False)
    monkeypatch.setattr(dense_ipm, "why_off", lambda: "RuntimeError: cannot cache function")
    result = _cli(*args, str(tmp_path / "sim2"), "--solver-method", highs.DENSE_METHOD)
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "needs numba" in said and "cannot cache function" in said, result.output
    assert not (tmp_path / "sim2").exists()
    result = _cli(*args, str(tmp_path / "sim3"), "--solver-method", "newton")
    assert result.exit_code == 2 and "unknown solver method 'newton'" in result.output
