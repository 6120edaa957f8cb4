"""`rota simulate` and `rota trace generate`: Gavel's simulator and its job generator."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from planner.cli.common import (
    MAX_DURATION_H,
    MAX_ROUND_S,
    SOLVER_METHOD_HELP,
    check_method,
    err,
    hours,
    one_line,
    out,
    progress_bar,
    styled,
)
from planner.cli.jobs import MAX_SCALE_DEFAULT_OPTION, SCALE_EFFICIENCY_DEFAULT_OPTION
from planner.cli.round_length import AUTO, parse_round_length, round_length_option
from planner.errors import InputError
from planner.estimate.scaling import ScaleOptions, extend_for, read_trace_scaled
from planner.formats.atomic import write_text_atomic
from planner.formats.coverage import missing_cells, refuse_missing
from planner.formats.inputs import load_cluster, load_table
from planner.formats.trace import write_trace
from planner.modes.generator import (
    MAX_JOBS,
    MAX_RATE_PER_HOUR,
    MAX_SEED,
    GeneratorConfig,
    JobGenerator,
    check_rate,
)
from planner.modes.round_length import choose_for_simulation
from planner.modes.simulate import ROUND_LOOPS, SimulationConfig, Workload, run_simulation
from planner.modes.sweep import write_job_csv
from planner.modes.tenants import tenant_table
from planner.policies import MAX_REUSE_LIMIT, check_reuse
from planner.policies.lp import DEFAULT_METHOD
from planner.rounds.compiled import have_numba
from planner.rounds.engine import DEFAULT_ROUND_S

INCOMPLETE_EXIT = 3  # the run ended before its jobs were done: its summary is written, but is no answer
INTERRUPTED_EXIT = 130  # Ctrl-C, as a shell reports it


def check_round_loop(round_loop: str, gavel_compat: bool) -> None:
    if round_loop not in ROUND_LOOPS:
        raise InputError(
            f"unknown round loop {round_loop!r}; use one of {', '.join(ROUND_LOOPS)}", field="--round-loop"
        )
    if round_loop == "compiled" and not have_numba():
        raise InputError(
            "the compiled round loop needs numba: pip install 'rota[fast]' (or use --round-loop auto)",
            field="--round-loop",
        )
    if round_loop == "compiled" and not gavel_compat:
        raise InputError(
            "the compiled round loop runs Gavel-compat simulations only: add --gavel-compat, or use --round-loop auto",
            field="--round-loop",
        )


def finite(value: float | None) -> float | None:
    """Typer callback for float options: NaN and infinity are refused (a range check lets NaN pass)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def seed_option(help: str) -> Any:
    """A --seed option: 0 to 2^32 - 1 (a negative seed crashed numpy's generators)."""
    return typer.Option(0, "--seed", min=0, max=MAX_SEED, help=help)


# Shared with `rota plan`, `compare` and `sweep`; see docs/simulation.md, "Preemption cost".
RESTART_COST_OPTION = typer.Option(
    None,
    "--restart-cost",
    min=0.0,
    max=MAX_ROUND_S,
    callback=finite,
    help="Seconds every (re)start of a job on new GPUs costs, overriding the table's "
    "startup/checkpoint columns and the cluster's restart_s (default: those, else 0).",
)
REUSE_SOLVES_HELP = (
    "LAS (max_min_fairness, max_min_fairness_perf): while the set of job classes is the one last solved, "
    "give every job its class's share from that solve again instead of solving, at most N times in a row. "
    "Faster; the schedules move a little (docs/simulation.md, 'Speed'). Example: --reuse-solves 3"
)


def reuse_solves_option(default: int | None, default_text: str, before: str = "") -> Any:
    """--reuse-solves as a default-style option (one definition for simulate, plan, sweep and
    capacity; plan-next's Annotated form is REUSE_SOLVES_KEPT_OPTION in cli/plan.py)."""
    return typer.Option(
        default,
        "--reuse-solves",
        min=0,
        max=MAX_REUSE_LIMIT,
        metavar="N",
        help=before + REUSE_SOLVES_HELP + default_text,
    )


