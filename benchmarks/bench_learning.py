"""Learning from progress reports: average JCT against the oracle as rounds go by.

Protocol: Gavel's solo single-GPU rows on k80/p100/v100 are the truth. A
seeded 30 % of the job types keep one worker type's row (seeded) and have
the other two replaced by estimates (status and source `estimated`):

* cold-start - `rota table estimate --solo` (`estimate_solo_rows`) fills them
               from that one cell and the other job types' rows;
* perturbed  - the true rates times a seeded log-uniform factor in [1/3, 3]
               (a bad estimator: the cold-start one is within 14 % half the time).

A seeded job list (single-GPU jobs of Gavel's 26 types, arriving in batches,
durations log-uniform on a v100) is planned one round at a time by
`next_round` with `max_min_fairness_perf`, in process. After each round a
simulated launcher runs the planned assignments at the TRUE rates (a job does
true rate x round seconds, capped at its total; `elapsed_s` is the time it
really trained) and reports that as the next call's progress. Three ways:

* oracle   - the true table decides;
* static   - the wrong table decides; reports are recorded, never used
             (`observed_min=None`);
* learning - the wrong table decides; an estimated cell takes the median of
             its observed rates once it has `observed_min` (3) reports.

Reports average JCT (launcher's finish time minus arrival) per way and per
arrival batch, the ratio to the oracle, and every round the number of
estimated cells replaced by observations and the number of decision cells
within 10 % of the truth. Writes benchmarks/results/learning.json (and
learning.png when matplotlib is importable); --quick writes under results/quick/.

    python benchmarks/bench_learning.py [--quick] [--seeds 0,1,2,3,4] [--fraction 0.3] [--jobs 96]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.estimate.cold_start import estimate_solo_rows  # noqa: E402
from planner.estimate.observed import rate_ceiling  # noqa: E402
from planner.formats.atomic import write_text_atomic, write_with  # noqa: E402
from planner.formats.cluster import Cluster, parse_cluster  # noqa: E402
from planner.formats.jobs import Job  # noqa: E402
from planner.formats.progress import JobProgress, Progress  # noqa: E402
from planner.formats.schedule import Round  # noqa: E402
from planner.formats.table import COLUMNS, JobType, ThroughputTable, read_table  # noqa: E402
from planner.modes.next_round import next_round  # noqa: E402

GAVEL = ROOT / "data" / "gavel" / "simulation_throughputs.csv"
RESULTS = ROOT / "benchmarks" / "results"
WORKER_TYPES = ("k80", "p100", "v100")
POLICY = "max_min_fairness_perf"
CLOSE = 0.10  # a decision value "within 10 %" of the truth
FULL: dict[str, Any] = {
    "cluster": "4:4:4",
    "jobs": 96,
    "batches": 4,
    "batch_gap_h": 3.0,  # batches overlap: a loaded cluster, where decisions matter
    "hours": (0.5, 4.0),
    "round_s": 360.0,
    "seeds": [0, 1, 2, 3, 4],
}
QUICK: dict[str, Any] = {
    "cluster": "2:2:2",
    "jobs": 24,
    "batches": 3,
    "batch_gap_h": 3.0,
    "hours": (0.25, 2.0),
    "round_s": 360.0,
    "seeds": [0],
}
MAX_ROUNDS = 5000  # a run that has not ended by then is reported as not ended


# --------------------------------------------------------------------------- tables


def true_table(path: Path) -> ThroughputTable:
    """Solo scale-factor-1 rows on k80, p100 and v100 (no pairs, no *_unconsolidated types)."""
    full = read_table(path)
    rows = [
        r
        for r in full.rows
        if r["worker_type"] in WORKER_TYPES and r["partner_model"] is None and r["scale_factor"] == 1
    ]
    return ThroughputTable(rows, path="<gavel k80/p100/v100 solo>")


def pick_estimated(truth: ThroughputTable, fraction: float, rng: random.Random) -> dict[JobType, str]:
    """The job types whose rows become estimates, each with the worker type it keeps measured."""
    runnable = [jt for jt in truth.job_types if all(truth.solo(w, jt) > 0 for w in WORKER_TYPES)]
    chosen = rng.sample(runnable, max(1, round(fraction * len(runnable))))
    return {jt: rng.choice(WORKER_TYPES) for jt in sorted(chosen, key=JobType.sort_key)}


def _type_of(row: Mapping[str, Any]) -> JobType:
    return JobType(row["model"], row["batch_size"], row["scale_factor"])


def cold_start_table(truth: ThroughputTable, kept: dict[JobType, str]) -> ThroughputTable:
    """The chosen types lose every row but the kept one; `estimate_solo_rows` fills them again."""
    partial = [r for r in truth.rows if _type_of(r) not in kept or r["worker_type"] == kept[_type_of(r)]]
    rows, _ = estimate_solo_rows(ThroughputTable(partial), WORKER_TYPES)
    filled = {(r["worker_type"], _type_of(r)) for r in rows}
    missing = [(w, jt.name) for jt in kept for w in WORKER_TYPES if w != kept[jt] and (w, jt) not in filled]
    if missing:
        raise RuntimeError(f"the estimator left cells empty: {missing}")
    return ThroughputTable.from_records([*partial, *rows], columns=COLUMNS, path="<cold-start>")


def perturbed_table(truth: ThroughputTable, kept: dict[JobType, str], rng: random.Random) -> ThroughputTable:
    """The chosen types' other rows at the true rate times a log-uniform factor in [1/3, 3]."""
    rows = []
    for r in truth.rows:
        jt = _type_of(r)
        if jt in kept and r["worker_type"] != kept[jt]:
            factor = math.exp(rng.uniform(-math.log(3.0), math.log(3.0)))
            r = {
                **r,
                "throughput": r["throughput"] * factor,
                "status": "estimated",
                "source": "estimated",
                "device_name": f"perturbed x{factor:.2f}",
            }
        rows.append(r)
    return ThroughputTable.from_records(rows, columns=COLUMNS, path="<perturbed>")


