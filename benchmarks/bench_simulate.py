"""Simulation speed: continuous trace points, jobs simulated per wall-clock second.

Main point: Gavel's table, cluster 8:8:8, 300 generated jobs (seed 0,
0.8 jobs/hour, single-GPU), max_min_fairness_perf with --gavel-compat, run
until every job has finished. Reports wall time, jobs/s, rounds/s and where
the time goes (policy solves vs. the round mechanism).

Gavel's own simulator is not part of this repository. Its wall time on
several points, measured once by hand, is in results/gavel_simulator_times.json;
a plain run also simulates every one of those points (8:8:8 with a fixed
number of jobs; 36:36:36 with a measurement window of a continuous trace, as
the paper's Figure 8) and prints rota's time next to Gavel's recorded one (a
recorded number, not one from this run) and both average JCTs, which show
that the two simulators saw the same trace. In this run, Gavel's time on the
main point is also bounded from below: the same sequence of LAS problems (the
compat run re-solves at the same moments Gavel does) is solved the way Gavel
does it, with cvxpy and ECOS, one variable per job (spec §4.3.1); Gavel's
per-round Python work comes on top. This part needs `cvxpy` and `ecos` and is
skipped without them. Every point starts with no LP answers stored
(`forget_answers`): the points share their first jobs, and so some LPs.

Every point also reports its solver floor: the LPs HiGHS solved in the run,
solved again back to back (best of three), timing HiGHS's own `run()` alone.
No round loop, however fast, makes a simulation with these same answers take
less, so Gavel's time over this floor is the most speed-up any rewrite of the
rest could reach without changing a schedule.

Each point is then run again on a candidate faster solve path (`--candidate`, default
`compiled-ipm+reuse:3`: rota's compiled interior point with `--reuse-solves 3`; a method alone,
`simplex` or `compiled-ipm`; `reuse:N` alone is `--reuse-solves N`), side by side with the
reference (interior point, every re-solve solved), and checked against the bounds a faster path
must keep: average JCT within 0.5 % and makespan within 1 % of the reference's, and every LP the
reference solved reaching the same objective within 1e-6 relative when the candidate's method
solves it (a reused re-solve solves no LP: it gives the last solve's shares again), and its
average JCT within 5 % of Gavel's recorded one (1 % for fifo policies), as the reference's is.

Round loop: the timed runs use rota's default (`--round-loop auto`: the compiled loop when numba is
installed). Each point is also run with the Python round loop, the reference, and its results must be
the same to the last bit (rounds, average JCT, makespan): its time is printed beside the fast one's.
The compiled function is loaded (or compiled, the first time on a machine) before anything is timed.

    python benchmarks/bench_simulate.py [--quick] [--jobs 300 | --window 150:300] [--rate 0.8] [--cluster 8:8:8]
        [--candidate compiled-ipm+reuse:N|compiled-ipm|simplex|reuse:N|simplex+reuse:N|none]
        [--round-loop auto|python|compiled] [--repeat N]

--quick, or any point option, runs only the main (or that) point.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import planner.modes.simulate as simulate  # noqa: E402
import planner.policies.lp.highs as highs  # noqa: E402
from planner.formats.atomic import write_text_atomic  # noqa: E402
from planner.formats.cluster import parse_cluster
from planner.formats.gavel_json import import_gavel  # noqa: E402
from planner.modes.generator import GeneratorConfig, JobGenerator  # noqa: E402
from planner.modes.simulate import SimulationConfig, Workload, run_simulation  # noqa: E402
from planner.policies.lp import dense_ipm  # noqa: E402
from planner.policies.lp.highs import DEFAULT_METHOD, forget_answers  # noqa: E402

GAVEL_TABLE = ROOT / "data" / "gavel" / "simulation_throughputs.json"


class Recorder:
    """Wraps a policy and keeps every problem it is asked to solve."""

    def __init__(self, inner):
        self.inner, self.problems = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def allocate(self, problem):
        if problem.n_jobs:
            self.problems.append(problem)
        return self.inner.allocate(problem)


def cvxpy_las_seconds(problem) -> float:
    """Build and solve Gavel's LAS-perf program with cvxpy + ECOS; return the seconds it took."""
    import cvxpy as cp

    started = time.perf_counter()
    tput, scale, cap = problem.throughput, problem.scale, problem.capacity
    prop = tput @ cap / cap.sum()
    coeff = tput * (scale / (problem.weight * prop))[:, None]
    x = cp.Variable(tput.shape)
    objective = cp.Maximize(cp.min(cp.sum(cp.multiply(coeff, x), axis=1)))
    constraints = [x >= 0, cp.sum(x, axis=1) <= 1, scale @ x <= cap]
    cp.Problem(objective, constraints).solve(solver="ECOS")
    return time.perf_counter() - started


