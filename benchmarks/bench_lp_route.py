"""Three ways to hand the same LP to HiGHS, timed: why the policies build arrays.

The LP is max-min fairness (LAS-perf) over k classes on three worker types:
maximise t s.t. t <= f_c Σ_j T[c, j] x[c, j], capacity and time rows. Each
route builds it from the same arrays and solves it with the same HiGHS
options (interior point, no crossover):

  pyomo+compiler  a Pyomo model, compiled by pyomo.repn's LinearStandardFormCompiler
                  into a sparse matrix, passed to highspy
  pyomo+appsi     the same Pyomo model through Pyomo's appsi HiGHS interface
  numpy           rota's array builder (planner/policies/lp), passed to highspy

It prints milliseconds per build + solve (median of --repeats runs) and each
route's time over the numpy route's, measured in the same run, and checks the
three objectives agree. Pyomo's compiler needs scipy, which rota does not
depend on: without it that route is left out.

Run: python benchmarks/bench_lp_route.py [--sizes 12,64,256] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyomo.environ as pyo  # noqa: E402
from pyomo.contrib.appsi.solvers import Highs as AppsiHighs  # noqa: E402
from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler  # noqa: E402

from planner.policies.lp.highs import (  # noqa: E402
    forget_answers,
    highs_options,
    load_matrix,
    run_loaded,
    solve_matrix,
)
from planner.policies.lp.matrix import INF, MatrixLP  # noqa: E402
from planner.policies.max_min_fairness import max_min_lp, seen_throughput  # noqa: E402
from planner.policies.problem import Problem  # noqa: E402
from planner.policies.space import build_space  # noqa: E402

METHOD = "ipm"
Route = Callable[[Problem], tuple[float, float]]  # problem -> (build seconds, objective)


def problem_with_classes(k: int, seed: int = 0) -> Problem:
    """k jobs, all different (k classes), on three worker types with k/4 GPUs each."""
    rng = np.random.default_rng(seed)
    tput = rng.uniform(0.5, 5.0, size=(k, 3)).round(3)
    tput[rng.random((k, 3)) < 0.1] = 0.0  # some jobs cannot run on some types
    tput[np.arange(k), rng.integers(0, 3, size=k)] = rng.uniform(0.5, 5.0, size=k).round(3)
    return Problem(
        job_ids=[str(i) for i in range(k)],
        job_types=[None] * k,  # type: ignore[list-item]  # unpacked: job types unused
        worker_types=["k80", "p100", "v100"],
        capacity=np.full(3, max(1, k // 4), dtype=float),
        throughput=tput,
        scale=np.ones(k),
        weight=np.ones(k),
        remaining=np.full(k, 1e4),
        time_since_start=np.zeros(k),
    )


def fairness_factor(problem: Problem) -> np.ndarray:
    _, prop = seen_throughput(problem, True)
    return problem.scale / (problem.weight * prop)


def pyomo_model(problem: Problem) -> pyo.ConcreteModel:
    """The LP written the usual Pyomo way: indexed variables, expressions, constraint lists."""
    tput, factor = problem.throughput, fairness_factor(problem)
    k, m = tput.shape
    cells = [(c, j) for c in range(k) for j in range(m) if tput[c, j] > 0]
    model = pyo.ConcreteModel()
    model.x = pyo.Var(cells, bounds=(0.0, 1.0))
    model.t = pyo.Var()
    model.capacity = pyo.ConstraintList()
    model.time = pyo.ConstraintList()
    model.fair = pyo.ConstraintList()
    for j in range(m):
        model.capacity.add(
            pyo.quicksum(float(problem.scale[c]) * model.x[c, j] for c in range(k) if tput[c, j] > 0)
            <= float(problem.capacity[j])
        )
    for c in range(k):
        mine = [j for j in range(m) if tput[c, j] > 0]
        model.time.add(pyo.quicksum(model.x[c, j] for j in mine) <= 1.0)
        model.fair.add(model.t <= pyo.quicksum(float(factor[c] * tput[c, j]) * model.x[c, j] for j in mine))
    model.objective = pyo.Objective(expr=model.t, sense=pyo.maximize)
    return model


def route_compiler(problem: Problem) -> tuple[float, float]:
    """Pyomo model -> LinearStandardFormCompiler (sparse A, mixed <=, =, >= rows) -> highspy."""
    started = time.perf_counter()
    model = pyomo_model(problem)
    form = LinearStandardFormCompiler().write(model, mixed_form=True, set_sense=None)
    a = form.A.tocsr()
    kind = np.array([bound for _, bound in form.rows])
    rhs = np.asarray(form.rhs, dtype=float)
    bounds = [var.bounds for var in form.columns]
    lp = MatrixLP(
        cost=np.asarray(form.c.todense(), dtype=float).ravel(),
        lower=np.array([-INF if lo is None else lo for lo, _ in bounds], dtype=float),
        upper=np.array([INF if hi is None else hi for _, hi in bounds], dtype=float),
        row_start=a.indptr.astype(np.int32),
        row_index=a.indices.astype(np.int32),
        row_value=a.data.astype(float),
        row_lower=np.where(kind <= 0, rhs, -INF),
        row_upper=np.where(kind >= 0, rhs, INF),
        maximize=form.objectives[0].sense == pyo.maximize,
    )
    built = time.perf_counter()
    solver = load_matrix(lp, method=METHOD, policy="bench")
    result = run_loaded(solver, policy="bench")
    assert result is not None
    return built - started, result[1]


def route_appsi(problem: Problem) -> tuple[float, float]:
    """Pyomo model -> Pyomo's appsi HiGHS interface (translation happens inside solve)."""
    started = time.perf_counter()
    model = pyomo_model(problem)
    built = time.perf_counter()
    solver = AppsiHighs()
    solver.config.load_solution = False
    solver.highs_options = highs_options(METHOD)
    results = solver.solve(model)
    return built - started, float(results.best_feasible_objective)