REUSE_SOLVES_OPTION = reuse_solves_option(0, " (default 0: off).")
STRICT_CELLS_OPTION = typer.Option(
    False,
    "--strict-cells",
    help="Refuse a trace whose job types have no table row on a worker type they would fit, or none at "
    "their scale factor (by default: a warning, and an estimate from the job type's other scale factors).",
)
# Shared with `rota compare`.
MAX_ACTIVE_OPTION = typer.Option(
    None,
    "--max-active",
    min=1,
    max=MAX_JOBS,
    help="Call the load saturated beyond this many jobs in the system (default 10 per GPU, at least 200).",
)
MAX_HOURS_OPTION = typer.Option(
    None,
    "--max-hours",
    min=0.0,
    max=MAX_DURATION_H,
    callback=finite,
    help="Stop after this much simulated time; an unfinished run is then reported as incomplete.",
)

MIGRATION_AWARE_OPTION = typer.Option(
    False,
    "--migration-aware",
    help="Keep a job on the worker type it holds unless the deficit it recovers by moving exceeds its restart cost.",
)


def parse_window(text: Optional[str]) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        start, end = (int(v) for v in text.split(":"))
    except ValueError:
        raise InputError(f"expected START:END job indices like 4000:5000, got {text!r}", field="--window") from None
    if not 0 <= start < end:
        raise InputError(f"window must satisfy 0 <= START < END, got {text!r}", field="--window")
    if end > MAX_JOBS:
        raise InputError(f"window END must be at most {MAX_JOBS} jobs, got {text!r}", field="--window")
    return start, end


def rate_option(help: str) -> Any:
    return typer.Option(0.0, "--rate", min=0.0, max=MAX_RATE_PER_HOUR, callback=finite, help=help)


def _generator(table, *, seed, rate, multi_gpu, multi_priority, slos, reference_type, fixed_duration_h):

    config = GeneratorConfig(
        seed=seed,
        rate_per_hour=rate,
        multi_gpu=multi_gpu,
        multi_priority=multi_priority,
        slos=slos,
        reference_type=reference_type,
        fixed_duration_s=None if fixed_duration_h is None else fixed_duration_h * 3600.0,
    )
    return JobGenerator(table, config)


