"""`rota plan --horizon`: how close are the estimated finishes to the full plan's?

For each scenario the full plan runs once; then, for each horizon, the plan of only that many
rounds, and the finish of every job still unfinished at its end is estimated three ways, from
the same engine state:

    old          remaining steps at the rate the job's last allocation gives it (what rota plan
                 did first; kept here as the baseline)
    fluid alone  planner.estimate.finish with no look-ahead: the policy re-solved as jobs
                 finish and arrive, the round mechanism's shares and restart costs, run forward
                 as a fluid (what a list too long to simulate on gets)
    look-ahead   what rota plan does: the rounds simulated on (not written) for up to
    + fluid      LOOKAHEAD_JOB_ROUNDS job-rounds, the fluid from there; a list short enough is
                 simulated to its end, and its estimates are the full plan's

Printed per scenario and horizon: jobs estimated, and the median, 90th percentile and maximum
of |estimated - full plan| / full plan, on the finish time (what the target, 25 %, is about) and
on the time still left when the planned rounds end (a harder measure). Without --quick it also
times `rota plan --rounds 1` on 10^5 jobs with the old estimator and the new (same run, same
machine); "new s" is the new estimate's own time.

Scenarios: the demo (data/throughputs.csv, data/jobs.csv, data/cluster.yaml), the lab list
(Gavel's table, data/examples/lab: 60 jobs on 40 GPUs, 120 s restarts), the lab list with
--migration-aware, and (not with --quick) 512 generated jobs on 128:128:128.

    python benchmarks/bench_horizon.py [--quick] [--policy max_min_fairness_perf]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_plan import run_cli  # noqa: E402  (one rota command in process, timed)

import planner.modes.plan as plan_mode  # noqa: E402
from planner.estimate.finish import engine_finishes  # noqa: E402
from planner.formats.cluster import read_cluster  # noqa: E402
from planner.formats.jobs import read_jobs  # noqa: E402
from planner.formats.table import read_table  # noqa: E402
from planner.policies import make_policy  # noqa: E402
from planner.rounds.engine import Engine, EngineConfig  # noqa: E402
from planner.rounds.restart import charged_restarts  # noqa: E402

DATA = ROOT / "data"
GAVEL_CSV = DATA / "gavel" / "simulation_throughputs.csv"
GAVEL_JSON = DATA / "gavel" / "simulation_throughputs.json"
HORIZONS_H = (0.1, 2.0, 4.0, 12.0)  # 0.1 h: one round of 360 s
BIG_JOBS, BIG_GPUS = 100_000, 8192


@dataclass(frozen=True)
class Scenario:
    name: str
    table: Path
    jobs: Path
    cluster: Path
    migration_aware: bool = False


def last_allocation_estimate(engine: Engine) -> dict[str, float]:
    """The estimator `rota plan --rounds K` used before planner.estimate.finish: remaining steps at
    the rate the job's last allocation gives it (time fractions x throughputs, pairs included)."""
    solve = engine.last_solve
    if solve is None or engine.t is None:
        return {}
    rate = dict.fromkeys(engine.active, 0.0)
    rows = [i for i, jid in enumerate(solve.job_ids) if jid in rate]
    if rows:
        ids = [solve.job_ids[i] for i in rows]
        shares = np.asarray(solve.allocation.x, dtype=float)[rows]
        total = np.where(shares > 0, shares * engine.solo_rates(ids), 0.0).sum(axis=1)
        rate.update(zip(ids, total.tolist()))
    pair_x = solve.allocation.pair_x or {}
    if pair_x:
        pairs, shares = list(pair_x), np.asarray(list(pair_x.values()), dtype=float)
        for p, j in zip(*np.nonzero(shares > 0)):
            if all(jid in rate for jid in pairs[p]):
                for jid, r in zip(pairs[p], engine.rate(pairs[p], int(j))):
                    rate[jid] += float(shares[p, j]) * r
    out = {}
    for jid, r in rate.items():
        outcome = engine.outcomes[jid]
        if r > 0 and outcome.finish_s is None:
            out[jid] = engine.t + (outcome.job.total_steps - outcome.steps_done) / r
    return out


def engine_for(s: Scenario, policy: str, max_rounds: int | None) -> Engine:
    """The engine `rota plan` builds for these inputs (restart costs from the table and cluster)."""
    cluster, table = read_cluster(s.cluster), read_table(s.table)
    jobs = read_jobs(s.jobs, table=table, cluster=cluster)
    restart = charged_restarts(table, cluster, None, s.migration_aware, False)
    config = EngineConfig() if max_rounds is None else EngineConfig(max_rounds=max_rounds)
    return Engine(table, cluster, make_policy(policy), config, jobs, restart=restart, migration_aware=s.migration_aware)


def errors(estimates: dict[str, float], exact: dict[str, float], since: float) -> tuple[list[float], list[float]]:
    """Per job: relative error of the finish, and of the time left after `since`."""
    on_finish = [abs(v - exact[j]) / exact[j] for j, v in estimates.items()]
    on_left = [abs(v - exact[j]) / (exact[j] - since) for j, v in estimates.items() if exact[j] > since]
    return on_finish, on_left


def spread(values: list[float]) -> str:
    if not values:
        return f"{'-':>7} {'-':>7} {'-':>7}"
    ordered = sorted(values)
    p90 = float(np.percentile(ordered, 90))
    return f"{statistics.median(ordered):>7.3f} {p90:>7.3f} {ordered[-1]:>7.3f}"


