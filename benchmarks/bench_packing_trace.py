"""Packed LAS on a crowded trace: CPU time against LAS-perf, and the bounded pair space against the full one.

A packing policy splits each (worker type, job kind, partner kind) time share into job pairs
for the round mechanism. Gavel's full pair space pairs every job of a kind with every job of
its partner kind, O(n²) pairs: at a few hundred active jobs that is 10^4-10^5 mechanism
entries, re-made at every arrival and completion. `planner.policies.packing.PAIR_PARTNERS`
bounds it (interval matchings with the same time per job next to each partner kind, about
that many partners per job and group); None restores the full space.

One generated trace (Gavel's generator and table, seed 0, multi-GPU jobs as Philly's mix: 1/2/4/8
GPUs; by default 1,200 jobs at 20 jobs/h on 24:24:24, arrivals above what the cluster serves
so that several hundred jobs are active at the peak), replayed as a job list and simulated to
the last job (no saturation stop) under
  max_min_fairness_perf                the baseline, same run
  max_min_fairness_packed (bounded)    the default PAIR_PARTNERS
  max_min_fairness_packed (full)       PAIR_PARTNERS = None
Prints CPU seconds (time.process_time, so other load on the machine matters less than for
wall time) and each packed run's ratio to the baseline measured in this run, the peak number
of active jobs and of mechanism entries, and the average JCT of the bounded run against the
full pair space's. Needs nothing outside the repository.

    python benchmarks/bench_packing_trace.py [--quick] [--jobs 1200] [--rate 20] [--cluster 24:24:24]
        [--skip-full] [--out benchmarks/results/packing_trace.json]

About a minute and a half on two cores (most of it the full pair space); --quick: 250 jobs at
6 jobs/h on 8:8:8, about ten seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import planner.rounds.engine as engine_module  # noqa: E402
from planner.formats.atomic import write_text_atomic  # noqa: E402
from planner.formats.cluster import parse_cluster  # noqa: E402
from planner.formats.gavel_json import import_gavel  # noqa: E402
from planner.modes.generator import GeneratorConfig, JobGenerator  # noqa: E402
from planner.modes.simulate import SimulationConfig, Workload, run_simulation  # noqa: E402
from planner.policies import packing  # noqa: E402
from planner.policies.lp.highs import forget_answers  # noqa: E402

GAVEL_TABLE = ROOT / "data" / "gavel" / "simulation_throughputs.json"


class Peaks:
    """The most active jobs and mechanism entries any round saw (wraps `Engine.step`)."""

    def __init__(self):
        self.jobs = self.entries = 0

    def __enter__(self):
        self._step = step = engine_module.Engine.step
        peaks = self

        def counting(engine):
            record = step(engine)
            peaks.jobs = max(peaks.jobs, len(engine.active))
            peaks.entries = max(peaks.entries, len(engine.mech.keys))
            return record

        engine_module.Engine.step = counting
        return self

    def __exit__(self, *exc):
        engine_module.Engine.step = self._step


def run_point(table, args, policy: str, partners: int | None) -> dict:
    forget_answers()  # every run starts without LP answers stored by an earlier one
    saved = packing.PAIR_PARTNERS
    packing.PAIR_PARTNERS = partners
    try:
        # A finite job list, replayed: generated arrivals above what the cluster serves would be
        # refused up front as saturated, a trace's are run to the last job.
        generator = JobGenerator(table, GeneratorConfig(seed=args.seed, rate_per_hour=args.rate, multi_gpu=True))
        jobs = generator.take(args.jobs)
        config = SimulationConfig(policy=policy, seed=args.seed, max_active_jobs=100_000)
        with Peaks() as peaks:
            started = time.process_time()
            result = run_simulation(table, parse_cluster(args.cluster), Workload(jobs=jobs), config)
            cpu_s = time.process_time() - started
    finally:
        packing.PAIR_PARTNERS = saved
    m = result.metrics
    return {
        "policy": policy,
        "pair_partners": partners,
        "status": result.status,
        "cpu_s": cpu_s,
        "avg_jct_h": m["jct_s"]["mean"] / 3600 if m.get("jct_s") else None,
        "jobs_finished": m.get("jobs_finished"),
        "resolves": m.get("resolves"),
        "rounds": m.get("rounds"),
        "solver_s": m.get("solver_s"),
        "peak_active_jobs": peaks.jobs,
        "peak_entries": peaks.entries,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(GAVEL_TABLE))
    parser.add_argument("--cluster", default=None, help="default 24:24:24 (--quick: 8:8:8)")
    parser.add_argument("--jobs", type=int, default=None, help="default 1200 (--quick: 250)")
    parser.add_argument("--rate", type=float, default=None, help="jobs per hour; default 20 (--quick: 6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-full", action="store_true", help="leave out the full pair space (the slow run)")
    parser.add_argument("--quick", action="store_true", help="a smaller trace")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "packing_trace.json"))
    args = parser.parse_args()
    args.cluster = args.cluster or ("8:8:8" if args.quick else "24:24:24")
    args.jobs = args.jobs or (250 if args.quick else 1200)
    args.rate = args.rate or (6.0 if args.quick else 20.0)
    if args.quick and args.out == parser.get_default("out"):
        args.out = str(ROOT / "benchmarks" / "results" / "quick" / "packing_trace.json")  # keep the full results

    table = import_gavel(args.table)
    print(
        f"trace: {args.jobs} generated multi-GPU jobs (seed {args.seed}, {args.rate:g} jobs/h) on {args.cluster}; "
        f"bounded = PAIR_PARTNERS {packing.PAIR_PARTNERS}"
    )
    points = [("max_min_fairness_perf", packing.PAIR_PARTNERS, "LAS-perf (baseline)")]
    points.append(("max_min_fairness_packed", packing.PAIR_PARTNERS, "packed, bounded pairs"))
    if not args.skip_full:
        points.append(("max_min_fairness_packed", None, "packed, full pair space"))
    reports = []
    for policy, partners, label in points:
        report = run_point(table, args, policy, partners)
        report["label"] = label
        reports.append(report)
        base = reports[0]["cpu_s"]
        jct = "n/a" if report["avg_jct_h"] is None else f"{report['avg_jct_h']:.3f} h"
        print(
            f"{label:<26} {report['cpu_s']:8.1f} s CPU  ({report['cpu_s'] / base:5.2f}x LAS-perf)  avg JCT {jct}  "
            f"peak {report['peak_active_jobs']} jobs / {report['peak_entries']} entries, "
            f"{report['resolves']} re-solves, {report['rounds']} rounds",
            flush=True,
        )
    by_label = {r["label"]: r for r in reports}
    bounded, full = by_label.get("packed, bounded pairs"), by_label.get("packed, full pair space")
    summary: dict = {"trace": vars(args) | {"pair_partners": packing.PAIR_PARTNERS}, "points": reports}
    if bounded and full and bounded["avg_jct_h"] and full["avg_jct_h"]:
        summary["bounded_vs_full_jct"] = bounded["avg_jct_h"] / full["avg_jct_h"] - 1
        summary["bounded_vs_full_cpu"] = bounded["cpu_s"] / full["cpu_s"]
        print(
            f"bounded vs full pair space: average JCT {100 * summary['bounded_vs_full_jct']:+.2f} %, "
            f"CPU time {summary['bounded_vs_full_cpu']:.2f}x"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(summary, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