class LoadRecorder:
    """Keeps every LP handed to HiGHS (copies: a caller may change its arrays later)."""

    def __init__(self):
        self.loaded: list[tuple] = []

    def __enter__(self):
        self._load = highs.load_matrix

        def load(lp, **kwargs):
            self.loaded.append((copy.deepcopy(lp), kwargs))
            return self._load(lp, **kwargs)

        highs.load_matrix = load
        return self

    def __exit__(self, *exc):
        highs.load_matrix = self._load


def solver_floor_seconds(loaded: list[tuple], repeats: int = 3) -> float:
    """HiGHS's own run() time over these LPs, solved back to back: the best of `repeats`."""
    best = float("inf")
    for _ in range(repeats):
        total = 0.0
        for lp, kwargs in loaded:
            solver = highs.load_matrix(lp, **kwargs)
            started = time.perf_counter()
            solver.run()
            total += time.perf_counter() - started
        best = min(best, total)
    return best


RECORDED = ROOT / "benchmarks" / "results" / "gavel_simulator_times.json"
POINT_FIELDS = ("cluster", "jobs", "window", "rate_per_hour", "policy", "seed")


def recorded_points() -> list[dict]:
    return json.loads(RECORDED.read_text())["points"]


def recorded_gavel(point: dict) -> dict | None:
    """The hand-measured Gavel time for this point, if there is one."""
    for entry in recorded_points():
        if all(entry.get(f) == point.get(f) for f in POINT_FIELDS):
            return entry
    return None


def run_point(
    table, point: dict, recorders: list, method: str = DEFAULT_METHOD, round_loop: str = "auto", reuse: int = 0
) -> tuple[dict, list]:
    """Simulate one point; (report, the LAS problems its policy was asked to solve)."""
    forget_answers()  # every point starts without answers stored by an earlier one (same LPs)
    make = simulate.make_cluster_policy
    simulate.make_cluster_policy = lambda *a, **k: recorders.append(Recorder(make(*a, **k))) or recorders[-1]
    try:
        gen = JobGenerator(table, GeneratorConfig(seed=point["seed"], rate_per_hour=point["rate_per_hour"]))
        window = tuple(point["window"]) if point.get("window") else None
        config = SimulationConfig(
            policy=point["policy"],
            seed=point["seed"],
            gavel_compat=True,
            window=window,
            solver_method=method,
            round_loop=round_loop,
            reuse_solves=reuse,
        )
        with LoadRecorder() as solves:
            result = run_simulation(
                table, parse_cluster(point["cluster"]), Workload(generator=gen, num_jobs=point.get("jobs")), config
            )
    finally:
        simulate.make_cluster_policy = make
    m = result.metrics
    report = {
        "point": point,
        "status": result.status,
        "avg_jct_h": m["jct_s"]["mean"] / 3600 if m.get("jct_s") else None,
        "rounds": m.get("rounds"),
        "resolves": m.get("resolves"),
        "jobs_arrived": m.get("jobs_arrived"),
        "wall_s": m.get("wall_s"),
        "solver_s": m.get("solver_s"),
        "mechanism_s": (m["wall_s"] - m["solver_s"]) if m.get("wall_s") else None,
        "jobs_finished": m.get("jobs_finished"),
        "jobs_per_s": m.get("jobs_per_wall_s"),  # finished jobs per wall-clock second
        "rounds_per_s": (m["rounds"] / m["wall_s"]) if m.get("wall_s") else None,
        "makespan_h": m["makespan_s"] / 3600 if m.get("makespan_s") else None,
        "solver_method": method,
        "round_loop": round_loop,
        "rounds_compiled": m.get("rounds_compiled", 0),
        "reuse_solves": reuse,
        "resolves_reused": m.get("resolves_reused", 0),
        "highs_runs": len(solves.loaded),
        "highs_run_floor_s": solver_floor_seconds(solves.loaded),
    }
    report["_loaded"] = solves.loaded  # for the candidate's objective check; not written
    recorded = recorded_gavel(point)
    if recorded is not None:
        report["gavel_recorded_sim_s"] = recorded["sim_s"]
        report["gavel_recorded_avg_jct_h"] = recorded["avg_jct_h"]
        report["speedup_vs_recorded_gavel"] = recorded["sim_s"] / report["wall_s"]
        floor = report["highs_run_floor_s"]  # 0 when no LP went to HiGHS (--solver-method dense-ipm)
        report["speedup_ceiling_same_answers"] = recorded["sim_s"] / floor if floor > 0 else None
    return report, recorders[-1].problems