def estimated_cells(table: ThroughputTable) -> list[tuple[str, JobType]]:
    return [(r["worker_type"], _type_of(r)) for r in table.rows if r["source"] == "estimated"]


# --------------------------------------------------------------------------- jobs


def make_jobs(truth: ThroughputTable, setup: dict[str, Any], rng: random.Random) -> list[Job]:
    """Single-GPU jobs of uniformly drawn types in equal arrival batches; a job's length is
    log-uniform in `hours` on a v100 (its steps: that time at the true v100 rate)."""
    types = [jt for jt in truth.job_types if truth.solo("v100", jt) > 0]
    low, high = setup["hours"]
    per_batch = math.ceil(setup["jobs"] / setup["batches"])
    jobs = []
    for n in range(setup["jobs"]):
        jt = rng.choice(types)
        hours = math.exp(rng.uniform(math.log(low), math.log(high)))
        arrival = (n // per_batch) * setup["batch_gap_h"] * 3600.0
        jobs.append(Job(f"job{n:03d}", jt, total_steps=truth.solo("v100", jt) * hours * 3600.0, arrival_s=arrival))
    return jobs


# --------------------------------------------------------------------------- the loop


@dataclass
class Run:
    finish_s: dict[str, float] = field(default_factory=dict)  # launcher's finish time per job
    timeline: list[dict[str, Any]] = field(default_factory=list)  # one entry per planned round
    rejected: int = 0  # reports the observed layer refused as impossible rates
    placed: dict[tuple[str, JobType], int] = field(default_factory=dict)  # job-rounds per solo cell
    reports: dict[tuple[str, JobType], int] = field(default_factory=dict)  # accepted observations per cell
    applied: dict[tuple[str, JobType], float] = field(default_factory=dict)  # cells deciding on observations
    rounds: int = 0
    ended: bool = False
    wall_s: float = 0.0


def _solo_cell(key: list[Any]) -> tuple[str, JobType] | None:
    """(worker type, job type) of a state's cell key; None for a pair's cell."""
    worker, model, batch, scale, partner, _ = key
    return None if partner is not None else (worker, JobType(model, batch, scale))


def applied_cells(applied: list[dict[str, Any]]) -> dict[tuple[str, JobType], float]:
    """The solo cells that decide on an observed median (the state's `observed.applied`)."""
    return {cell: a["rate"] for a in applied if (cell := _solo_cell(a["cell"])) is not None}


def decision_values(table: ThroughputTable, applied: list[dict[str, Any]]) -> dict[tuple[str, JobType], float]:
    """Each solo cell's rate in the table the planner decides with: the table's, or the
    observed median it applied."""
    return {(r["worker_type"], _type_of(r)): r["throughput"] for r in table.rows} | applied_cells(applied)


def _solo_counts(cells: list[dict[str, Any]]) -> dict[tuple[str, JobType], int]:
    """Accepted observations per solo cell, from the state's `observed.cells`."""
    return {cell: len(c["rates"]) for c in cells if (cell := _solo_cell(c["cell"])) is not None}


def close_cells(values: dict[tuple[str, JobType], float], truth: ThroughputTable, cells: list) -> int:
    return sum(1 for w, jt in cells if abs(values[(w, jt)] / truth.solo(w, jt) - 1) <= CLOSE)


def launch(rnd: Round, jobs: dict[str, Job], truth: ThroughputTable, steps: dict[str, float], run: Run) -> Progress:
    """Run one planned round at the true rates; the reports the launcher would write."""
    start, end = rnd["start_s"], rnd["end_s"]
    reports = {}
    for a in rnd["assignments"]:
        for jid in a["jobs"]:
            job = jobs[jid]
            rate = truth.solo(a["worker_type"], job.job_type)
            cell = (a["worker_type"], job.job_type)
            run.placed[cell] = run.placed.get(cell, 0) + 1
            left = job.total_steps - steps[jid]
            if rate * (end - start) >= left:  # finishes within the round
                elapsed = left / rate
                steps[jid] = job.total_steps
                run.finish_s[jid] = start + elapsed
                reports[jid] = JobProgress(steps_done=job.total_steps, finished=True, elapsed_s=elapsed)
            else:
                steps[jid] += rate * (end - start)
                reports[jid] = JobProgress(steps_done=steps[jid], elapsed_s=end - start)
    return Progress(time_s=end, round=rnd["index"], jobs=reports)


def simulate(
    truth: ThroughputTable,
    decide: ThroughputTable,
    cluster: Cluster,
    jobs: list[Job],
    *,
    observed_min: int | None,
    round_s: float,
) -> Run:
    """Plan one round per `next_round` call on `decide`; run it at the true rates; report it."""
    started = time.perf_counter()
    run = Run()
    by_id = {j.job_id: j for j in jobs}
    steps = dict.fromkeys(by_id, 0.0)
    cells = estimated_cells(decide)
    state: dict[str, Any] | None = None
    progress: Progress | None = None
    while run.rounds < MAX_ROUNDS:
        step = next_round(
            decide,
            cluster,
            state=state,
            jobs=jobs if state is None else None,
            progress=progress,
            policy=POLICY,
            round_s=round_s,
            observed_min=observed_min,
        )
        run.rejected += sum("not a possible rate" in w for w in step.warnings)
        state = step.state
        applied = state["observed"]["applied"]
        values = decision_values(decide, applied)
        if not step.schedule.rounds:
            run.ended = len(run.finish_s) == len(jobs)
            run.applied = applied_cells(applied)
            run.reports = _solo_counts(state["observed"]["cells"])
            break
        rnd = step.schedule.rounds[0]
        progress = launch(rnd, by_id, truth, steps, run)
        run.rounds += 1
        run.timeline.append(
            {
                "round": rnd["index"],
                "end_h": rnd["end_s"] / 3600.0,
                "observed_cells": len(applied_cells(applied)),
                "estimated_within_10pct": close_cells(values, truth, cells),
                "finished": len(run.finish_s),
            }
        )
    run.wall_s = time.perf_counter() - started
    return run


# --------------------------------------------------------------------------- summary


def jct_summary(run: Run, jobs: list[Job], per_batch: int) -> dict[str, Any]:
    jcts = [run.finish_s[j.job_id] - j.arrival_s for j in jobs if j.job_id in run.finish_s]
    batches: dict[int, list[float]] = {}
    for n, j in enumerate(jobs):
        if j.job_id in run.finish_s:
            batches.setdefault(n // per_batch, []).append(run.finish_s[j.job_id] - j.arrival_s)
    return {
        "finished": len(jcts),
        "ended": run.ended,
        "avg_jct_h": sum(jcts) / len(jcts) / 3600.0 if jcts else None,
        "batch_avg_jct_h": [sum(v) / len(v) / 3600.0 for _, v in sorted(batches.items())],
        "makespan_h": max(run.finish_s.values()) / 3600.0 if run.finish_s else None,
        "rounds": run.rounds,
        "rejected_reports": run.rejected,
        "wall_s": run.wall_s,
    }


def table_facts(decide: ThroughputTable, truth: ThroughputTable) -> dict[str, Any]:
    """How wrong the decision table starts; `unlearnable_cells`: estimated cells whose true rate
    is above the observed layer's ceiling (`rate_ceiling`), so that every report of them is
    refused as impossible."""
    cells = estimated_cells(decide)
    errors = sorted(abs(decide.solo(w, jt) / truth.solo(w, jt) - 1) for w, jt in cells)
    ceilings = {(w, jt): rate_ceiling(decide, cell_key(w, jt)) for w, jt in cells}
    return {
        "estimated_cells": len(cells),
        "estimated_within_10pct": close_cells({c: decide.solo(*c) for c in cells}, truth, cells),
        "median_abs_error": errors[len(errors) // 2] if errors else 0.0,
        "max_abs_error": errors[-1] if errors else 0.0,
        "unlearnable_cells": sorted(
            f"{jt.name} on {w}" for w, jt in cells if (c := ceilings[(w, jt)]) is not None and truth.solo(w, jt) > c
        ),
    }


def cell_key(worker_type: str, jt: JobType) -> tuple[str, str, int | None, int, None, None]:
    """The observed layer's key of a solo cell."""
    return (worker_type, jt.model, jt.batch_size, jt.scale_factor, None, None)


def cell_fates(run: Run, decide: ThroughputTable, truth: ThroughputTable) -> dict[str, int]:
    """What became of each estimated cell by the end of a run: replaced by observations; ran,
    but every report was refused (true rate above the ceiling); ran, not replaced (fewer than
    3 reports, or the layer is off); never placed (the policy never ran a job there)."""
    fates = dict.fromkeys(("replaced", "refused", "ran_not_replaced", "never_placed"), 0)
    for w, jt in estimated_cells(decide):
        ceiling = rate_ceiling(decide, cell_key(w, jt))
        if (w, jt) in run.applied:
            fates["replaced"] += 1
        elif not run.placed.get((w, jt)):
            fates["never_placed"] += 1
        elif ceiling is not None and truth.solo(w, jt) > ceiling:
            fates["refused"] += 1
        else:
            fates["ran_not_replaced"] += 1
    return fates


def columns(timeline: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The timeline as one list per field (a compact JSON)."""
    keys = list(timeline[0]) if timeline else []
    return {k: [e[k] for e in timeline] for k in keys}


def experiment(truth: ThroughputTable, setup: dict[str, Any], seed: int) -> dict[str, Any]:
    """Every run of one seed: the oracle once, static and learning per wrong table."""
    rng = random.Random(seed)
    kept = pick_estimated(truth, setup["fraction"], rng)
    tables = {"cold-start": cold_start_table(truth, kept), "perturbed": perturbed_table(truth, kept, rng)}
    jobs = make_jobs(truth, setup, rng)
    cluster = parse_cluster(setup["cluster"])
    per_batch = math.ceil(setup["jobs"] / setup["batches"])
    oracle = simulate(truth, truth, cluster, jobs, observed_min=3, round_s=setup["round_s"])
    out: dict[str, Any] = {
        "seed": seed,
        "estimated_types": {jt.name: w for jt, w in kept.items()},
        "oracle": {**jct_summary(oracle, jobs, per_batch), "ratio_to_oracle": 1.0},
        "oracle_observed_cells": max((e["observed_cells"] for e in oracle.timeline), default=0),
        "oracle_timeline": columns(oracle.timeline),
        "variants": {},
    }
    base = out["oracle"]["avg_jct_h"]
    for name, decide in tables.items():
        facts = table_facts(decide, truth)
        # cells the oracle never used either: no loss when a learning run never tries them
        facts["never_placed_by_oracle"] = sum(1 for c in estimated_cells(decide) if not oracle.placed.get(c))
        variant: dict[str, Any] = {"table": facts, "ways": {}, "timeline": {}}
        for way, observed_min in (("static", None), ("learning", 3)):
            run = simulate(truth, decide, cluster, jobs, observed_min=observed_min, round_s=setup["round_s"])
            summary = jct_summary(run, jobs, per_batch)
            summary["estimated_cells_at_end"] = cell_fates(run, decide, truth)
            summary["ratio_to_oracle"] = summary["avg_jct_h"] / base if summary["avg_jct_h"] and base else None
            summary["batch_ratio_to_oracle"] = [
                v / o for v, o in zip(summary["batch_avg_jct_h"], out["oracle"]["batch_avg_jct_h"])
            ]
            variant["ways"][way] = summary
            variant["timeline"][way] = columns(run.timeline)
        out["variants"][name] = variant
    return out


def _experiment(task: tuple[ThroughputTable, dict[str, Any], int]) -> dict[str, Any]:
    return experiment(*task)


def summarise(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per table and way: mean, min and max over seeds of the ratio to the oracle, and the
    mean ratio per arrival batch."""
    out: dict[str, dict[str, Any]] = {}
    for name in results[0]["variants"]:
        out[name] = {}
        for way in ("static", "learning"):
            runs = [r["variants"][name]["ways"][way] for r in results]
            ratios = [s["ratio_to_oracle"] for s in runs]
            per_batch = list(zip(*(s["batch_ratio_to_oracle"] for s in runs)))
            out[name][way] = {
                "mean_ratio_to_oracle": sum(ratios) / len(ratios),
                "min_ratio": min(ratios),
                "max_ratio": max(ratios),
                "batch_mean_ratio_to_oracle": [sum(b) / len(b) for b in per_batch],
                "all_finished": all(s["ended"] for s in runs),
                "estimated_cells_at_end": {
                    k: sum(s["estimated_cells_at_end"][k] for s in runs) for k in runs[0]["estimated_cells_at_end"]
                },
            }
    return out


# --------------------------------------------------------------------------- output


def _rows(timeline: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(timeline, values)) for values in zip(*timeline.values())]


def _at(rows: list[dict[str, Any]], hour: float) -> dict[str, Any] | None:
    """The last round that ended by `hour`."""
    done = [e for e in rows if e["end_h"] <= hour + 1e-9]
    return done[-1] if done else None


def print_report(results: list[dict[str, Any]], summary: dict[str, Any], setup: dict[str, Any], every_h: float) -> None:
    print(
        f"Gavel solo table (k80/p100/v100), cluster {setup['cluster']} (v100:p100:k80), {setup['jobs']} single-GPU "
        f"jobs in {setup['batches']} batches {setup['batch_gap_h']:g} h apart, {setup['hours'][0]:g}-"
        f"{setup['hours'][1]:g} h on a v100, round {setup['round_s']:g} s, {POLICY}, "
        f"{100 * setup['fraction']:.0f} % of job types estimated, seeds {', '.join(map(str, setup['seeds']))}"
    )
    fmt = lambda values: " ".join(f"{v:5.2f}" for v in values)  # noqa: E731
    for r in results:
        kept = r["estimated_types"]
        print(f"\nseed {r['seed']}: estimated types [kept measured cell]:")
        print("  " + ", ".join(f"{k} [{w}]" for k, w in kept.items()))
        for name, v in r["variants"].items():
            t = v["table"]
            print(
                f"  {name}: {t['estimated_cells']} estimated cells, {t['estimated_within_10pct']} within 10 % at the "
                f"start, median error {100 * t['median_abs_error']:.0f} %, max {100 * t['max_abs_error']:.0f} %; "
                f"never used by the oracle: {t['never_placed_by_oracle']}; "
                f"above the observed ceiling: {', '.join(t['unlearnable_cells']) or 'none'}"
            )
        print(f"  {'table':<11}{'way':<10}{'avg JCT h':>10}{'/ oracle':>9}{'refused':>8}  per batch / oracle")
        o = r["oracle"]
        print(f"  {'true':<11}{'oracle':<10}{o['avg_jct_h']:>10.3f}{1.0:>9.3f}{o['rejected_reports']:>8}")
        for name, v in r["variants"].items():
            for way, s in v["ways"].items():
                print(
                    f"  {name:<11}{way:<10}{s['avg_jct_h']:>10.3f}{s['ratio_to_oracle']:>9.3f}"
                    f"{s['rejected_reports']:>8}  {fmt(s['batch_ratio_to_oracle'])}"
                )
    first = results[0]
    for name, v in first["variants"].items():
        runs = {"oracle": _rows(first["oracle_timeline"])} | {
            w: _rows(v["timeline"][w]) for w in ("static", "learning")
        }
        total = v["table"]["estimated_cells"]
        print(f"\nseed {first['seed']}, {name} table, as time goes by ({total} estimated cells; learning run):")
        print(
            f"{'hour':>6}{'round':>7}{'observed cells':>16}{'within 10 %':>13}   jobs finished: oracle static learning"
        )
        end = max(rows[-1]["end_h"] for rows in runs.values() if rows)
        hours = [k * every_h for k in range(1, int(end // every_h) + 1)] + [end]
        for h in dict.fromkeys(hours):
            at = {w: _at(rows, h) for w, rows in runs.items()}
            e = at["learning"]
            fin = "".join(f"{a['finished'] if a else 0:>7}" for a in at.values())
            cells = f"{e['round']:>7}{e['observed_cells']:>16}{e['estimated_within_10pct']:>13}" if e else " " * 36
            print(f"{h:>6.1f}{cells}          {fin}")
    print(
        f"\nover {len(results)} seed(s): avg JCT / oracle, mean [min, max]; per arrival batch (mean); "
        "estimated cells at the end (sum over seeds)"
    )
    for name, ways in summary.items():
        for way, m in ways.items():
            fates = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in m["estimated_cells_at_end"].items())
            print(
                f"  {name:<11}{way:<10}{m['mean_ratio_to_oracle']:6.3f} [{m['min_ratio']:.3f}, {m['max_ratio']:.3f}]"
                f"  {fmt(m['batch_mean_ratio_to_oracle'])}  estimated cells at the end: {fates}"
            )


def plot(results: list[dict[str, Any]], summary: dict[str, Any], setup: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colours = {"cold-start": "tab:blue", "perturbed": "tab:red"}
    first = results[0]
    total = 0
    for name, v in first["variants"].items():
        total = v["table"]["estimated_cells"]
        for way, dash in (("learning", "-"), ("static", ":")):
            tl = v["timeline"][way]
            left.plot(tl["end_h"], tl["estimated_within_10pct"], dash, color=colours[name], label=f"{name}, {way}")
        learnable = total - len(v["table"]["unlearnable_cells"])
    ceiling = f"at most learnable: {learnable} ({total - learnable} above the report ceiling)"
    left.axhline(learnable, color="grey", lw=0.8, ls="--", label=ceiling)
    left.set_xlabel("simulated time (h)")
    left.set_ylabel(f"estimated cells within 10 % of the truth (of {total})")
    left.set_ylim(0, 1.7 * total)  # room for the legend above every curve (they end at most at `total`)
    left.set_yticks(range(0, total + 1, max(1, total // 8)))
    left.legend(loc="upper left", fontsize=8)
    left.set_title(f"decision table vs truth (seed {first['seed']})", fontsize=10)
    batches = range(1, setup["batches"] + 1)
    for name, ways in summary.items():
        for way, dash in (("learning", "-o"), ("static", ":s")):
            right.plot(
                batches, ways[way]["batch_mean_ratio_to_oracle"], dash, color=colours[name], label=f"{name}, {way}"
            )
    right.axhline(1.0, color="black", lw=0.8, label="oracle")
    right.set_xticks(list(batches), [f"{b}\n({(b - 1) * setup['batch_gap_h']:g} h)" for b in batches])
    right.set_xlabel("arrival batch (arrival time)")
    right.set_ylabel("average JCT / oracle's")
    right.set_title(f"average JCT vs the oracle, mean of {len(results)} seed(s)", fontsize=10)
    right.legend(loc="upper right", fontsize=8)
    low, high = right.get_ylim()
    right.set_ylim(low, high + 0.4 * (high - low))  # room for the legend above the curves
    fig.suptitle(
        f"Learning from progress reports: Gavel k80/p100/v100 solo table, {100 * setup['fraction']:.0f} % of job "
        f"types estimated, cluster {setup['cluster']}, {setup['jobs']} jobs, {POLICY}",
        fontsize=10,
    )
    fig.tight_layout()
    write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return True


# an indented list of numbers: opened by "[" and a newline, which no JSON string holds
_NUMBER_LIST = re.compile(r"\[\n\s*(-?[\d.eE+-]+(?:,\n\s*-?[\d.eE+-]+)*)\n\s*\]")


def compact_json(payload: dict[str, Any]) -> str:
    """Indented JSON with each list of numbers (the timelines) on one line."""
    text = json.dumps(payload, indent=1)
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"smaller run: {QUICK}")
    parser.add_argument("--seeds", help="comma-separated seeds (estimated types, factors, jobs); default: 0-4, quick 0")
    parser.add_argument("--fraction", type=float, default=0.3, help="share of job types with estimated cells")
    parser.add_argument("--jobs", type=int, help="number of jobs")
    parser.add_argument("--cluster", help="v100:p100:k80 GPU counts (Gavel's order), e.g. 4:4:4")
    parser.add_argument("--every", type=float, default=2.0, help="print the timeline every N simulated hours")
    parser.add_argument("--workers", type=int, default=2, help="seeds run in parallel")
    parser.add_argument("--out", type=Path, help="results JSON (default benchmarks/results[/quick]/learning.json)")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    out = args.out or (RESULTS / "quick" if args.quick else RESULTS) / "learning.json"
    if not GAVEL.exists():
        print(f"skipped: Gavel table not found at {GAVEL}")
        return 0
    setup = dict(QUICK if args.quick else FULL)
    if args.jobs:
        setup["jobs"] = args.jobs
    if args.cluster:
        setup["cluster"] = args.cluster
    if args.seeds:
        setup["seeds"] = [int(s) for s in args.seeds.split(",")]
    setup.update(fraction=args.fraction, policy=POLICY)
    started = time.perf_counter()
    truth = true_table(GAVEL)
    tasks = [(truth, setup, seed) for seed in setup["seeds"]]
    if args.workers > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            results = list(pool.map(_experiment, tasks))
    else:
        results = [_experiment(t) for t in tasks]
    elapsed = time.perf_counter() - started
    summary = summarise(results)
    print_report(results, summary, setup, args.every)
    for r in results[1:]:  # the first seed's timelines are plotted; the others would only weigh
        r.pop("oracle_timeline")
        for v in r["variants"].values():
            v.pop("timeline")
    payload = {
        "setup": {k: list(v) if isinstance(v, tuple) else v for k, v in setup.items()},
        "summary": summary,
        "seeds": results,
        "wall_s": elapsed,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, compact_json(payload))
    print(f"\nwrote {out}; {elapsed:.0f} s")
    if not args.no_plot and plot(results, summary, setup, out.with_suffix(".png")):
        print(f"wrote {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
