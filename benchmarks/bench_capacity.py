"""`rota capacity` speed: screened configurations per minute, and the whole question.

The question of docs/capacity.md at the size the targets name: 500 jobs (Gavel's generator,
6.5 jobs/h, seed 0) on Gavel's 36:36:36 cluster in 4-GPU nodes, a catalogue of the three
types with 0-4 nodes each (125 configurations). Prints

* the screen alone: configurations per minute (target >= 1,000 on 2 cores);
* the whole question (screen every configuration, simulate the 10 best and the current
  cluster), in one process and in one process per core: seconds (target <= 300), and the
  speed-up of the processes against one;
* the screen's rank correlation with the simulations it was confirmed by;
* the brute-force check on the lab example (data/examples/lab, 60 jobs): three node types x 0-4
  added nodes (125 configurations), every one simulated: where the search's recommendation
  ranks among them, and the screen's rank correlation with the simulations over all 125.

    python benchmarks/bench_capacity.py [--quick]      (--quick: 200 jobs)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from planner.formats.catalogue import read_catalogue  # noqa: E402
from planner.formats.cluster import read_cluster  # noqa: E402
from planner.formats.jobs import read_jobs  # noqa: E402
from planner.formats.table import read_table  # noqa: E402
from planner.modes.capacity import (  # noqa: E402
    JCT_TIE,
    Question,
    Screen,
    answer,
    configurations,
    confirm,
    union_cluster,
)
from planner.modes.generator import GeneratorConfig, JobGenerator  # noqa: E402
from planner.modes.simulate import SimulationConfig  # noqa: E402

TABLE = ROOT / "data" / "gavel" / "simulation_throughputs.csv"
EXAMPLE = ROOT / "data" / "examples" / "capacity"
LAB = ROOT / "data" / "examples" / "lab"
SCREEN_TARGET_PER_MIN = 1000
QUESTION_TARGET_S = 300


def jobs(table, n: int):
    return JobGenerator(table, GeneratorConfig(seed=0, rate_per_hour=6.5)).take(n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    table, cluster = read_table(TABLE), read_cluster(EXAMPLE / "gavel_36.yaml")
    catalogue = read_catalogue(EXAMPLE / "gavel_catalogue.yaml")
    job_list = jobs(table, 200 if args.quick else 500)
    question = Question()
    sim = SimulationConfig(policy="max_min_fairness_perf")
    configs = list(configurations(catalogue, cluster, question))

    started = time.perf_counter()
    screen = Screen(job_list, table, catalogue, cluster, sim.policy)
    screened = [screen(c, question) for c in configs]
    screen_s = time.perf_counter() - started
    rate = len(screened) / screen_s * 60
    print(
        f"screen: {len(screened)} configurations of {len(job_list)} jobs in {screen_s:.2f} s = {rate:,.0f} per minute "
        f"(target >= {SCREEN_TARGET_PER_MIN:,}: {rate / SCREEN_TARGET_PER_MIN:.1f}x the target)"
    )
    timings = {}
    for workers in sorted({1, os.cpu_count() or 1}):
        started = time.perf_counter()
        result = answer(job_list, table, catalogue, cluster, question, sim, top=10, workers=workers)
        timings[workers] = time.perf_counter() - started
        print(
            f"whole question, {workers} process(es): {timings[workers]:.1f} s (target <= {QUESTION_TARGET_S} s: "
            f"{timings[workers] / QUESTION_TARGET_S:.2f} of it); {len(result.confirmed)} simulated; "
            f"recommended {result.recommended.config.label(catalogue) if result.recommended else '-'}"
        )
    if len(timings) > 1:
        most = max(timings)
        print(f"processes: {most} against 1: {timings[1] / timings[most]:.2f}x faster")
    simulated = {c.config: c.avg_jct_h for c in result.confirmed if c.avg_jct_h is not None}
    by_config = {s.config: s.est_avg_jct_h for s in screened}
    keys = list(simulated)
    rho = pd.Series([by_config[k] for k in keys]).rank().corr(pd.Series([simulated[k] for k in keys]).rank())
    print(f"screen vs simulation on the {len(keys)} simulated configurations: Spearman {rho:.2f}")
    assert union_cluster(catalogue, cluster).total_gpus >= cluster.total_gpus
    brute_force()
    return 0


def brute_force() -> None:
    table, cluster = read_table(TABLE), read_cluster(LAB / "cluster.yaml")
    catalogue = read_catalogue(EXAMPLE / "lab_catalogue.yaml")
    catalogue = replace(catalogue, node_types={k: replace(v, max_nodes=4) for k, v in catalogue.node_types.items()})
    job_list = read_jobs(LAB / "jobs.csv", table=table, cluster=union_cluster(catalogue, cluster))
    sim = SimulationConfig(policy="max_min_fairness_perf", round_s=1800)
    for question in (Question(), Question(budget=150000)):
        configs = list(configurations(catalogue, cluster, question))
        screen = Screen(job_list, table, catalogue, cluster, sim.policy)
        screened = {c: screen(c, question) for c in configs}
        started = time.perf_counter()
        simulated = {c: confirm(job_list, table, catalogue, cluster, c, sim) for c in configs}
        every_s = time.perf_counter() - started
        result = answer(job_list, table, catalogue, cluster, question, sim, top=10)
        chosen = result.recommended.config if result.recommended else None
        ranking = sorted(configs, key=lambda c: simulated[c].avg_jct_h or math.inf)
        best = simulated[ranking[0]].avg_jct_h or math.inf
        near = [c for c in configs if (simulated[c].avg_jct_h or math.inf) <= best * (1 + JCT_TIE)]
        cheapest = min(near, key=lambda c: screened[c].cost or 0.0)
        rho = (
            pd.Series([screened[c].est_avg_jct_h for c in configs])
            .rank()
            .corr(pd.Series([simulated[c].avg_jct_h for c in configs]).rank())
        )
        budget = "no budget" if question.budget is None else f"budget {question.budget:,.0f}"
        gap = 100 * ((simulated[chosen].avg_jct_h or math.inf) / best - 1) if chosen else math.inf
        verdict = (
            "the brute-force choice"
            if chosen == cheapest
            else f"{gap:.1f} % above the best JCT; brute force (cheapest within {100 * JCT_TIE:.0f} %): "
            f"{cheapest.label(catalogue)}, cost {screened[cheapest].cost:,.0f} against {screened[chosen].cost:,.0f}"
        )
        print(
            f"brute force, lab, 3 types x 0-4 nodes, {budget}: {len(configs)} configurations simulated in "
            f"{every_s:.1f} s; recommended {chosen.label(catalogue) if chosen else '-'} "
            f"({simulated[chosen].avg_jct_h:.2f} h, rank {ranking.index(chosen) + 1} by JCT; best {best:.2f} h): "
            f"{verdict}; screen vs simulation Spearman {rho:.3f}"
        )


if __name__ == "__main__":
    sys.exit(main())