# Issue #31's bounds for a faster solve path against the interior-point reference, checked in the
# same run: average JCT within 0.5 %, makespan within 1 %, every LP's objective within 1e-6 relative.
JCT_BOUND, MAKESPAN_BOUND, OBJECTIVE_BOUND = 0.005, 0.01, 1e-6
GAVEL_FIFO_BOUND, GAVEL_BOUND = 0.01, 0.05  # average JCT against Gavel's recorded result


def parse_candidate(text: str) -> tuple[str, int]:
    """`--candidate`: a HiGHS method, `reuse:N` (--reuse-solves N), or both joined by '+'."""
    method, reuse = DEFAULT_METHOD, 0
    for part in text.split("+"):
        if part.startswith("reuse:") and part.removeprefix("reuse:").isdigit():
            reuse = int(part.removeprefix("reuse:"))
        elif part in highs.LP_METHODS:
            method = part
        else:
            raise SystemExit(f"--candidate: {part!r} is neither a method ({', '.join(highs.LP_METHODS)}) nor reuse:N")
    return method, reuse


def candidate_answer(lp, kwargs: dict, method: str) -> tuple | None:
    """What `method` answers on a recorded LP: the compiled interior point where it takes the LP
    (as `solve_matrix` does), else HiGHS with the method's options."""
    if method == highs.DENSE_METHOD and kwargs.get("options") is None:
        answer = dense_ipm.try_solve(lp)
        if answer is not None:
            return answer
    return highs.run_loaded(highs.load_matrix(lp, **{**kwargs, "method": method}), policy="candidate")


def objective_gap(loaded: list[tuple], method: str) -> float:
    """The largest relative difference between the objective each recorded LP reached and what
    `method` reaches on the same LP (the same LPs, so the two answers are comparable)."""
    worst = 0.0
    for lp, kwargs in loaded:
        reference = highs.run_loaded(highs.load_matrix(lp, **kwargs), policy="reference")
        other = candidate_answer(lp, kwargs, method)
        if reference is None or other is None:
            continue
        ref, got = reference[1], other[1]
        worst = max(worst, abs(got - ref) / max(abs(ref), 1e-12))
    return worst


def fastest(repeat: int, run) -> tuple[dict, list]:
    """`run()` (a run_point call) `repeat` times; the report of the fastest. The runs must agree
    on every result: only the timing may differ."""
    best = None
    for _ in range(repeat):
        report, problems = run()
        if best is not None:
            fields = ("status", "rounds", "resolves", "avg_jct_h", "makespan_h")
            assert all(report[k] == best[0][k] for k in fields), "repeated runs disagree"
        if best is None or report["wall_s"] < best[0]["wall_s"]:
            best = (report, problems)
    assert best is not None
    return best


def compare_candidate(reference: dict, candidate: dict) -> dict:
    """The candidate path against the reference on one point: deltas and whether each bound holds."""
    jct = candidate["avg_jct_h"] / reference["avg_jct_h"] - 1
    span = candidate["makespan_h"] / reference["makespan_h"] - 1
    objective = objective_gap(reference["_loaded"], candidate["solver_method"])
    within = abs(jct) <= JCT_BOUND and abs(span) <= MAKESPAN_BOUND and objective <= OBJECTIVE_BOUND
    out = {"avg_jct_change": jct, "makespan_change": span, "max_objective_gap": objective}
    if "gavel_recorded_sim_s" in reference:
        out["speedup_vs_recorded_gavel"] = reference["gavel_recorded_sim_s"] / candidate["wall_s"]
        # and against Gavel's own result: within 1 % for fifo policies, 5 % for the others
        out["avg_jct_change_vs_gavel"] = candidate["avg_jct_h"] / reference["gavel_recorded_avg_jct_h"] - 1
        limit = GAVEL_FIFO_BOUND if "fifo" in candidate["point"]["policy"] else GAVEL_BOUND
        within = within and abs(out["avg_jct_change_vs_gavel"]) <= limit
    return out | {"within_bounds": within}


