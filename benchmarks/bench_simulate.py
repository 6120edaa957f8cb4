"""Simulation speed: one continuous trace point, jobs simulated per wall-clock second.

Default point: Gavel's table, cluster 8:8:8, 300 generated jobs (seed 0,
0.8 jobs/hour, single-GPU), max_min_fairness_perf with --gavel-compat, run
until every job has finished. Reports wall time, jobs/s, rounds/s and where
the time goes (policy solves vs. the round mechanism).

Gavel's own simulator is not part of this repository. Its wall time on the
same points, measured once by hand, is in results/gavel_simulator_times.json
and printed next to rota's (a recorded number, not one from this run). In
this run, Gavel's time is bounded from below: the same sequence of LAS problems (the compat run re-solves at
the same moments Gavel does) is solved the way Gavel does it, with cvxpy and
ECOS, one variable per job (spec §4.3.1); Gavel's per-round Python work comes
on top. This part needs `cvxpy` and `ecos` and is skipped without them.

    python benchmarks/bench_simulate.py [--jobs 300] [--rate 0.8] [--cluster 8:8:8]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.atomic import write_text_atomic  # noqa: E402
from planner.gavel_json import import_gavel  # noqa: E402
from planner.simulate import SimulationConfig, Workload, parse_cluster, run_simulation  # noqa: E402
import planner.simulate as simulate  # noqa: E402
from planner.trace import GeneratorConfig, JobGenerator  # noqa: E402

GAVEL_TABLE = ROOT.parent / "shared" / "reference" / "gavel" / "simulation_throughputs.json"


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
    import numpy as np

    started = time.perf_counter()
    tput, scale, cap = problem.throughput, problem.scale, problem.capacity
    prop = tput @ cap / cap.sum()
    coeff = tput * (scale / (problem.weight * prop))[:, None]
    x = cp.Variable(tput.shape)
    objective = cp.Maximize(cp.min(cp.sum(cp.multiply(coeff, x), axis=1)))
    constraints = [x >= 0, cp.sum(x, axis=1) <= 1, scale @ x <= cap]
    cp.Problem(objective, constraints).solve(solver="ECOS")
    return time.perf_counter() - started


def recorded_gavel(point: dict) -> dict | None:
    """The hand-measured Gavel time for this point, if there is one."""
    path = ROOT / "benchmarks" / "results" / "gavel_simulator_times.json"
    fields = ("cluster", "jobs", "rate_per_hour", "policy", "seed")
    for entry in json.loads(path.read_text())["points"]:
        if all(entry[f] == point[f] for f in fields):
            return entry
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(GAVEL_TABLE))
    parser.add_argument("--cluster", default="8:8:8")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rate", type=float, default=0.8)
    parser.add_argument("--policy", default="max_min_fairness_perf")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gavel-samples", type=int, default=60, help="cvxpy solves timed (spread over the run)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "simulate.json"))
    args = parser.parse_args()

    table = import_gavel(args.table)
    cluster = parse_cluster(args.cluster)
    recorders = []
    make = simulate.make_policy
    simulate.make_policy = lambda *a, **k: recorders.append(Recorder(make(*a, **k))) or recorders[-1]
    gen = JobGenerator(table, GeneratorConfig(seed=args.seed, rate_per_hour=args.rate))
    config = SimulationConfig(policy=args.policy, seed=args.seed, gavel_compat=True)
    result = run_simulation(table, cluster, Workload(generator=gen, num_jobs=args.jobs), config)
    simulate.make_policy = make
    m = result.metrics
    report = {
        "point": {"cluster": args.cluster, "jobs": args.jobs, "rate_per_hour": args.rate, "policy": args.policy,
                  "seed": args.seed, "gavel_compat": True},
        "status": result.status,
        "avg_jct_h": m["jct_s"]["mean"] / 3600 if m.get("jct_s") else None,
        "rounds": m.get("rounds"), "resolves": m.get("resolves"),
        "wall_s": m.get("wall_s"), "solver_s": m.get("solver_s"),
        "mechanism_s": (m["wall_s"] - m["solver_s"]) if m.get("wall_s") else None,
        "jobs_per_s": m.get("jobs_per_wall_s"),
        "rounds_per_s": (m["rounds"] / m["wall_s"]) if m.get("wall_s") else None,
    }
    print(f"rota: {args.jobs} jobs, {report['rounds']} rounds, {report['resolves']} re-solves in "
          f"{report['wall_s']:.2f} s  ->  {report['jobs_per_s']:.1f} jobs/s "
          f"(solver {report['solver_s']:.2f} s, mechanism {report['mechanism_s']:.2f} s)")
    try:
        import cvxpy  # noqa: F401
        import ecos  # noqa: F401
    except ImportError:
        print("cvxpy/ecos not installed: Gavel lower bound skipped")
    else:
        problems = recorders[-1].problems
        step = max(1, len(problems) // args.gavel_samples)
        sample = problems[::step]
        times = [cvxpy_las_seconds(p) for p in sample]
        per_solve = sum(times) / len(times)
        bound = per_solve * len(problems)
        report["gavel_solver_lower_bound_s"] = bound
        report["gavel_cvxpy_s_per_solve"] = per_solve
        report["speedup_lower_bound"] = bound / report["wall_s"]
        print(f"Gavel (lower bound, its solves alone with cvxpy+ECOS): {len(problems)} x {per_solve * 1000:.1f} ms "
              f"= {bound:.1f} s  ->  rota is at least {report['speedup_lower_bound']:.1f}x faster")
    recorded = recorded_gavel(report["point"])
    if recorded is not None:
        report["gavel_recorded_sim_s"] = recorded["sim_s"]
        report["speedup_vs_recorded_gavel"] = recorded["sim_s"] / report["wall_s"]
        print(f"Gavel's simulator, recorded on this point (not this run): {recorded['sim_s']:.1f} s, avg JCT "
              f"{recorded['avg_jct_h']:.3f} h vs rota {report['avg_jct_h']:.3f} h  ->  rota "
              f"{report['speedup_vs_recorded_gavel']:.1f}x faster")
    write_text_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
