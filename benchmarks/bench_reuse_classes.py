"""What-if for issue #31's "fewer re-solves" lever, before building it: skip a LAS re-solve when
the set of job classes (seen throughputs, scale factor, weight) is the one last solved, and give
every job its class's share from that solve, while the class sizes may have changed.

Nothing of this is in the planner yet. The script wraps `MaxMinFairness.allocate` for the runs it
makes, and runs every point bench_simulate.py times (Gavel-compat LAS-perf) twice: as rota runs
it (the reference) and with the reuse. It prints, per variant and point, the change in average
JCT and makespan against #31's bounds (0.5 % and 1 %) and how many solves were skipped.
Variants: `any` (reuse whenever the class set is unchanged) and `rowN` (at most N reuses in a
row; the next change re-solves). Both give a class that grew since the solve the same share per
member, so a worker type may be asked for more GPUs than it has (the round mechanism places by
priority, as ever). `rowN-scaled` keeps the shares feasible instead: a class that grew from s to
s' members gives each member s/s' of its share (the class keeps the GPU time the solve gave it).

    python benchmarks/bench_reuse_classes.py [--variants any,row1,row2,row3,row3-scaled] [--quick] [--out FILE]

--quick: the smallest recorded point only (8:8:8, 100 jobs).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_simulate import GAVEL_TABLE, JCT_BOUND, MAKESPAN_BOUND, describe, recorded_points  # noqa: E402

import planner.policies.max_min_fairness as mmf  # noqa: E402
from planner.formats.atomic import write_text_atomic  # noqa: E402
from planner.formats.cluster import parse_cluster  # noqa: E402
from planner.formats.gavel_json import import_gavel  # noqa: E402
from planner.modes.generator import GeneratorConfig, JobGenerator  # noqa: E402
from planner.modes.simulate import SimulationConfig, Workload, run_simulation  # noqa: E402
from planner.policies.base import Allocation  # noqa: E402
from planner.policies.lp.highs import forget_answers  # noqa: E402

SOLVE = mmf.MaxMinFairness.allocate


class Reuse:
    """The wrapped allocate: reuse the last solve while the class set is unchanged, at most
    `limit` times in a row (None: no limit)."""

    def __init__(self, limit: int | None, scaled: bool = False):
        self.limit, self.last, self.in_row, self.solved, self.skipped = limit, None, 0, 0, 0
        self.scaled = scaled

    def allocate(self, policy, problem) -> Allocation:
        if problem.n_jobs == 0:
            return SOLVE(policy, problem)
        seen, _ = mmf.seen_throughput(problem, policy.perf_aware or policy.packed)
        rows = [tuple(r) for r in np.hstack([seen, problem.scale[:, None], problem.weight[:, None]]).tolist()]
        classes = Counter(rows)  # class -> members
        room = self.limit is None or self.in_row < self.limit
        if self.last is not None and self.last[0].keys() == classes.keys() and room:
            self.in_row += 1
            self.skipped += 1
            solved, share, before = self.last
            if self.scaled:  # a class that grew keeps its GPU time: each member gets less
                x = np.array([share[r] * min(1.0, solved[r] / classes[r]) for r in rows])
            else:
                x = np.array([share[r] for r in rows])
            return Allocation(
                x, objective=before.objective, status=before.status, solver=before.solver, n_classes=before.n_classes
            )
        allocation = SOLVE(policy, problem)
        self.solved += 1
        self.in_row = 0
        share: dict[tuple, np.ndarray] = {}
        for r, x in zip(rows, allocation.x):
            share.setdefault(r, x)
        self.last = (classes, share, allocation)
        return allocation


def run(table, point: dict, reuse: Reuse | None) -> tuple[float, float]:
    forget_answers()
    mmf.MaxMinFairness.allocate = SOLVE if reuse is None else (lambda policy, problem: reuse.allocate(policy, problem))
    try:
        gen = JobGenerator(table, GeneratorConfig(seed=point["seed"], rate_per_hour=point["rate_per_hour"]))
        window = tuple(point["window"]) if point.get("window") else None
        config = SimulationConfig(policy=point["policy"], seed=point["seed"], gavel_compat=True, window=window)
        workload = Workload(generator=gen, num_jobs=point.get("jobs"))
        result = run_simulation(table, parse_cluster(point["cluster"]), workload, config)
    finally:
        mmf.MaxMinFairness.allocate = SOLVE
    assert result.status == "ok", result.reason
    return result.metrics["jct_s"]["mean"], result.metrics["makespan_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="any,row1,row2,row3,row3-scaled")
    parser.add_argument("--quick", action="store_true", help="the 100-job point only")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "reuse_classes.json"))
    args = parser.parse_args()
    variants = args.variants.split(",")
    table = import_gavel(GAVEL_TABLE)
    points = recorded_points()
    if args.quick:
        points = [min(points, key=lambda p: p.get("jobs") or float("inf"))]
    report = []
    for point in points:
        jct, span = run(table, point, None)
        entry = {"point": point, "avg_jct_h": jct / 3600, "makespan_h": span / 3600, "variants": {}}
        for name in variants:
            limit = name.removesuffix("-scaled")
            reuse = Reuse(None if limit == "any" else int(limit.removeprefix("row")), scaled=name.endswith("-scaled"))
            v_jct, v_span = run(table, point, reuse)
            d_jct, d_span = v_jct / jct - 1, v_span / span - 1
            kept = abs(d_jct) <= JCT_BOUND and abs(d_span) <= MAKESPAN_BOUND
            entry["variants"][name] = {
                "avg_jct_change": d_jct,
                "makespan_change": d_span,
                "within_bounds": kept,
                "solved": reuse.solved,
                "skipped": reuse.skipped,
            }
            print(
                f"{describe(point)}, {name}: avg JCT {d_jct:+.2%}, makespan {d_span:+.2%} "
                f"({'within' if kept else 'OUTSIDE'} the bounds); {reuse.skipped} of "
                f"{reuse.solved + reuse.skipped} solves skipped"
            )
        report.append(entry)
    write_text_atomic(args.out, json.dumps({"points": report}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
