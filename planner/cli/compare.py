"""`rota compare`: which policy, and how much better, on my own jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.table import Table

from planner.cli.common import SOLVER_METHOD_HELP, check_method, err, one_line, out, progress_bar, styled
from planner.cli.jobs import MAX_SCALE_DEFAULT_OPTION, SCALE_EFFICIENCY_DEFAULT_OPTION
from planner.cli.round_length import AUTO, parse_round_length, round_length_option
from planner.cli.simulate import (
    INCOMPLETE_EXIT,
    MAX_ACTIVE_OPTION,
    MAX_HOURS_OPTION,
    MIGRATION_AWARE_OPTION,
    RESTART_COST_OPTION,
    seed_option,
)
from planner.errors import InputError
from planner.estimate.scaling import ScaleOptions, read_trace_scaled
from planner.formats.atomic import write_text_atomic
from planner.formats.inputs import load_cluster, load_table
from planner.modes.compare import AWARE_VERSION, OBJECTIVES, Comparison, compare_policies, default_policies
from planner.policies.lp import DEFAULT_METHOD
from planner.report.compare_figure import plot_comparison
from planner.rounds.engine import DEFAULT_ROUND_S


def compare_command(
    jobs: Path = typer.Option(..., "--jobs", help="Your job list (.csv/.json) or a Gavel .trace."),
    cluster: str = typer.Option(..., "--cluster", "-c", help="Cluster file (.yaml/.json) or inline, e.g. 4:4:4."),
    table: Path = typer.Option(..., "--table", "-t", help="Throughput table (.csv/.parquet) or Gavel's JSON."),
    policies: Optional[str] = typer.Option(
        None,
        "--policies",
        "-p",
        help="Comma-separated policies (default: FIFO, LAS, FTF and makespan, each agnostic and aware, "
        "plus packed LAS when the table has co-location rows).",
    ),
    objective: str = typer.Option("jct", "--objective", help="What the recommendation minimises: jct, makespan, cost."),
    seed: int = seed_option("Seed for randomised policies."),
    round_length_text: str = round_length_option("Round length in seconds (auto: chosen per policy)"),
    method: str = typer.Option(DEFAULT_METHOD, "--solver-method", help=SOLVER_METHOD_HELP),
    gavel_compat: bool = typer.Option(False, "--gavel-compat", help="Gavel's quirks (see 'rota simulate --help')."),
    restart_cost: Optional[float] = RESTART_COST_OPTION,
    migration_aware: bool = MIGRATION_AWARE_OPTION,
    max_active: Optional[int] = MAX_ACTIVE_OPTION,
    max_hours: Optional[float] = MAX_HOURS_OPTION,
    max_scale: float = MAX_SCALE_DEFAULT_OPTION,
    scale_efficiency: Optional[float] = SCALE_EFFICIENCY_DEFAULT_OPTION,
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw the comparison (.png or .svg)."),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write the comparison as JSON."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON instead of tables."),
):
    """Simulate your job list under several policies and recommend one.

    Prints average / p50 / p90 JCT, makespan, utilisation, restarts, goodput and GPU cost per
    policy, how much faster each heterogeneity-aware policy is than its agnostic version, and
    which policy to use with the reason. A policy whose run ended early (saturated, --max-hours)
    is marked with why, how many jobs finished and a lower bound on its average JCT, and is never
    recommended; when no policy finishes, the command exits with status 3.

    Example: rota compare --jobs data/jobs.csv --cluster data/cluster.yaml --table data/throughputs.csv

    Restarts cost 120 s, jobs kept where a move does not pay: add --restart-cost 120 --migration-aware
    """
    check_method(method)
    round_s = parse_round_length(round_length_text)
    named = _policies(policies) if policies is not None else None
    thr = load_table(table)
    spec = load_cluster(cluster)
    read = read_trace_scaled(jobs, thr, spec, ScaleOptions(max_scale, scale_efficiency))
    thr, job_list = read.table, read.jobs
    if not as_json:
        for line in read.warnings:
            err.print(styled("[yellow]warning:[/] ") + one_line(line), highlight=False, soft_wrap=True)
    chosen = named if named is not None else default_policies(thr, spec)
    with progress_bar("[bold]compare[/]", "policies {task.fields[last]}", hidden=as_json) as bar:
        task = bar.add_task("compare", total=len(chosen), last="")
        result = compare_policies(
            thr,
            spec,
            job_list,
            chosen,
            objective=_objective(objective),
            seed=seed,
            round_s=DEFAULT_ROUND_S if round_s == AUTO else round_s,
            round_auto=round_s == AUTO,
            method=method,
            gavel_compat=gavel_compat,
            restart_cost_s=restart_cost,
            migration_aware=migration_aware,
            max_active_jobs=max_active,
            max_time_s=None if max_hours is None else max_hours * 3600.0,
            on_policy=lambda o, done, total: bar.update(task, completed=done, last=o.policy),
        )
    document = {**result.to_json(), "estimated_scale_factors": read.to_json()}
    title = f"{len(job_list)} jobs from {jobs.name} on {_cluster_text(spec)}"
    if out_path is not None:
        write_text_atomic(out_path, json.dumps(document, indent=1) + "\n")
    if plot is not None:
        plot_comparison(result, plot, title=title)
    if as_json:
        out.print_json(json.dumps(document))
    else:
        _print(result, title)
        for path in (out_path, plot):
            if path is not None:
                out.print(f"wrote {path}")
    if not any(o.status == "ok" for o in result.outcomes):
        raise typer.Exit(INCOMPLETE_EXIT)


MAX_POLICIES = 100  # --policies: each is one whole simulation of the job list


def _policies(text: str) -> list[str]:
    """--policies as a list: not empty, no name twice, at most MAX_POLICIES."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise InputError("the list is empty: give at least one policy", field="--policies")
    if len(names) > MAX_POLICIES:
        raise InputError(f"{len(names)} policies; at most {MAX_POLICIES}", field="--policies")
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise InputError(f"{twice!r} is given twice", field="--policies")
    return names


