"""Python vs compiled round loop (EngineConfig.round_loop) on bench_simulate's recorded points.

Runs each point twice (Python reference, then compiled) and compares what the runs report:
rounds, average JCT, makespan, every job's finish time, lease statistics, busy GPU-seconds,
GPU-seconds per job; and the time outside the solver (wall_s - solver_s).

    python benchmarks/compare_round_loops.py [--points 0,1,2] [--random 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_simulate import GAVEL_TABLE, POINT_FIELDS, recorded_points  # noqa: E402

import planner.modes.simulate as simulate  # noqa: E402
from planner.formats.cluster import parse_cluster  # noqa: E402
from planner.formats.gavel_json import import_gavel  # noqa: E402
from planner.modes.generator import GeneratorConfig, JobGenerator  # noqa: E402
from planner.modes.simulate import SimulationConfig, Workload, run_simulation  # noqa: E402
from planner.policies.lp.highs import forget_answers  # noqa: E402

USAGES: list = []  # the GPU usage objects of the runs, to compare per-job GPU-seconds


def _capture(cls, into=None):
    into = USAGES if into is None else into

    class Captured(cls):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            into.append(self)

    return Captured


ENGINES: list = []  # the engines of the runs (how many rounds ran compiled)
simulate.Engine = _capture(simulate.Engine, ENGINES)
simulate.GpuUsage = _capture(simulate.GpuUsage)
simulate.BooksUsage = _capture(simulate.BooksUsage)


def run(table, point: dict, loop: str):
    forget_answers()
    gen = JobGenerator(
        table,
        GeneratorConfig(
            seed=point["seed"],
            rate_per_hour=point["rate_per_hour"],
            multi_gpu=point.get("multi_gpu", False),
            multi_priority=point.get("multi_priority", False),
        ),
    )
    window = tuple(point["window"]) if point.get("window") else None
    config = SimulationConfig(
        policy=point["policy"], seed=point["seed"], gavel_compat=True, window=window, round_loop=loop
    )
    started = time.perf_counter()
    result = run_simulation(
        table, parse_cluster(point["cluster"]), Workload(generator=gen, num_jobs=point.get("jobs")), config
    )
    return result, time.perf_counter() - started


def compare(a, b, usage_a=None, usage_b=None) -> dict:
    ma, mb = a.metrics, b.metrics
    fa = {r["job_id"]: r["finish_s"] for r in a.jobs}
    fb = {r["job_id"]: r["finish_s"] for r in b.jobs}
    worst = 0.0
    differ = 0
    for jid in fa.keys() | fb.keys():
        x, y = fa.get(jid), fb.get(jid)
        if x != y:
            differ += 1
            if x is not None and y is not None:
                worst = max(worst, abs(x - y))
            else:
                worst = float("inf")
    keys = ("rounds", "makespan_s", "lease_extensions", "lease_opportunities", "resolves", "jobs_finished",
            "idle_after_finish_gpu_s", "window_finished")  # fmt: skip
    same = {k: ma.get(k) == mb.get(k) for k in keys}
    same["jct_mean"] = ma.get("jct_s", {}).get("mean") == mb.get("jct_s", {}).get("mean")
    same["utilisation"] = ma.get("utilisation") == mb.get("utilisation")
    same["status"] = a.status == b.status
    rows_a = {r["job_id"]: r for r in a.jobs}
    rows_b = {r["job_id"]: r for r in b.jobs}
    same["job_rows"] = rows_a == rows_b
    if usage_a is not None and usage_b is not None:
        same["job_gpu_s"] = usage_a.job_gpu_s == usage_b.job_gpu_s
    return {
        "identical": all(same.values()) and differ == 0,
        "fields_equal": same,
        "jobs": len(fa),
        "finish_times_differing": differ,
        "max_finish_diff_s": worst,
        "python": summary(a),
        "compiled": summary(b),
    }


def summary(result) -> dict:
    m = result.metrics
    mean = (m.get("jct_s") or {}).get("mean")
    return {"status": result.status, "rounds": m.get("rounds"), "avg_jct_h": None if mean is None else mean / 3600,
            "makespan_s": m.get("makespan_s")}  # fmt: skip


def timing(result) -> dict:
    m = result.metrics
    if "wall_s" not in m:
        return {"wall_s": None, "solver_s": None, "mechanism_s": None}
    return {"wall_s": m["wall_s"], "solver_s": m["solver_s"], "mechanism_s": m["wall_s"] - m["solver_s"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", default=None, help="indices into recorded_points() (default all)")
    parser.add_argument("--random", type=int, default=0, help="also this many random small points")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    table = import_gavel(GAVEL_TABLE)
    points = [{f: e[f] for f in POINT_FIELDS if f in e} for e in recorded_points()]
    if args.points is not None:
        points = [points[int(i)] for i in args.points.split(",") if i != ""]
    rng = random.Random(1)
    for n in range(args.random):
        cluster = rng.choice(["4:4:4", "6:2:4", "8:8:8", "12:12:12", "16:8:4", "2:3:1"])
        gpus = sum(int(c) for c in cluster.split(":"))
        static = n % 4 == 3  # every job at t = 0 (a static trace)
        point = {
            "cluster": cluster,
            "jobs": rng.choice([30, 60, 120]),
            # about 0.645 offered load per job/hour on 24 GPUs (Gavel's table, 1 GPU each)
            "rate_per_hour": 0.0 if static else round(rng.uniform(0.3, 0.9) * gpus / 24 / 0.645, 3),
            "policy": rng.choice(
                ["max_min_fairness_perf", "max_min_fairness_perf", "fifo_perf", "finish_time_fairness_perf"]
            ),  # fmt: skip
            "seed": rng.randrange(1000),
        }
        if n % 3 == 2:
            point["multi_gpu"] = True  # gangs: the compiled loop steps aside while one is active
            point["cluster"] = rng.choice(["8:8:8", "12:12:12", "16:8:8"])
        if n % 5 == 4:
            point["multi_priority"] = True
        points.append(point)
    # warm the compiled function (and time its first call: compile or cache load)
    started = time.perf_counter()
    from planner.rounds import compiled  # noqa: E402

    first = {"cluster": "8:8:8", "jobs": 3, "rate_per_hour": 0.8, "policy": "max_min_fairness_perf", "seed": 0}
    run(table, first, "compiled")
    warm_s = time.perf_counter() - started
    cache = Path(compiled.__file__).parent / "__pycache__"
    print(f"first compiled run (import + JIT or cache load + tiny run): {warm_s:.2f} s; "
          f"numba cache files: {sorted(p.name for p in cache.glob('compiled.*nb*'))}")  # fmt: skip
    reports = []
    for point in points:
        USAGES.clear()
        py, _ = run(table, point, "python")
        ENGINES.clear()
        co, _ = run(table, point, "compiled")
        stats = ENGINES[-1].compiled_stats if ENGINES else None
        usages = USAGES if len(USAGES) == 2 else [None, None]
        report = {
            "point": point, "equivalence": compare(py, co, *usages),
            "python": timing(py), "compiled": timing(co), "compiled_stats": stats,
        }  # fmt: skip
        reports.append(report)
        e = report["equivalence"]
        pt, ct = report["python"], report["compiled"]
        timed = (
            f"mechanism {pt['mechanism_s']:.3f} s -> {ct['mechanism_s']:.3f} s "
            f"(solver {pt['solver_s']:.3f} / {ct['solver_s']:.3f} s)"
            if pt["wall_s"] is not None
            else f"no run ({py.status}: {py.reason})"
        )
        print(
            f"{point}: {'IDENTICAL' if e['identical'] else 'DIFFERENT'} rounds {e['python']['rounds']}/"
            f"{e['compiled']['rounds']}, avg JCT {e['python']['avg_jct_h']}/{e['compiled']['avg_jct_h']} h, "
            f"finish diffs {e['finish_times_differing']} (max {e['max_finish_diff_s']}); {timed}; compiled {stats}"
        )
        if not e["identical"]:
            print("   ", e["fields_equal"])
    if args.out:
        Path(args.out).write_text(json.dumps({"warm_s": warm_s, "points": reports}, indent=1) + "\n")


if __name__ == "__main__":
    main()
