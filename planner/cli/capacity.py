"""`rota capacity`: which nodes to buy, rent or retire for a job list (docs/capacity.md)."""

from __future__ import annotations

import contextlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer
import yaml
from rich.table import Table

from planner.cli.common import err, one_line, out, progress_bar, styled
from planner.cli.simulate import REUSE_SOLVES_OPTION
from planner.errors import InputError
from planner.estimate.sensitivity import EstimatedCells, estimated_cells, pessimistic
from planner.export.ray_driver import connect_ray
from planner.formats.atomic import write_text_atomic
from planner.formats.catalogue import Catalogue, read_catalogue
from planner.formats.cluster import Cluster, cluster_to_dict
from planner.formats.coverage import missing_cells
from planner.formats.inputs import load_cluster, load_table
from planner.formats.trace import read_trace
from planner.modes.capacity import (
    Answer,
    Confirmed,
    Question,
    Screened,
    answer,
    check_catalogue,
    cluster_for,
    count_configurations,
    parse_target,
    recommend,
    rent_or_buy,
    simulate_all,
    union_cluster,
)
from planner.modes.generator import GeneratorConfig, JobGenerator
from planner.modes.simulate import SimulationConfig
from planner.modes.sweep_ray import connected
from planner.policies import check_reuse
from planner.rounds.engine import DEFAULT_ROUND_S

CAPACITY_FORMAT = "rota.capacity/v1"
DEFAULT_MAX_CONFIGS = 20_000