def _objective(text: str):
    if text not in OBJECTIVES:
        raise InputError(f"unknown objective {text!r}; use one of {', '.join(OBJECTIVES)}", field="--objective")
    return text


def _cluster_text(spec) -> str:
    return ", ".join(f"{spec.capacity(w)} {w}" for w in spec.names)


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.3g}"


def _print(result: Comparison, title: str) -> None:
    # Compact box: the table fits 80 columns, the width of a pipe or a CI log.
    priced = any(o.cost is not None for o in result.outcomes)  # inline clusters have no prices
    counted = any(o.restarts is not None for o in result.outcomes)
    charged = counted and result.restart_note is None  # restarts counted at 0 s lose nothing: no goodput
    legend = ["times in hours"] + (["starts: (re)starts on new GPUs"] if counted else [])
    legend += (["good: goodput"] if charged else []) + ["* recommended"]
    grid = Table(title=title, caption="; ".join(legend), box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    # 80 columns hold eight: with restart columns p50 gives way (it is in --json and --out).
    columns = ["policy", "avg JCT", *([] if charged else ["p50"]), "p90", "makespan", "util"]
    columns += (["starts"] if counted else []) + (["good"] if charged else []) + (["GPU $"] if priced else [])
    for column in columns:
        grid.add_column(column, justify="left" if column == "policy" else "right", no_wrap=True)
    for o in result.outcomes:
        name = styled("[bold]{}*[/]", o.policy) if o.policy == result.recommended else o.policy
        if o.status != "ok":
            bound = "" if o.jct_lower_bound_s is None else f">= {_hours(o.jct_lower_bound_s)}"
            grid.add_row(name, bound, styled("[red]{}[/]", o.status))
            continue
        cells = [_hours(o.jct_mean_s), *([] if charged else [_hours(o.jct_p50_s)])]
        cells += [_hours(o.jct_p90_s), _hours(o.makespan_s)]
        cells.append("-" if o.utilisation is None else f"{100 * o.utilisation:.0f} %")
        if counted:
            cells.append("-" if o.restarts is None else str(o.restarts))
        if charged:
            cells.append("-" if o.goodput is None else f"{100 * o.goodput:.0f} %")
        if priced:
            cells.append("-" if o.cost is None else f"{o.cost:,.0f}")
        grid.add_row(name, *cells)
    out.print(grid)
    _print_findings(result)


def _print_findings(result: Comparison) -> None:
    """What follows the table: why policies could not run, the heterogeneity ratios, the round
    lengths, the restart note and the recommendation."""
    for o in result.outcomes:
        if o.status == "cannot run" and o.reason:
            out.print(f"{o.policy}: {o.reason}", highlight=False, soft_wrap=True)
        elif o.status != "ok":
            bound = "" if o.jct_lower_bound_s is None else f"; average JCT at least {_hours(o.jct_lower_bound_s)} h"
            out.print(
                f"{o.policy}: incomplete, {o.status}: {o.reason}; {o.jobs_finished} of {result.n_jobs} jobs "
                f"finished{bound} (not a result)",
                highlight=False,
                soft_wrap=True,
            )
    agnostic_of = {aware: agnostic for agnostic, aware in AWARE_VERSION.items()}
    for aware, ratio in result.ratios.items():
        change = f"{ratio:.2f}x lower" if ratio >= 1 else f"{1 / ratio:.2f}x higher"
        out.print(f"{aware}: average JCT {change} than {agnostic_of[aware]} (heterogeneity-agnostic)", soft_wrap=True)
    lengths = {o.policy: o.round_s for o in result.outcomes if o.round_s is not None}
    if any(seconds != DEFAULT_ROUND_S for seconds in lengths.values()):
        shown = ", ".join(f"{policy} {seconds:g} s" for policy, seconds in lengths.items())
        out.print(f"round length: {shown}", highlight=False, soft_wrap=True)
    if result.restart_note:
        out.print(f"note: {result.restart_note}", highlight=False, soft_wrap=True)
    if result.recommended is None:
        out.print(styled("[bold red]no recommendation[/]: {}", result.reason))
    else:
        out.print(
            styled("recommended: [bold]{}[/] - {}", result.recommended, result.reason), highlight=False, soft_wrap=True
        )