def route_numpy(problem: Problem) -> tuple[float, float]:
    """rota's array builder -> highspy."""
    started = time.perf_counter()
    space = build_space(problem, problem.throughput, problem.weight)
    lp, _ = max_min_lp(space, fairness_factor(problem)[space.classes.representative])
    built = time.perf_counter()
    forget_answers()  # a repeat is the same LP: without this it would be answered from memory
    _, objective, _ = solve_matrix(lp, method=METHOD, policy="bench")
    return built - started, objective


def available_routes() -> dict[str, Route]:
    routes: dict[str, Route] = {"pyomo+compiler": route_compiler, "pyomo+appsi": route_appsi, "numpy": route_numpy}
    try:
        import scipy.sparse  # noqa: F401  (what LinearStandardFormCompiler builds its matrices with)
    except ImportError:
        print("scipy is not installed: the pyomo+compiler route is left out")
        del routes["pyomo+compiler"]
    return routes


def measure(
    route: Callable[[Problem], tuple[float, float]], problem: Problem, repeats: int
) -> tuple[float, float, float]:
    """(median build+solve ms, median build ms, objective)."""
    totals, builds, objective = [], [], 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        build_s, objective = route(problem)
        totals.append(time.perf_counter() - started)
        builds.append(build_s)
    return 1e3 * statistics.median(totals), 1e3 * statistics.median(builds), objective


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="12,64,256", help="numbers of classes")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    routes = available_routes()
    for route in routes.values():  # first calls pay imports and HiGHS start-up
        route(problem_with_classes(8))
    print(f"max-min fairness LP, build + solve (HiGHS {METHOD}), median of {args.repeats}, ms")
    print(f"{'classes':>7s} " + " ".join(f"{name:>22s}" for name in routes) + "   ratio to numpy")
    for k in (int(s) for s in args.sizes.split(",")):
        problem = problem_with_classes(k)
        timings = {name: measure(route, problem, args.repeats) for name, route in routes.items()}
        objectives = [objective for _, _, objective in timings.values()]
        assert max(objectives) - min(objectives) <= 1e-7 * max(1.0, abs(objectives[0])), objectives
        cells = " ".join(f"{total:9.1f} (build {build:6.1f})" for total, build, _ in timings.values())
        base = timings["numpy"][0]
        ratios = " ".join(f"{timings[name][0] / base:5.1f}x" for name in routes)
        print(f"{k:7d} {cells}   {ratios}")


if __name__ == "__main__":
    main()