def trace_generate_command(
    table: Path = typer.Option(..., "--table", "-t", help="Throughput table (.csv/.parquet) or Gavel's JSON."),
    out_path: Path = typer.Option(..., "--out", "-o", help="Trace to write: .trace (Gavel), .csv or .json (rota)."),
    num_jobs: int = typer.Option(..., "--num-jobs", "-n", min=1, max=MAX_JOBS, help="Number of jobs to generate."),
    rate: float = rate_option("Poisson arrivals, jobs per hour; 0: static trace (all jobs at t = 0)."),
    seed: int = seed_option("Gavel Scheduler seed (job stream seed+2, arrivals seed+3)."),
    multi_gpu: bool = typer.Option(False, "--multi-gpu", help="Draw scale factors 1/2/4/8 (70/10/15/5 %)."),
    multi_priority: bool = typer.Option(False, "--multi-priority", help="20 % of jobs get priority weight 5."),
    slos: bool = typer.Option(False, "--slos", help="Give each job a deadline: 1.2x, 2x or 10x its duration."),
    reference_type: Optional[str] = typer.Option(
        None, "--reference-type", help="Worker type durations refer to (default v100)."
    ),
    fixed_duration_h: Optional[float] = typer.Option(
        None,
        "--duration-h",
        min=0.0,
        max=MAX_DURATION_H,
        callback=finite,
        help="Fixed duration in hours instead of Philly-like draws.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
):
    """Generate a job trace with Gavel's generator (same seed, same jobs as Gavel).

    Example: rota trace generate --table simulation_throughputs.json --num-jobs 1000
    --rate 2.0 --multi-gpu --seed 0 --out jobs.trace
    """

    check_rate(rate, field="--rate")
    thr = load_table(table)
    gen = _generator(
        thr,
        seed=seed,
        rate=rate,
        multi_gpu=multi_gpu,
        multi_priority=multi_priority,
        slos=slos,
        reference_type=reference_type,
        fixed_duration_h=fixed_duration_h,
    )
    jobs = gen.take(num_jobs)
    write_trace(jobs, out_path, thr)
    scales: dict[int, int] = {}
    for j in jobs:
        scales[j.scale_factor] = scales.get(j.scale_factor, 0) + 1
    durations = [gen.durations[j.job_id] for j in jobs]
    summary = {
        "trace": str(out_path),
        "jobs": len(jobs),
        "seed": seed,
        "rate_per_hour": rate,
        "last_arrival_h": jobs[-1].arrival_s / 3600,
        "mean_duration_h": sum(durations) / len(durations) / 3600,
        "scale_factors": {str(k): v for k, v in sorted(scales.items())},
        "reference_type": gen.reference_type,
    }
    if as_json:
        out.print_json(json.dumps(summary))
        return
    mix = ", ".join(f"{v} x{k}" for k, v in summary["scale_factors"].items())
    out.print(
        f"wrote {out_path}: {len(jobs)} jobs ({mix} GPUs), arrivals over "
        f"{summary['last_arrival_h']:.1f} h, mean duration {summary['mean_duration_h']:.1f} h "
        f"on {gen.reference_type}"
    )


def simulate_command(
    table: Path = typer.Option(..., "--table", "-t", help="Throughput table (.csv/.parquet) or Gavel's JSON."),
    cluster: str = typer.Option(
        ..., "--cluster", "-c", help="Cluster file (.yaml/.json) or inline: 36:36:36 (v100:p100:k80), v100=4,k80=8."
    ),
    policy: str = typer.Option("max_min_fairness_perf", "--policy", "-p", help="Policy name (see 'rota policies')."),
    decision_table: Optional[Path] = typer.Option(
        None,
        "--decision-table",
        help="Table the policy decides on (e.g. from 'rota table estimate'); jobs progress at --table's throughputs.",
    ),
    trace: Optional[Path] = typer.Option(
        None, "--trace", help="Replay a Gavel .trace or a rota job list (.csv/.json)."
    ),
    num_jobs: Optional[int] = typer.Option(
        None, "--num-jobs", "-n", min=1, max=MAX_JOBS, help="Generate this many jobs (with --rate 0: a static trace)."
    ),
    rate: float = rate_option("Generated arrivals, jobs per hour (0: all at t = 0)."),
    window: Optional[str] = typer.Option(
        None,
        "--window",
        "-w",
        help="Measure jobs START:END (arrival order), e.g. 4000:5000; "
        "an endless generated trace stops when they are done.",
    ),
    seed: int = seed_option("Gavel Scheduler seed: jobs, arrivals, shuffles, random policies."),
    multi_gpu: bool = typer.Option(False, "--multi-gpu", help="Generated jobs use 1/2/4/8 GPUs."),
    multi_priority: bool = typer.Option(False, "--multi-priority", help="20 % of generated jobs get weight 5."),
    round_length: str = round_length_option(),
    gavel_compat: bool = typer.Option(
        False,
        "--gavel-compat",
        help="Gavel's quirks: 1920 s between re-solves, new jobs wait for a re-solve, "
        "v100-p100-k80 visiting order, execution time from the previous round's end.",
    ),
    resolve_interval: Optional[float] = typer.Option(
        None,
        "--resolve-interval",
        min=0.0,
        max=MAX_ROUND_S,
        callback=finite,
        help="Minimum seconds between re-solves (default 0, or 1920 with --gavel-compat).",
    ),
    method: str = typer.Option(DEFAULT_METHOD, "--solver-method", help=SOLVER_METHOD_HELP),
    no_aggregate: bool = typer.Option(False, "--no-aggregate", help="One LP row per job instead of per class."),
    round_loop: str = typer.Option(
        "auto",
        "--round-loop",
        help="auto: with --gavel-compat, run the rounds between two events compiled when numba is "
        "installed (pip install 'rota\\[fast]'; the same results, 2-3x less time outside the solver); "
        "python: always the reference loop; compiled: as auto, and refuse to run without numba or "
        "--gavel-compat. Sweeps, compare and capacity use auto.",
    ),
    reuse_solves: int = REUSE_SOLVES_OPTION,
    with_rho: bool = typer.Option(
        False, "--rho", help="Also run 'isolated' on the same trace for rho = JCT / JCT_isolated."
    ),
    max_active: Optional[int] = MAX_ACTIVE_OPTION,
    max_hours: Optional[float] = MAX_HOURS_OPTION,
    restart_cost: Optional[float] = RESTART_COST_OPTION,
    migration_aware: bool = MIGRATION_AWARE_OPTION,
    max_scale: float = MAX_SCALE_DEFAULT_OPTION,
    scale_efficiency: Optional[float] = SCALE_EFFICIENCY_DEFAULT_OPTION,
    strict_cells: bool = STRICT_CELLS_OPTION,
    out_dir: Path = typer.Option(Path("out/simulation"), "--out", "-o", help="Folder for jobs.csv and summary.json."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary JSON instead of tables."),
):
    """Simulate a policy on a trace: replay a file or generate jobs on the fly (Gavel's simulator).

    A run that ends before its jobs are done (saturated, --max-hours, Ctrl-C) is incomplete:
    it reports how many jobs finished and a lower bound on the average JCT, never an average
    JCT, and exits with status 3 (130 on Ctrl-C) after writing its summary.

    Example: rota simulate --table simulation_throughputs.json --cluster 36:36:36
    --policy max_min_fairness_perf --rate 2.4 --window 4000:5000 --gavel-compat --out sim/
    """

    round_choice = parse_round_length(round_length)
    check_method(method)
    check_round_loop(round_loop, gavel_compat)
    check_reuse(policy, reuse_solves, not no_aggregate)
    check_rate(rate, field="--rate")
    thr = load_table(table)
    decide = None if decision_table is None else load_table(decision_table)
    spec = load_cluster(cluster)
    if trace is not None and num_jobs is not None:
        raise InputError("give either --trace or generator options (--num-jobs / --rate), not both", field="--trace")

    scaled, missing = None, []
    if trace is not None:
        scaled, missing, decide = _read_replayed(
            trace, thr, decide, spec, ScaleOptions(max_scale, scale_efficiency, strict=strict_cells), quiet=as_json
        )
        thr = scaled.table  # with rows estimated for missing scale factors: the simulation's truth for them
    trace_jobs = None if scaled is None else scaled.jobs

    def workload():
        if trace_jobs is not None:
            return Workload(jobs=list(trace_jobs), description={"trace": str(trace)})
        if num_jobs is None and window is None:
            raise InputError(
                "give a --trace, a number of jobs (--num-jobs) or a --window for an endless generated trace",
                field="--num-jobs",
            )
        gen = _generator(
            thr,
            seed=seed,
            rate=rate,
            multi_gpu=multi_gpu,
            multi_priority=multi_priority,
            slos=False,
            reference_type=None,
            fixed_duration_h=None,
        )
        return Workload(
            generator=gen, num_jobs=num_jobs, description={"generator": asdict(gen.config), "num_jobs": num_jobs}
        )

    config = SimulationConfig(
        policy=policy,
        round_s=DEFAULT_ROUND_S if round_choice == AUTO else round_choice,
        gavel_compat=gavel_compat,
        seed=seed,
        window=parse_window(window),
        resolve_interval_s=resolve_interval,
        solver_method=method,
        aggregate=not no_aggregate,
        max_active_jobs=max_active,
        max_time_s=None if max_hours is None else max_hours * 3600.0,
        restart_cost_s=restart_cost,
        migration_aware=migration_aware,
        round_loop=round_loop,
        reuse_solves=reuse_solves,
    )
    if trace_jobs is not None and not as_json:
        warn_overload(workload(), thr, spec)
    auto = None
    if round_choice == AUTO:
        auto = choose_for_simulation(thr, spec, workload(), config, decision_table=decide)
        config = replace(config, round_s=auto.round_s)
        if not as_json:
            out.print(auto.reason, soft_wrap=True)  # one line, as logs grep it
    reference = None
    if with_rho:
        iso = SimulationConfig(**{**asdict(config), "policy": "isolated", "reuse_solves": 0})
        ref = _run_with_progress(thr, spec, workload(), iso, "isolated (rho reference)", quiet=as_json)
        reference = {r["job_id"]: r["jct_s"] for r in ref.jobs if r["jct_s"] is not None}
    result = _run_with_progress(
        thr, spec, workload(), config, policy, quiet=as_json, reference=reference, decision_table=decide, stop=True
    )
    estimated = [] if scaled is None else scaled.to_json()
    inputs = summary_inputs(table, cluster, trace, decision_table)
    _report(result, inputs, missing, estimated, auto, policy, out_dir, as_json)


def _read_replayed(trace: Path, thr, decide, spec, scaling: ScaleOptions, *, quiet: bool):
    """The trace's jobs (with scale factors the table lacks estimated), the missing cells, and the
    decision table extended the same way; warnings said once each (--strict-cells: refused)."""
    scaled = read_trace_scaled(trace, thr, spec, scaling)
    if scaled.estimates and decide is not None:
        decide = extend_for(decide, [e.job_type for e in scaled.estimates], spec, scaling).table
    missing = missing_cells(scaled.table, scaled.jobs, spec)
    if scaling.strict:
        refuse_missing(missing, thr.path)
    if not quiet:  # a job type that silently never runs on some GPUs would bend every measure
        for line in [*scaled.warnings, *(c.describe() for c in missing)]:
            err.print(styled("[yellow]warning:[/] ") + one_line(line), highlight=False, soft_wrap=True)
    return scaled, missing, decide


def summary_inputs(table, cluster, trace, decision_table) -> dict:
    return {
        "table": str(table),
        "cluster": cluster,
        "trace": None if trace is None else str(trace),
        "decision_table": None if decision_table is None else str(decision_table),
    }


def _report(result, inputs: dict, missing, estimated, auto, policy: str, out_dir: Path, as_json: bool) -> None:
    """Write jobs.csv and summary.json, print the summary; an incomplete run exits non-zero."""
    summary = {
        "format": "rota.simulation/v1",
        "status": result.status,
        "complete": result.status == "ok",
        "reason": result.reason,
        "inputs": inputs,
        "config": result.config,
        "workload": result.workload,
        "metrics": result.metrics,
        "missing_cells": [cells.to_json() for cells in missing],
        "estimated_scale_factors": estimated,
    }
    if auto is not None:
        summary["round_length"] = auto.to_json()
    write_job_csv(result.jobs, out_dir / "jobs.csv")
    write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=1, default=str) + "\n")
    if as_json:
        out.print_json(json.dumps(summary, default=str))
    else:
        _print_summary(result, policy, out_dir)
    if result.status != "ok":
        raise typer.Exit(INTERRUPTED_EXIT if result.status == "interrupted" else INCOMPLETE_EXIT)


