"""Many simulations: simulations per minute for a 500-job trace, and how sweeps scale with workers.

What a capacity search or a policy sweep needs is throughput, not the speed of one run. One
trace (Gavel's generator and table, seed 0, 500 single-GPU jobs at 0.8 jobs/h) is replayed on
8:8:8 with max_min_fairness_perf at every point of a sweep (points differ by seed only, so each
is the same amount of work), through `planner.modes.sweep.run_sweep` as `rota sweep` runs it:

  serial                       one point after another in this process (--workers 1)
  process pool, N workers      N worker processes (--workers N)
  Ray, N CPUs                  a local Ray started with num_cpus=N, one task in flight per CPU

For each it prints the wall time, simulations per minute and the efficiency of the added
workers: (rate with N / rate of the same backend with 1) / N, 1.0 being perfect scaling. The
machine's cores bound what N can give (a 2-core machine: N = 4 shares 2 cores among 4 workers).
Ray's rows start a fresh local Ray for each N and run one point per CPU first (a Ray cluster is
long-lived: its workers have started before a sweep comes); neither is timed. They are skipped,
saying so, when Ray is not installed.

    python benchmarks/bench_sweep_throughput.py [--quick] [--jobs 500] [--points 8] [--workers 1,2,4]
        [--no-ray] [--out benchmarks/results/sweep_throughput.json]

About two minutes on two cores; --quick: 100 jobs, 4 points, workers 1 and 2.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.cli import app  # noqa: E402
from planner.formats.atomic import write_text_atomic  # noqa: E402
from planner.modes.sweep import SweepSpec, run_sweep  # noqa: E402

GAVEL_JSON = ROOT / "data" / "gavel" / "simulation_throughputs.json"
TABLE = ROOT / "data" / "gavel" / "simulation_throughputs.csv"
POLICY = "max_min_fairness_perf"


def make_trace(folder: Path, jobs: int) -> Path:
    trace = folder / f"trace{jobs}.csv"
    args = ["trace", "generate", "--table", str(GAVEL_JSON), "--num-jobs", str(jobs), "--rate", "0.8"]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            app([*args, "--seed", "0", "--out", str(trace)], standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
    return trace


def timed_sweep(spec: SweepSpec, folder: Path, workers: int, ray_address: str | None) -> float:
    """Seconds to run every point of `spec` into a fresh folder."""
    out = Path(tempfile.mkdtemp(dir=folder))
    started = time.perf_counter()
    records = run_sweep(spec, out, jobs=workers, ray_address=ray_address)
    seconds = time.perf_counter() - started
    bad = [r for r in records if r.get("status") != "ok"]
    if len(records) != len(spec.seeds) or bad:
        raise SystemExit(f"the sweep did not finish every point: {len(records)} records, {len(bad)} not ok")
    return seconds


def ray_sweep(spec: SweepSpec, folder: Path, cpus: int) -> float:
    import logging

    import ray

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        # A Ray cluster is long-lived: its workers have started and imported rota before a sweep
        # comes, so one point per CPU runs first, untimed.
        timed_sweep(dataclasses.replace(spec, seeds=spec.seeds[:cpus]), folder, cpus, "auto")
        return timed_sweep(spec, folder, cpus, "auto")  # run_sweep uses the connection made here
    finally:
        ray.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 jobs, 4 points, workers 1 and 2")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--points", type=int, default=8)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sweep_throughput.json"))
    args = parser.parse_args()
    jobs, points = (100, 4) if args.quick else (args.jobs, args.points)
    workers = [1, 2] if args.quick else [int(w) for w in args.workers.split(",")]
    use_ray = not args.no_ray and importlib.util.find_spec("ray") is not None

    print(f"{points} simulations of one {jobs}-job trace (8:8:8, {POLICY}); {os.cpu_count()} CPUs here")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="rota-bench-sweep-") as tmp:
        folder = Path(tmp)
        trace = make_trace(folder, jobs)
        spec = SweepSpec(
            table=str(TABLE), cluster="8:8:8", policies=[POLICY], seeds=list(range(points)), trace=str(trace)
        )
        backends = [("process pool", lambda n: timed_sweep(spec, folder, n, None))]
        if use_ray:
            backends.append(("Ray", lambda n: ray_sweep(spec, folder, n)))
        else:
            print("Ray: skipped (not installed, or --no-ray)")
        for backend, run in backends:
            base = None
            for n in workers:
                label = (
                    "serial"
                    if backend == "process pool" and n == 1
                    else f"{backend}, {n} {'CPUs' if backend == 'Ray' else 'workers'}"
                )
                seconds = run(n)
                per_minute = points / seconds * 60
                base = per_minute if base is None else base
                efficiency = per_minute / base / n
                rows.append(
                    {
                        "backend": backend,
                        "workers": n,
                        "wall_s": seconds,
                        "sims_per_minute": per_minute,
                        "efficiency": efficiency,
                    }
                )
                print(f"{label:<28} {seconds:>7.1f} s  {per_minute:>7.1f} simulations/min  efficiency {efficiency:.2f}")
    write_text_atomic(
        Path(args.out),
        json.dumps({"jobs": jobs, "points": points, "cpus": os.cpu_count(), "rows": rows}, indent=1) + "\n",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