def compare(s: Scenario, policy: str) -> None:
    full = engine_for(s, policy, None)
    full.run()
    exact = {jid: o.finish_s for jid, o in full.outcomes.items() if o.finish_s is not None}
    for hours in HORIZONS_H:
        engine = engine_for(s, policy, round(hours * 3600 / full.config.round_s))
        engine.run()
        old = last_allocation_estimate(engine)  # reads the engine only
        fluid = engine_finishes(engine, lookahead=0)
        started = time.perf_counter()
        new = engine_finishes(engine)
        new_s = time.perf_counter() - started
        horizon = "1 round" if hours < 0.5 else f"{hours:g} h"
        if not new:
            print(f"{s.name:<16} {horizon:>8} {0:>5}  (every job finished within the horizon)")
            continue
        assert engine.t is not None
        old_f, _ = errors(old, exact, engine.t)
        fluid_f, fluid_l = errors(fluid, exact, engine.t)
        new_f, new_l = errors(new, exact, engine.t)
        print(
            f"{s.name:<16} {horizon:>8} {len(new):>5}  {spread(old_f)} | {spread(fluid_f)} | {spread(new_f)}"
            f"    {spread(fluid_l)} | {spread(new_l)}  {new_s:>6.2f}"
        )
        if len(old) < len(new):
            print(f"{'':<16} {'':>8} {'':>5}  (old: {len(new) - len(old)} of them had no estimate)")


def time_big_plan(repeats: int) -> None:
    """`rota plan --rounds 1` on 10^5 jobs (bench_plan's largest case), with each estimator."""
    with tempfile.TemporaryDirectory(prefix="rota-bench-horizon-") as tmp:
        folder = Path(tmp)
        jobs, cluster = folder / "jobs.csv", folder / "cluster.yaml"
        generate = ["trace", "generate", "--table", str(GAVEL_JSON), "--num-jobs", str(BIG_JOBS), "--out", str(jobs)]
        run_cli(generate)
        cluster.write_text(f"worker_types:\n  v100: {BIG_GPUS}\n  p100: {BIG_GPUS}\n  k80: {BIG_GPUS}\n")
        args = ["plan", "--table", str(GAVEL_CSV), "--jobs", str(jobs), "--cluster", str(cluster)]
        args += ["--rounds", "1", "--out", str(folder / "s.json")]
        kept = plan_mode.estimate_finishes
        spent: dict[str, list[float]] = {"old": [], "new": []}
        plans: dict[str, list[float]] = {"old": [], "new": []}
        estimators: dict[str, Callable[[Engine], dict[str, float]]] = {
            "old": last_allocation_estimate,
            "new": engine_finishes,
        }
        try:
            run_cli(args)  # warm-up
            for _ in range(repeats):
                for name, estimator in estimators.items():

                    def timed(engine: Engine, estimator=estimator, name=name) -> dict[str, float]:
                        started = time.perf_counter()
                        out = estimator(engine)
                        spent[name].append(time.perf_counter() - started)
                        return out

                    plan_mode.estimate_finishes = timed
                    plans[name].append(run_cli(args))
        finally:
            plan_mode.estimate_finishes = kept
    old_plan, new_plan = statistics.median(plans["old"]), statistics.median(plans["new"])
    old_est, new_est = statistics.median(spent["old"]), statistics.median(spent["new"])
    print(f"\nrota plan --rounds 1, {BIG_JOBS} jobs on {BIG_GPUS}x3 GPUs (median of {repeats}):")
    print(f"  old estimator: plan {old_plan:.2f} s, of which estimate {old_est:.2f} s")
    print(f"  new estimator: plan {new_plan:.2f} s, of which estimate {new_est:.2f} s")
    print(f"  estimate, new - old: {new_est - old_est:+.2f} s = {(new_est - old_est) / old_plan:+.1%} of the plan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Demo and lab only; no 10^5-job timing.")
    parser.add_argument("--policy", default="max_min_fairness_perf")
    parser.add_argument("--repeats", type=int, default=3, help="Repeats of the 10^5-job timing.")
    args = parser.parse_args()
    lab = DATA / "examples" / "lab"
    scenarios = [
        Scenario("demo", DATA / "throughputs.csv", DATA / "jobs.csv", DATA / "cluster.yaml"),
        Scenario("lab", GAVEL_CSV, lab / "jobs.csv", lab / "cluster.yaml"),
        Scenario("lab, migr.-aware", GAVEL_CSV, lab / "jobs.csv", lab / "cluster.yaml", migration_aware=True),
    ]
    with tempfile.TemporaryDirectory(prefix="rota-bench-horizon-") as tmp:
        if not args.quick:
            jobs, cluster = Path(tmp) / "jobs512.csv", Path(tmp) / "cluster128.yaml"
            run_cli(["trace", "generate", "--table", str(GAVEL_JSON), "--num-jobs", "512", "--out", str(jobs)])
            cluster.write_text("worker_types:\n  v100: 128\n  p100: 128\n  k80: 128\n")
            scenarios.append(Scenario("512 generated", GAVEL_CSV, jobs, cluster))
        print(f"policy {args.policy}; relative error |estimate - full plan| / full plan, per job still running")
        print(f"{'':<16} {'':>8} {'':>5}  {'on the finish time':^75}    {'on the time left':^49}")
        names = [f"{name:^23}" for name in ("old", "fluid alone", "look-ahead + fluid")]
        head = f"{'scenario':<16} {'horizon':>8} {'jobs':>5}"
        print(f"{head}  {' | '.join(names)}    {' | '.join(names[1:])}  {'new s':>6}")
        cells = f"{'median':>7} {'p90':>7} {'max':>7}"
        print(f"{'':<16} {'':>8} {'':>5}  {cells} | {cells} | {cells}    {cells} | {cells}")
        for s in scenarios:
            compare(s, args.policy)
    if not args.quick:
        time_big_plan(args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