def warn_overload(workload: Workload, thr, spec) -> None:
    """Say so when a replayed trace offers more work than the cluster serves while it arrives."""
    load = workload.offered_load(thr, spec)
    if load >= 1.0:
        err.print(
            styled("[yellow]warning:[/] ")
            + f"the trace offers {load:.2f} of the cluster's GPU time while its jobs arrive (>= 1): "
            "jobs back up, and the run may saturate (--max-active)",
            highlight=False,
            soft_wrap=True,
        )


def _run_with_progress(thr, spec, workload, config, label, *, quiet, reference=None, decision_table=None, stop=False):
    with progress_bar(
        f"[bold]{escape(label)}[/]",
        "window jobs done, {task.fields[sim_h]:.0f} h simulated, {task.fields[active]} active, "
        "{task.fields[rounds]} rounds",
        hidden=quiet,
    ) as bar:
        task = bar.add_task("simulate", total=None, sim_h=0.0, active=0, rounds=0)

        def progress(now, done, total, active, rounds):
            bar.update(task, completed=done, total=total or None, sim_h=now / 3600, active=active, rounds=rounds)

        return run_simulation(
            thr,
            spec,
            workload,
            config,
            progress=progress,
            reference_jct=reference,
            decision_table=decision_table,
            stop_on_interrupt=stop,
        )


