"""The round loop against the batch plan on the lab example, with restart costs.

The lab list (data/examples/lab: 60 jobs on 1-8 GPUs, 8-GPU nodes of three GPU types, 120 s
per restart from the cluster spec) under max_min_fairness_perf, planned two ways:

* batch: `rota plan` (one engine run to the end);
* loop: `rota plan-next` one round at a time, as `rota run` does, every job reporting the
  steps it was planned (through the state file's JSON each round);

each with and without `--migration-aware`, at 360 s rounds and at the length
`--round-length auto` picks. Prints makespan, average JCT, restarts and goodput of each, the
loop's makespan against the batch plan's (the target: within 5 %), and the loop's cost per
round. Writes benchmarks/results/restart_loop.json.

    python benchmarks/bench_restart_loop.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.formats.atomic import write_text_atomic  # noqa: E402
from planner.formats.cluster import read_cluster  # noqa: E402
from planner.formats.jobs import read_jobs  # noqa: E402
from planner.formats.progress import JobProgress  # noqa: E402
from planner.formats.table import read_table  # noqa: E402
from planner.modes.next_round import make_policy_from, next_round  # noqa: E402
from planner.modes.round_length import choose_round_length  # noqa: E402
from planner.modes.state import Progress  # noqa: E402
from planner.policies import PolicyOptions  # noqa: E402
from planner.rounds.engine import Engine, EngineConfig  # noqa: E402
from planner.rounds.restart import charged_restarts  # noqa: E402

TABLE = read_table(ROOT / "data" / "gavel" / "simulation_throughputs.csv")
CLUSTER = read_cluster(ROOT / "data" / "examples" / "lab" / "cluster.yaml")
JOBS = read_jobs(ROOT / "data" / "examples" / "lab" / "jobs.csv", table=TABLE, cluster=CLUSTER)
POLICY = "max_min_fairness_perf"
TARGET = 0.05  # the loop's makespan within 5 % of the batch plan's


def batch(round_s: float, aware: bool) -> dict:
    restart = charged_restarts(TABLE, CLUSTER, None, aware, False)
    engine = Engine(
        TABLE, CLUSTER, make_policy_from(POLICY, {}), EngineConfig(round_s=round_s), JOBS,
        restart=restart, migration_aware=aware,
    )  # fmt: skip
    result = engine.run()
    finishes = {jid: o.finish_s for jid, o in result.outcomes.items()}
    tally = result.restarts
    return _metrics(finishes, tally.starts, sum(tally.lost_gpu_s.values()), sum(result.busy_gpu_s.values()))


def loop(round_s: float, aware: bool, limit: int) -> dict:
    state, progress, done = None, None, {j.job_id: 0.0 for j in JOBS}
    finishes: dict[str, float] = {}
    seconds, rounds = [], 0
    while rounds < limit:
        started = time.perf_counter()
        step = next_round(
            TABLE, CLUSTER, state=state, jobs=JOBS if state is None else None, policy=POLICY, progress=progress,
            round_s=round_s, migration_aware=aware,
        )  # fmt: skip
        state = json.loads(json.dumps(step.state))
        seconds.append(time.perf_counter() - started)
        schedule = step.schedule.to_json()
        if not schedule["rounds"]:
            break
        rounds += 1
        rnd = schedule["rounds"][0]
        reports = {}
        for a in rnd["assignments"]:
            for jid, n in a["planned_steps"].items():
                done[jid] += n
                finished = done[jid] >= schedule["jobs"][jid]["total_steps"] - 1e-9
                reports[jid] = JobProgress(done[jid], finished)
                if finished:
                    finishes[jid] = schedule["jobs"][jid]["expected_finish_s"]
        progress = Progress(time_s=rnd["end_s"], round=rnd["index"], jobs=reports)
    books = state["restart"]
    out = _metrics(finishes, books["starts"], sum(books["lost_gpu_s"].values()), None)
    out.update(rounds=rounds, ms_per_round=1000 * statistics.median(seconds), finished=len(finishes))
    return out


def _metrics(finishes: dict, starts: int, lost: float, busy: float | None) -> dict:
    done = [f for f in finishes.values() if f is not None]
    arrival = {j.job_id: j.arrival_s for j in JOBS}
    return {
        "makespan_h": max(done) / 3600 if done else None,
        "avg_jct_h": sum(finishes[j] - arrival[j] for j in finishes if finishes[j] is not None) / len(done) / 3600,
        "restarts": starts,
        "restart_gpu_h": lost / 3600,
        "goodput": None if not busy else (busy - lost) / busy,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first 200 rounds of the loop only")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "restart_loop.json")
    args = parser.parse_args()
    restart = charged_restarts(TABLE, CLUSTER, None, True, False)
    auto = choose_round_length(
        JOBS, TABLE, CLUSTER, POLICY, restart, migration_aware=True, policy_options=PolicyOptions(),
        engine=EngineConfig(),
    )  # fmt: skip
    print(auto.reason)
    limit = 200 if args.quick else 10**6
    rows = []
    print(
        f"{'round':>6} {'aware':>5} {'mode':>6} {'makespan h':>10} {'avg JCT h':>9} {'restarts':>8} {'lost GPU-h':>10}"
    )
    for round_s in (360.0, auto.round_s):
        for aware in (False, True):
            b = batch(round_s, aware)
            lp = loop(round_s, aware, limit)
            for mode, m in (("batch", b), ("loop", lp)):
                print(
                    f"{round_s:6.0f} {str(aware):>5} {mode:>6} {m['makespan_h'] or float('nan'):10.2f} "
                    f"{m['avg_jct_h']:9.2f} {m['restarts']:8d} {m['restart_gpu_h']:10.1f}"
                )
            complete = lp["finished"] == len(JOBS)
            gap = abs(lp["makespan_h"] / b["makespan_h"] - 1) if complete else None
            verdict = "n/a (--quick)" if gap is None else f"{100 * gap:.2f} % ({'ok' if gap <= TARGET else 'MISSED'})"
            print(
                f"       loop vs batch makespan: {verdict}; goodput (batch) {100 * b['goodput']:.1f} %; "
                f"loop {lp['ms_per_round']:.1f} ms/round (median), {lp['rounds']} rounds"
            )
            rows.append({"round_s": round_s, "migration_aware": aware, "batch": b, "loop": lp, "makespan_gap": gap})
    if not args.quick:
        write_text_atomic(args.out, json.dumps({"auto": auto.to_json(), "runs": rows}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
