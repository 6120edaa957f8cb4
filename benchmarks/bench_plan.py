"""`rota plan --rounds 1` at scale: seconds from reading the inputs to writing the schedule.

Cases (Gavel's table, single-GPU jobs of its 26 types from Gavel's generator, seed 0):

    2048 jobs on 512:512:512, max_min_fairness_perf      target <= 2 s
    2048 jobs on 512:512:512, max_min_fairness_packed    target <= 2 s
    100000 jobs on 8192:8192:8192, max_min_fairness_perf target <= 5 s   (skipped by --quick)

Each case runs in this process through the CLI (imports already loaded; one warm-up, then the
median of --repeats) and once as a fresh `rota` process, imports included: the targets are for
the fresh process, end to end, as a user runs it. It also prints the import time of the CLI and
the per-round cost in microseconds per active job ((time for 6 rounds - time for 1 round) / 5 / jobs).

The machine is shared and noisy, so every time is also given as a ratio to a fixed calibration
workload (pure Python + numpy) measured in the same run: compare those ratios across runs, and
read the absolute targets as "on a quiet 2-core machine".

    python benchmarks/bench_plan.py [--quick] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.cli import app  # noqa: E402

TABLE = ROOT / "data" / "gavel" / "simulation_throughputs.csv"
GAVEL_JSON = ROOT / "data" / "gavel" / "simulation_throughputs.json"
CASES = [  # jobs, GPUs per type, policy, target seconds
    (2048, 512, "max_min_fairness_perf", 2.0),
    (2048, 512, "max_min_fairness_packed", 2.0),
    (100_000, 8192, "max_min_fairness_perf", 5.0),
]
IMPORT_TIMER = "import time; t = time.perf_counter(); import planner.cli; print(time.perf_counter() - t)"


def calibration_s() -> float:
    """A fixed workload: interpreter loops and a small numpy kernel (median of 3)."""

    def once() -> float:
        start = time.perf_counter()
        total = 0
        for i in range(2_000_000):
            total += i % 7
        a = np.random.default_rng(0).random((300, 300))
        for _ in range(20):
            a = a @ a
            a /= a.max()
        return time.perf_counter() - start

    return statistics.median(once() for _ in range(3))


def run_cli(args: list[str]) -> float:
    """Seconds for one `rota` command in this process (its console output discarded)."""
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            app(args, standalone_mode=False)
        except SystemExit as exc:  # typer.Exit
            if exc.code:
                raise
    return time.perf_counter() - start


def fresh_process_s(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "planner.cli", *args], check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - start


def import_s() -> float:
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_TIMER],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return float(out.stdout)


def make_inputs(folder: Path, jobs: int, per_type: int) -> tuple[Path, Path]:
    job_list = folder / f"jobs{jobs}.csv"
    if not job_list.exists():
        run_cli(["trace", "generate", "--table", str(GAVEL_JSON), "--num-jobs", str(jobs), "--out", str(job_list)])
    cluster = folder / f"cluster{per_type}.yaml"
    cluster.write_text(f"worker_types:\n  v100: {per_type}\n  p100: {per_type}\n  k80: {per_type}\n")
    return job_list, cluster


def plan_args(job_list: Path, cluster: Path, policy: str, rounds: int, out: Path) -> list[str]:
    return [
        "plan",
        "--table",
        str(TABLE),
        "--jobs",
        str(job_list),
        "--cluster",
        str(cluster),
        "--policy",
        policy,
        "--rounds",
        str(rounds),
        "--out",
        str(out),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Skip the 100000-job case; one repeat.")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    cases = [c for c in CASES if not (args.quick and c[0] > 10_000)]

    calibration = calibration_s()
    imports = import_s()
    print(f"calibration workload: {calibration:.2f} s (all ratios below are to it)")
    print(f"import planner.cli in a fresh process: {imports:.2f} s = {imports / calibration:.2f} calibrations")
    header = (
        f"{'case':<44} {'in-process s':>12} {'target':>7} {'/target':>8} {'/calib':>7} {'fresh s':>8}"
        f" {'/target':>8} {'us/job/round':>13}"
    )
    print(header)
    print("-" * len(header))
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="rota-bench-plan-") as tmp:
        folder = Path(tmp)
        for jobs, per_type, policy, target in cases:
            job_list, cluster = make_inputs(folder, jobs, per_type)
            one = plan_args(job_list, cluster, policy, 1, folder / "one.json")
            run_cli(one)  # warm-up: caches, lazy imports
            seconds = statistics.median(run_cli(one) for _ in range(repeats))
            six = run_cli(plan_args(job_list, cluster, policy, 6, folder / "six.json"))
            per_round_us = max(0.0, six - seconds) / 5 / jobs * 1e6
            fresh = fresh_process_s(one)
            name = f"{jobs} jobs, {per_type}x3 GPUs, {policy.removeprefix('max_min_fairness')[1:] or 'las'}"
            print(
                f"{name:<44} {seconds:>12.2f} {target:>7.1f} {seconds / target:>8.2f} {seconds / calibration:>7.2f}"
                f" {fresh:>8.2f} {fresh / target:>8.2f} {per_round_us:>13.1f}"
            )
            worst = max(worst, fresh / target)
    print(f"worst ratio of a fresh process to its target: {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