def _print_summary(result, policy: str, out_dir: Path) -> None:
    m = result.metrics
    if result.status == "ok":
        status = styled("[green]ok[/]")
    else:
        status = styled("[bold red]incomplete, {}[/]: {}", result.status, result.reason)
    if "window" not in m or m["window"] is None or "makespan_s" not in m:  # saturated before running
        out.print(styled("policy [bold]{}[/]: ", policy) + status)
        out.print(f"wrote {out_dir / 'summary.json'}")
        return
    start, end = m["window"]
    measured = f"; jobs {start}-{end - 1} measured, {m['window_finished']} finished"
    out.print(styled("policy [bold]{}[/]: ", policy) + status + measured)
    grid = Table(title="results" if result.status == "ok" else "results of an incomplete run (not the answer)")
    grid.add_column("metric")
    grid.add_column("value", justify="right")
    if "jct_s" in m:
        jct = m["jct_s"]
        grid.add_row("average JCT", f"{hours(jct['mean'])} h")
        grid.add_row("p50 / p90 / p99 JCT", f"{hours(jct['p50'])} / {hours(jct['p90'])} / {hours(jct['p99'])} h")
    else:
        cens = m["censored_jct"]
        bound = cens["mean_lower_bound_s"]
        grid.add_row("jobs finished", f"{cens['finished']} of {cens['window_jobs']}")
        grid.add_row("average JCT, lower bound", "-" if bound is None else f">= {hours(bound)} h")
        done = cens["finished_only_s"]["mean"]
        grid.add_row("finished jobs only (biased low)", "-" if done is None else f"{hours(done)} h")
    grid.add_row("makespan (end of simulation)", f"{hours(m['makespan_s'])} h")
    if m.get("idle_after_finish_gpu_s"):
        grid.add_row("idle after mid-round finish", f"{hours(m['idle_after_finish_gpu_s'])} GPU-h")
    for w, u in m["utilisation"].items():
        grid.add_row(f"utilisation {w}", f"{u * 100:.1f} %")
    rate = m["lease_extension_rate"]
    grid.add_row(
        "lease extensions",
        "-" if rate is None else f"{rate * 100:.1f} % ({m['lease_extensions']}/{m['lease_opportunities']})",
    )
    if "rho" in m:
        r = m["rho"]
        grid.add_row(
            "rho mean / p90 / max", "-" if r["mean"] is None else f"{r['mean']:.3f} / {r['p90']:.3f} / {r['max']:.3f}"
        )
    if "restarts" in m:
        goodput = "-" if m["goodput"] is None else f"{m['goodput'] * 100:.1f} %"
        grid.add_row("restarts / GPU time lost", f"{m['restarts']} / {hours(m['restart_gpu_s'])} GPU-h")
        grid.add_row("goodput", goodput)
    grid.add_row("re-solves / solver time", f"{m['resolves']} / {m['solver_s']:.2f} s")
    grid.add_row("rounds / wall time", f"{m['rounds']} / {m['wall_s']:.2f} s")
    out.print(grid)
    if m.get("tenants"):
        out.print(tenant_table(m["tenants"], title="tenants (GPU time and JCT)"))
    out.print(f"wrote {out_dir / 'jobs.csv'} and {out_dir / 'summary.json'}")
