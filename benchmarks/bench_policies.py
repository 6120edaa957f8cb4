"""Policy build + solve time at scale, side by side with a hand-written highspy LP.

Jobs are drawn uniformly from Gavel's 26 single-GPU job types (its published
table, data/gavel/simulation_throughputs.json; the synthetic demo table when
that is absent) on three worker types with n/4 GPUs each. For LAS-perf the same LP
is also written straight into highspy (per job, and per class) — the floor
for what rota's LP builder adds. cvxpy + ECOS (Gavel's stack) is timed when installed.

Run: python benchmarks/bench_policies.py [--quick]
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.formats.table import read_table  # noqa: E402
from planner.policies import make_policy  # noqa: E402
from planner.policies.base import Allocation  # noqa: E402
from planner.policies.lp.classes import make_classes  # noqa: E402
from planner.policies.problem import Problem  # noqa: E402

GAVEL = ROOT / "data" / "gavel" / "simulation_throughputs.json"
TARGETS = {
    "max_min_fairness_perf": 1.0,
    "max_min_fairness_packed": 1.0,
    "max_min_fairness_water_filling_perf": 2.0,
    "finish_time_fairness_perf": 2.0,
}


def load_table():
    if GAVEL.exists():
        from planner.formats.gavel_json import import_gavel

        return import_gavel(GAVEL), ["k80", "p100", "v100"], "Gavel simulation_throughputs.json"
    table = read_table(ROOT / "data" / "throughputs.csv")
    return table, ["a100", "t4", "v100"], "rota synthetic demo table (Gavel data not found)"


def problem_for(table, types, n, seed=0) -> Problem:
    rng = np.random.default_rng(seed)
    kinds = [jt for jt in table.job_types if jt.scale_factor == 1 and all(table.solo(w, jt) > 0 for w in types)]
    picks = [kinds[k] for k in rng.integers(0, len(kinds), size=n)]
    tput = np.array([[table.solo(w, jt) for w in types] for jt in picks])
    return Problem(
        job_ids=[str(i) for i in range(n)],
        job_types=picks,
        worker_types=types,
        capacity=np.full(3, max(1, n // 4), dtype=float),
        throughput=tput,
        scale=np.ones(n),
        weight=np.ones(n),
        remaining=rng.uniform(1e3, 1e5, size=n),
        time_since_start=rng.uniform(0, 3600, size=n),
        cost=np.array([0.135, 0.43, 0.74]),
        entity=[None] * n,
        slo_left_s=np.full(n, np.nan),
        table=table,
    )


def highspy_las(problem: Problem, aggregate: bool) -> float:
    """max t s.t. t <= Σ_j a_ij x_ij, capacity, time — built straight into highspy."""
    import highspy

    started = time.perf_counter()
    prop = problem.proportional_throughput()
    a = problem.throughput * (problem.scale / (problem.weight * prop))[:, None]
    classes = make_classes(problem.throughput, problem.scale, problem.weight, aggregate=aggregate)
    rep, mult = classes.representative, classes.multiplicity
    k, m = len(rep), problem.throughput.shape[1]
    nvar = k * m + 1  # x[c, j] row-major, then t
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("solver", "ipm")
    h.setOptionValue("run_crossover", "off")
    inf = highspy.kHighsInf
    cost = np.zeros(nvar)
    cost[-1] = -1.0
    lower = np.zeros(nvar)
    upper = np.ones(nvar)
    lower[-1], upper[-1] = -inf, inf
    h.addVars(nvar, lower, upper)
    h.changeColsCost(nvar, np.arange(nvar, dtype=np.int32), cost)
    starts: list[int] = []
    index: list[int] = []
    value: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    for j in range(m):  # capacity
        starts.append(len(index))
        index += [c * m + j for c in range(k)]
        value += list(mult * problem.scale[rep])
        lo.append(-inf)
        hi.append(problem.capacity[j])
    for c in range(k):  # time
        starts.append(len(index))
        index += [c * m + j for j in range(m)]
        value += [1.0] * m
        lo.append(-inf)
        hi.append(1.0)
    for c, i in enumerate(rep):  # t - a x <= 0
        starts.append(len(index))
        index += [c * m + j for j in range(m)] + [nvar - 1]
        value += list(-a[i]) + [1.0]
        lo.append(-inf)
        hi.append(0.0)
    h.addRows(
        len(lo),
        np.array(lo),
        np.array(hi),
        len(index),
        np.array(starts, dtype=np.int32),
        np.array(index, dtype=np.int32),
        np.array(value),
    )
    h.run()
    return time.perf_counter() - started


def timed(func, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        func()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main(argv=None) -> None:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    table, types, source = load_table()
    print(f"policy timings (median of 3; build + solve, seconds) on {source}")
    cvxpy_las: Callable[[Problem], float] | None = None
    try:
        import cvxpy  # noqa: F401
        import ecos  # noqa: F401

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_simulate import cvxpy_las_seconds  # Gavel's LAS-perf program, cvxpy + ECOS

        cvxpy_las = cvxpy_las_seconds
    except ImportError:
        print("cvxpy + ECOS (Gavel's stack) not installed: no cvxpy column in this run")
    print(
        f"{'policy':40s} {'n':>7s} {'rota':>8s} {'classes':>7s} {'highspy/job':>11s} "
        f"{'highspy/class':>13s} {'rota/floor':>10s} {'cvxpy+ECOS':>10s} target"
    )
    sizes = {
        "max_min_fairness_perf": [32, 128, 512, 2048, 10_000, 100_000],
        "max_min_fairness_packed": [32, 128, 512, 2048],
        "max_min_fairness_water_filling_perf": [32, 128, 512, 2048],
        "finish_time_fairness_perf": [32, 128, 512, 2048],
    }
    if quick:
        sizes = {k: [v for v in s if v <= 512] for k, s in sizes.items()}
    make_policy("max_min_fairness_perf").allocate(problem_for(table, types, 8))  # first solve: HiGHS start-up
    for name, ns in sizes.items():
        for n in ns:
            problem = problem_for(table, types, n)
            repeats = 1 if n >= 10_000 or name == "finish_time_fairness_perf" and n >= 2048 else 3
            alloc: dict[str, Allocation] = {}

            def run(name=name, problem=problem, alloc=alloc):
                alloc["a"] = make_policy(name).allocate(problem)

            rota = timed(run, repeats)
            floor_job = floor_class = None
            if name == "max_min_fairness_perf":
                floor_job = timed(lambda p=problem: highspy_las(p, aggregate=False), repeats) if n <= 10_000 else None
                floor_class = timed(lambda p=problem: highspy_las(p, aggregate=True), repeats)
            ratio = f"{rota / floor_class:10.1f}" if floor_class else f"{'-':>10s}"
            gavel = None
            if name == "max_min_fairness_perf" and cvxpy_las is not None and n <= 10_000:
                gavel = timed(lambda p=problem, las=cvxpy_las: las(p), 1)
            gavel_text = f"{gavel:10.3f}" if gavel else f"{'-':>10s}"
            target = TARGETS[name] if n == (100_000 if name == "max_min_fairness_perf" else 2048) else None
            mark = "" if target is None else f"<= {target:.0f} s: {'met' if rota <= target else 'MISSED'}"
            print(
                f"{name:40s} {n:7d} {rota:8.3f} {alloc['a'].n_classes or 0:7d} "
                f"{(f'{floor_job:.3f}' if floor_job else '-'):>11s} "
                f"{(f'{floor_class:.3f}' if floor_class else '-'):>13s} "
                f"{ratio} {gavel_text} {mark}"
            )


if __name__ == "__main__":
    main()