def capacity_command(
    jobs: Optional[Path] = typer.Option(None, "--jobs", help="Your job list (.csv/.json) or a Gavel .trace."),
    table: Path = typer.Option(..., "--table", "-t", help="Throughput table with rows for every candidate type."),
    cluster: str = typer.Option(..., "--cluster", "-c", help="The cluster you have (.yaml/.json)."),
    catalogue: Path = typer.Option(..., "--catalogue", help="Candidate node types and their prices (.yaml/.json)."),
    budget: Optional[float] = typer.Option(None, "--budget", help="Money to spend on added nodes (at most)."),
    power_budget_kw: Optional[float] = typer.Option(None, "--power-budget-kw", help="Power of added GPUs (kW)."),
    max_added_gpus: Optional[int] = typer.Option(
        None, "--max-added-gpus", min=0, help="Room for this many more GPUs, of all types together."
    ),
    target: Optional[str] = typer.Option(
        None, "--target", help="What to meet, e.g. 'avg_jct_h<=20' (avg_jct_h, p90_jct_h, makespan_h)."
    ),
    retire: bool = typer.Option(False, "--retire", help="Also consider removing nodes you have."),
    rent_months: Optional[float] = typer.Option(
        None, "--rent-months", help="Price added nodes as rented for this many months instead of bought."
    ),
    policy: str = typer.Option("max_min_fairness_perf", "--policy", "-p", help="The policy you schedule with."),
    round_s: float = typer.Option(DEFAULT_ROUND_S, "--round-length", help="Round length in seconds."),
    reuse_solves: int = REUSE_SOLVES_OPTION,
    top: int = typer.Option(10, "--top", help="How many of the best-screened configurations to simulate."),
    workers: int = typer.Option(0, "--workers", help="Processes for the simulations (0: one per core)."),
    ray_address: Optional[str] = typer.Option(
        None,
        "--ray",
        help="Run the simulations as Ray tasks on the cluster at this address ('auto': RAY_ADDRESS or the one "
        "on this machine); needs the ray extra.",
    ),
    max_configs: int = typer.Option(
        DEFAULT_MAX_CONFIGS,
        "--max-configs",
        min=1,
        help="Screen every configuration up to this many; beyond, this many chosen by a multi-objective "
        "search (Optuna's NSGA-II, seeded).",
    ),
    search_seed: int = typer.Option(0, "--search-seed", min=0, help="Seed of the sampled search."),
    num_jobs: Optional[int] = typer.Option(
        None, "--num-jobs", min=1, max=100_000, help="Instead of --jobs: this many jobs from Gavel's generator."
    ),
    rate: float = typer.Option(0.0, "--rate", min=0.0, help="With --num-jobs: arrivals per hour (0: all at t = 0)."),
    multi_gpu: bool = typer.Option(False, "--multi-gpu", help="With --num-jobs: scale factors 1/2/4/8."),
    seeds: int = typer.Option(
        1, "--seeds", min=1, max=100, help="With --num-jobs: simulate each configuration on this many job lists."
    ),
    out_dir: Path = typer.Option(Path("capacity"), "--out", "-o", help="Folder for capacity.json and the cluster."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw cost against JCT (.png or .svg)."),
    as_json: bool = typer.Option(False, "--json", help="Print the capacity document as JSON."),
):
    """Which nodes to buy, rent or retire: screen every configuration, simulate the best, recommend one.

    Every configuration is your cluster plus (with --retire, minus) whole nodes of the catalogue's
    node types, within each type's max_nodes, the --budget and the --power-budget-kw. Each is
    screened by the policy's steady-state allocation (milliseconds), the --top best and your
    cluster as it is are simulated in full, and the Pareto front of cost against average JCT is
    printed with the recommendation: the cheapest that meets --target, or the lowest average JCT.
    OUT/capacity.json holds every configuration; OUT/recommended_cluster.yaml is ready for plan.

    Example:

        rota capacity --jobs data/examples/lab/jobs.csv --table data/gavel/simulation_throughputs.csv \\
            --cluster data/examples/lab/cluster.yaml --catalogue data/examples/capacity/lab_catalogue.yaml \\
            --budget 150000 --round-length 1800 --plot capacity/pareto.png
    """
    question = Question(
        budget=_non_negative(budget, "--budget"),
        power_budget_kw=_non_negative(power_budget_kw, "--power-budget-kw"),
        target=None if target is None else parse_target(target),
        retire=retire,
        rent_months=_non_negative(rent_months, "--rent-months"),
        max_added_gpus=max_added_gpus,
    )
    if top < 1:
        raise InputError(f"must be at least 1, got {top}", field="--top")
    check_reuse(policy, reuse_solves)
    if not (math.isfinite(round_s) and round_s > 0):
        raise InputError(f"must be positive seconds, got {round_s}", field="--round-length")
    thr = load_table(table)
    spec = load_cluster(cluster)
    cat = read_catalogue(catalogue)
    check_catalogue(cat, spec, thr, question)
    n = count_configurations(cat, spec, question)
    job_lists = _job_lists(jobs, thr, union_cluster(cat, spec), num_jobs, rate, multi_gpu, seeds)
    job_list = job_lists[0]  # what the screen sees
    gaps = missing_cells(thr, job_list, union_cluster(cat, spec))
    if not as_json:
        for cells in gaps:
            err.print(styled("[yellow]warning:[/] ") + one_line(cells.describe()), highlight=False, soft_wrap=True)
    sim = SimulationConfig(policy=policy, round_s=round_s, reuse_solves=reuse_solves)
    n_workers = workers or os.cpu_count() or 1
    with contextlib.ExitStack() as stack:  # a Ray connection, when asked for, lives as long as the search
        ray = stack.enter_context(connected(ray_address, connect_ray)) if ray_address is not None else None
        with progress_bar("[bold]capacity", "{task.fields[best]}", hidden=as_json) as bar:
            screening = bar.add_task("screen", total=min(n, max_configs), best="")
            bisecting = top if question.target is not None else 0  # the target's search along the front
            simulating = bar.add_task("simulate", total=(top + 1 + bisecting) * seeds, best="")

            def screened(done: int, s: Screened) -> None:
                bar.update(screening, completed=done, best=f"screened {done:,}")

            lowest: list[float] = []

            def confirmed(done: int, c: Confirmed) -> None:
                if c.avg_jct_h is not None:
                    lowest[:] = [min([*lowest, c.avg_jct_h])]
                best = f"simulated {done}" + (f", best so far {lowest[0]:.2f} h" if lowest else "")
                bar.update(simulating, completed=done, best=best)

            result = answer(
                job_list,
                thr,
                cat,
                spec,
                question,
                sim,
                top=top,
                workers=n_workers,
                max_screened=max_configs,
                seed=search_seed,
                job_lists=job_lists,
                ray=ray,
                on_screened=screened,
                on_confirmed=confirmed,
            )
        estimated = estimated_cells(thr, job_list, union_cluster(cat, spec).names)
        sensitivity = None
        if estimated:  # the answer rests on estimates: ask it again with each at the pessimistic end of its error
            pessimistic_runs = simulate_all(
                [c.config for c in result.confirmed],
                job_lists,
                pessimistic(thr),
                cat,
                spec,
                sim,
                workers=n_workers,
                ray=ray,
            )
            pessimistic_pick = recommend(pessimistic_runs, _by_config(result), question)
            sensitivity = Sensitivity(estimated, pessimistic_runs, *pessimistic_pick)
    document = capacity_document(
        result,
        cat,
        spec,
        question,
        inputs=[jobs if jobs is not None else f"generated: {num_jobs} jobs, {rate:g}/h, seeds 0-{seeds - 1}"]
        + [table, cluster, catalogue],
        gaps=gaps,
        sensitivity=sensitivity,
        reuse_solves=reuse_solves,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / "capacity.json", json.dumps(document, indent=1) + "\n")
    written = [out_dir / "capacity.json"]
    if result.recommended is not None:
        chosen = cluster_for(cat, result.recommended.config, spec)
        text = yaml.safe_dump(cluster_to_dict(chosen, name="recommended"), sort_keys=False)
        header = f"# rota capacity: {result.recommended.config.label(cat)} ({result.why})\n"
        write_text_atomic(out_dir / "recommended_cluster.yaml", header + text)
        written.append(out_dir / "recommended_cluster.yaml")
    if plot is not None:
        from planner.report.capacity_figure import plot_capacity

        plot_capacity(result, cat, plot, title=f"{len(job_list)} jobs, {policy}")
        written.append(plot)
    if as_json:
        out.print_json(json.dumps(document))
        return
    _print(result, cat, question, written, sensitivity)


@dataclass
class Sensitivity:
    """The simulated configurations again, with every estimated throughput at its p90 error."""

    cells: list[EstimatedCells]
    runs: list[Confirmed]
    recommended: Confirmed | None
    why: str

    def avg_jct_h(self, config) -> float | None:
        return next((c.avg_jct_h for c in self.runs if c.config == config), None)


def _by_config(result: Answer) -> dict:
    return {s.config: s for s in result.screened}


def _job_lists(jobs, thr, union, num_jobs, rate, multi_gpu, seeds) -> list[list]:
    """The job list, or one generated list per seed (0, 1, ...)."""
    if (jobs is None) == (num_jobs is None):
        raise InputError("give either --jobs or --num-jobs (with --rate, --seeds)", field="--jobs")
    if jobs is not None:
        if seeds != 1:
            raise InputError("a job list simulates the same way every time; --seeds needs --num-jobs", field="--seeds")
        return [read_trace(jobs, thr, union)]
    assert num_jobs is not None
    lists = []
    for seed in range(seeds):
        generated = JobGenerator(thr, GeneratorConfig(seed=seed, rate_per_hour=rate, multi_gpu=multi_gpu))
        lists.append(generated.take(num_jobs))
    return lists


def _utilisation(shares: dict[str, float]) -> str:
    """'34: a100 40, l4 20': all GPUs, then per worker type (percent of the run)."""
    per_type = ", ".join(f"{w} {100 * u:.0f}" for w, u in shares.items() if w != "all")
    return f"{100 * shares.get('all', 0.0):.0f}" + (f": {per_type}" if per_type else "")


def _sampled(result: Answer) -> str:
    if result.sampled_from is None:
        return ""
    return f" (of {result.sampled_from:,} within max_nodes, chosen by NSGA-II)"


def _non_negative(value: Optional[float], option: str) -> Optional[float]:
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise InputError(f"must be a non-negative number, got {value}", field=option)
    return value


def _hours(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _print(
    result: Answer, cat: Catalogue, question: Question, written: list[Path], sensitivity: Sensitivity | None
) -> None:
    screened = {s.config: s for s in result.screened}
    rows = Table(title="Pareto-optimal configurations (simulated)", title_justify="left")
    columns = ["configuration", "cost", "power kW", "avg JCT h", "p90 JCT h", "makespan h", "util %", "screen h"]
    runs = max((c.runs for c in result.confirmed), default=1)
    if runs > 1:
        columns.insert(4, "± seeds")  # max - min of the seeds' average JCTs
    if sensitivity is not None:
        columns.append("pessimistic h")  # avg JCT with every estimate at its p90 error
    for column in columns:
        rows.add_column(column, justify="left" if column == "configuration" else "right")
    front = [c for c in result.confirmed if c.config in set(result.front)]
    front.sort(key=lambda c: (screened[c.config].cost or 0.0, c.avg_jct_h or math.inf))
    for c in front:
        s = screened[c.config]
        mark = " ★" if result.recommended is not None and c.config == result.recommended.config else ""
        rows.add_row(
            c.config.label(cat) + mark,
            _money(s.cost),
            "-" if s.power_kw is None else f"{s.power_kw:.1f}",
            _hours(c.avg_jct_h),
            *([_hours(c.avg_jct_spread_h)] if runs > 1 else []),
            _hours(c.p90_jct_h),
            _hours(c.makespan_h),
            _utilisation(c.utilisation),
            _hours(s.est_avg_jct_h),
            *([] if sensitivity is None else [_hours(sensitivity.avg_jct_h(c.config))]),
        )
    out.print(rows)
    finite = sum(math.isfinite(s.est_avg_jct_h) for s in result.screened)
    out.print(
        f"screened {len(result.screened):,} configurations{_sampled(result)} "
        f"({len(result.screened) - finite} leave a job nowhere to run), simulated {len(result.confirmed)}"
    )
    if cat.note:
        out.print(f"prices: {cat.note}", highlight=False)
    if result.recommended is None:
        out.print(f"no recommendation: {result.why}")
    else:
        rec = result.recommended
        line = f"recommended: {rec.config.label(cat)} — {result.why}"
        base = result.current
        if base is not None and base.avg_jct_h and rec.avg_jct_h is not None and not rec.config.is_current:
            gain = 100 * (base.avg_jct_h - rec.avg_jct_h) / base.avg_jct_h
            line += f"; average JCT {base.avg_jct_h:.2f} h → {rec.avg_jct_h:.2f} h ({gain:.1f} % less) than today"
        out.print(line, highlight=False)
    if sensitivity is not None:
        for cells in sensitivity.cells:
            out.print(f"estimated: {cells.describe()}", highlight=False)
        if sensitivity.recommended is None:
            out.print(f"at the pessimistic end of the estimates: no recommendation ({sensitivity.why})")
        else:
            label = sensitivity.recommended.config.label(cat)
            same = result.recommended is not None and sensitivity.recommended.config == result.recommended.config
            verdict = "the same recommendation" if same else f"the recommendation changes to {label}"
            out.print(f"at the pessimistic end of the estimates: {verdict} ({sensitivity.why})", highlight=False)
    months = {k: v for k, v in rent_or_buy(cat).items() if v is not None}
    if months:
        text = ", ".join(f"{name} after {m:.1f} months" for name, m in months.items())
        out.print(f"buying beats renting: {text}", highlight=False)
    out.print("wrote " + ", ".join(str(p) for p in written), highlight=False)


def _screen_json(s: Screened) -> dict[str, Any]:
    def hours(v: float) -> float | None:
        return v if math.isfinite(v) else None

    return {
        "est_avg_jct_h": hours(s.est_avg_jct_h),
        "est_p90_jct_h": hours(s.est_p90_jct_h),
        "est_makespan_h": hours(s.est_makespan_h),
        "objective": s.objective,
        "utilisation": s.utilisation,
        "stranded_jobs": s.stranded,
    }


def capacity_document(
    result: Answer,
    cat: Catalogue,
    spec: Cluster,
    question: Question,
    *,
    inputs: list,
    gaps: list,
    sensitivity: Sensitivity | None = None,
    reuse_solves: int = 0,
) -> dict[str, Any]:
    confirmed = {c.config: c for c in result.confirmed}
    front = set(result.front)
    configs = []
    for s in result.screened:
        c = confirmed.get(s.config)
        configs.append(
            {
                "added_nodes": dict(zip(cat.names, s.config.added)),
                "label": s.config.label(cat),
                "cost": s.cost,
                "power_kw": s.power_kw,
                "gpus": s.gpus,
                "screen": _screen_json(s),
                "simulation": None
                if c is None
                else {
                    "status": c.status,
                    "avg_jct_h": c.avg_jct_h,
                    "p90_jct_h": c.p90_jct_h,
                    "makespan_h": c.makespan_h,
                    "utilisation": c.utilisation,
                    "jobs_finished": c.jobs_finished,
                    "seeds": c.runs,
                    "avg_jct_spread_h": c.avg_jct_spread_h,
                },
                "pareto": s.config in front,
                "pessimistic_avg_jct_h": None if sensitivity is None else sensitivity.avg_jct_h(s.config),
                "recommended": result.recommended is not None and s.config == result.recommended.config,
            }
        )
    return {
        "format": CAPACITY_FORMAT,
        "inputs": {k: str(v) for k, v in zip(("jobs", "table", "cluster", "catalogue"), inputs)},
        "question": {
            "budget": question.budget,
            "power_budget_kw": question.power_budget_kw,
            "target": None if question.target is None else str(question.target),
            "retire": question.retire,
            "rent_months": question.rent_months,
            "max_added_gpus": question.max_added_gpus,
        },
        "catalogue_note": cat.note,
        "sampled_from": result.sampled_from,
        "recommendation": None
        if result.recommended is None
        else {"label": result.recommended.config.label(cat), "why": result.why},
        "why": result.why,
        "rent_or_buy_break_even_months": rent_or_buy(cat),
        "missing_cells": [g.to_json() for g in gaps],
        "sensitivity": None
        if sensitivity is None
        else {
            "estimated_cells": [vars(c) for c in sensitivity.cells],
            "recommendation": None
            if sensitivity.recommended is None
            else {"label": sensitivity.recommended.config.label(cat), "why": sensitivity.why},
        },
        # only when given: the simulations reused solves (docs/simulation.md), not the reference's
        **({"simulation_options": {"reuse_solves": reuse_solves}} if reuse_solves else {}),
        "configurations": configs,
    }