def python_loop(report: dict, reference: dict) -> None:
    """The same point with the Python round loop: its time, and whether every result is the same."""
    same = all(report[k] == reference[k] for k in ("status", "rounds", "resolves", "avg_jct_h", "makespan_h"))
    report["python_loop"] = {
        "wall_s": reference["wall_s"],
        "mechanism_s": reference["mechanism_s"],
        "identical": same,
    }
    recorded = recorded_gavel(report["point"])
    if recorded is not None:
        report["python_loop"]["speedup_vs_recorded_gavel"] = recorded["sim_s"] / reference["wall_s"]
    print(
        f"  round loop: {report['rounds_compiled']} of {report['rounds']} rounds compiled; mechanism "
        f"{reference['mechanism_s']:.2f} s with the Python loop -> {report['mechanism_s']:.2f} s; "
        f"results {'identical' if same else 'DIFFERENT'}"
    )


def describe(point: dict) -> str:
    jobs = f"{point['jobs']} jobs" if point.get("jobs") else "window {}:{}".format(*point["window"])
    return f"{point['cluster']}, {point['rate_per_hour']} jobs/h, {jobs}"


def gavel_lower_bound(report: dict, problems: list, samples: int) -> None:
    try:
        import cvxpy  # noqa: F401
        import ecos  # noqa: F401
    except ImportError:
        print("cvxpy/ecos not installed: Gavel lower bound skipped")
        return
    step = max(1, len(problems) // samples)
    times = [cvxpy_las_seconds(p) for p in problems[::step]]
    per_solve = sum(times) / len(times)
    bound = per_solve * len(problems)
    report["gavel_solver_lower_bound_s"] = bound
    report["gavel_cvxpy_s_per_solve"] = per_solve
    report["speedup_lower_bound"] = bound / report["wall_s"]
    print(
        f"Gavel (lower bound, its solves alone with cvxpy+ECOS): {len(problems)} x {per_solve * 1000:.1f} ms "
        f"= {bound:.1f} s  ->  rota is at least {report['speedup_lower_bound']:.1f}x faster"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(GAVEL_TABLE))
    parser.add_argument("--cluster", default=None, help="one point only (default 8:8:8)")
    parser.add_argument("--jobs", type=int, default=None, help="one point only: this many jobs (default 300)")
    parser.add_argument("--window", default=None, help="one point only: measure jobs START:END of an endless trace")
    parser.add_argument("--rate", type=float, default=None, help="one point only (default 0.8 jobs/h)")
    parser.add_argument("--policy", default="max_min_fairness_perf")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="only the main point")
    parser.add_argument("--gavel-samples", type=int, default=60, help="cvxpy solves timed (spread over the run)")
    parser.add_argument(
        "--candidate",
        default="compiled-ipm+reuse:3",
        help="a faster solve path to run side by side with the reference (HiGHS interior point, every "
        "re-solve solved) and check against #31's bounds: a method (simplex, compiled-ipm), reuse:N "
        "(--reuse-solves N), or both as compiled-ipm+reuse:N; 'none' to skip (default compiled-ipm+reuse:3)",
    )
    parser.add_argument(
        "--round-loop",
        default="auto",
        choices=("auto", "python", "compiled"),
        help="the timed runs' round loop (default auto: compiled with numba); the Python loop also runs, "
        "as the reference, unless this is python",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="run each timed simulation this many times and keep the fastest"
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "simulate.json"))
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    single = any(v is not None for v in (args.cluster, args.jobs, args.window, args.rate))
    main_point = {
        "cluster": args.cluster or "8:8:8",
        "rate_per_hour": args.rate or 0.8,
        "policy": args.policy,
        "seed": args.seed,
    }
    if args.window:
        start, end = (int(v) for v in args.window.split(":"))
        main_point["window"] = [start, end]
    else:
        main_point["jobs"] = args.jobs or 300
    others = [] if single or args.quick else [{f: e[f] for f in POINT_FIELDS if f in e} for e in recorded_points()]
    others = [p for p in others if {k: p.get(k) for k in POINT_FIELDS} != {k: main_point.get(k) for k in POINT_FIELDS}]

    candidate_method, candidate_reuse = parse_candidate(args.candidate) if args.candidate != "none" else (None, 0)
    table = import_gavel(args.table)
    if args.round_loop != "python":  # load (or compile) the compiled loop before anything is timed
        run_point(table, {**main_point, "jobs": 5, "window": None}, [], round_loop=args.round_loop)
    if candidate_method == highs.DENSE_METHOD and not dense_ipm.available():  # loaded before timing, too
        raise SystemExit(f"--candidate {args.candidate}: {highs.DENSE_METHOD} needs numba (pip install 'rota[fast]')")
    reports = []
    for n, point in enumerate([main_point, *others]):
        report, problems = fastest(args.repeat, partial(run_point, table, point, [], round_loop=args.round_loop))
        reports.append(report)
        print(
            f"rota, {describe(point)}: {report['jobs_finished']} jobs done, {report['rounds']} rounds, "
            f"{report['resolves']} re-solves in {report['wall_s']:.2f} s  ->  {report['jobs_per_s']:.1f} jobs/s "
            f"(solver {report['solver_s']:.2f} s, mechanism {report['mechanism_s']:.2f} s)"
        )
        if args.round_loop != "python":
            python_loop(report, fastest(args.repeat, partial(run_point, table, point, [], round_loop="python"))[0])
        if n == 0:
            gavel_lower_bound(report, problems, args.gavel_samples)
        if "gavel_recorded_sim_s" in report:
            print(
                f"  Gavel's simulator, recorded on this point (not this run): {report['gavel_recorded_sim_s']:.1f} s, "
                f"avg JCT {report['gavel_recorded_avg_jct_h']:.3f} h vs rota {report['avg_jct_h']:.3f} h  ->  rota "
                f"{report['speedup_vs_recorded_gavel']:.1f}x faster"
            )
            print(
                f"  solver floor: {report['highs_runs']} HiGHS runs alone take {report['highs_run_floor_s']:.3f} s "
                f"->  at most {report['speedup_ceiling_same_answers']:.1f}x with these answers"
            )
        if candidate_method is not None:
            candidate, _ = fastest(
                args.repeat,
                partial(run_point, table, point, [], candidate_method, args.round_loop, candidate_reuse),
            )
            check = compare_candidate(report, candidate)
            report["candidate"] = {k: v for k, v in candidate.items() if not k.startswith("_")} | check
            speedup = check.get("speedup_vs_recorded_gavel")
            faster = f", {speedup:.1f}x Gavel" if speedup is not None else ""
            flags = f"--solver-method {candidate_method}" + (
                f" --reuse-solves {candidate_reuse} ({candidate['resolves_reused']} of {candidate['resolves']} "
                "re-solves reused)"
                if candidate_reuse
                else ""
            )
            print(
                f"  {flags}: {candidate['wall_s']:.2f} s{faster}; avg JCT "
                f"{check['avg_jct_change']:+.2%}, makespan {check['makespan_change']:+.2%}, LP objectives within "
                f"{check['max_objective_gap']:.1e}"
                + (
                    f", avg JCT {check['avg_jct_change_vs_gavel']:+.2%} vs Gavel's"
                    if "avg_jct_change_vs_gavel" in check
                    else ""
                )
                + f"  ->  {'within' if check['within_bounds'] else 'OUTSIDE'} the bounds "
                f"(JCT {JCT_BOUND:.1%}, makespan {MAKESPAN_BOUND:.0%}, objective {OBJECTIVE_BOUND:.0e}; "
                f"vs Gavel {GAVEL_FIFO_BOUND:.0%} fifo, {GAVEL_BOUND:.0%} others)"
            )
        report.pop("_loaded")
    out = {"points": reports}
    if args.quick and args.out == parser.get_default("out"):
        args.out = str(ROOT / "benchmarks" / "results" / "quick" / "simulate.json")  # keep the full results
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
