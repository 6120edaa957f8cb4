"""`rota sweep`: a grid of simulations (policies x loads x seeds), resumable, with plots."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.table import Table

from planner.cli.common import MAX_ROUND_S, SOLVER_METHOD_HELP, check_method, err, one_line, out, progress_bar, styled
from planner.cli.jobs import MAX_SCALE_DEFAULT_OPTION, SCALE_EFFICIENCY_DEFAULT_OPTION
from planner.cli.simulate import (
    MIGRATION_AWARE_OPTION,
    RESTART_COST_OPTION,
    finite,
    parse_window,
    reuse_solves_option,
)
from planner.errors import InputError
from planner.estimate.scaling import ScaleOptions, read_trace_scaled
from planner.export.ray_driver import connect_ray
from planner.formats.inputs import load_cluster, load_table
from planner.modes.sweep import (
    MAX_JOBS,
    MAX_WORKERS,
    SweepSpec,
    attach_rho,
    load_results,
    rate_grid,
    run_sweep,
    summary_rows,
    write_summary_csv,
)
from planner.modes.sweep_ray import connected
from planner.modes.sweep_results import RESULTS
from planner.modes.sweep_workers import SweepInterrupted
from planner.policies import POLICY_NAMES, check_tenants
from planner.policies.lp import DEFAULT_METHOD
from planner.report.sweep_figures import make_sweep_plots
from planner.rounds.engine import DEFAULT_ROUND_S


def sweep_command(
    table: Path = typer.Option(..., "--table", "-t", help="Throughput table (.csv/.parquet) or Gavel's JSON."),
    cluster: str = typer.Option(..., "--cluster", "-c", help="Cluster file or inline spec (36:36:36)."),
    policies: str = typer.Option(..., "--policies", "-p", help="Comma-separated policy names."),
    rates: Optional[str] = typer.Option(None, "--rates", help="Input rates (jobs/h): '0.4,0.8' or Gavel's LO:HI:K."),
    trace: Optional[Path] = typer.Option(
        None,
        "--trace",
        help="Replay this job list (.csv/.json) or Gavel .trace at every point instead of generating jobs.",
    ),
    static_jobs: Optional[str] = typer.Option(
        None, "--static-jobs", help="Static traces instead: numbers of jobs, e.g. 100,200,300."
    ),
    seeds: str = typer.Option("0", "--seeds", help="Comma-separated seeds."),
    window: Optional[str] = typer.Option(None, "--window", "-w", help="Measured jobs START:END (continuous sweeps)."),
    multi_gpu: bool = typer.Option(False, "--multi-gpu", help="Generated jobs use 1/2/4/8 GPUs."),
    multi_priority: bool = typer.Option(False, "--multi-priority", help="20 % of jobs get weight 5."),
    gavel_compat: bool = typer.Option(False, "--gavel-compat", help="Gavel's simulator quirks (see 'rota simulate')."),
    round_s: float = typer.Option(
        DEFAULT_ROUND_S,
        "--round-length",
        min=1.0,
        max=MAX_ROUND_S,
        callback=finite,
        help="Round length tau in seconds.",
    ),
    method: str = typer.Option(DEFAULT_METHOD, "--solver-method", help=SOLVER_METHOD_HELP),
    max_active: Optional[int] = typer.Option(
        None, "--max-active", min=1, max=MAX_JOBS, help="Saturation cap on jobs in the system."
    ),
    jobs: Optional[int] = typer.Option(
        None,
        "--workers",
        "--jobs",
        min=1,
        max=MAX_WORKERS,
        help="Simulations run at once: worker processes (default 1; never more than the points to run or "
        "this machine's CPUs), or Ray tasks in flight with --ray (default: one per cluster CPU); "
        "--jobs is the old name.",
    ),
    ray_address: Optional[str] = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS|auto",
        help="Run the points as tasks on this Ray cluster (auto: RAY_ADDRESS, else the one on this machine); "
        "needs the ray extra.",
    ),
    out_dir: Path = typer.Option(
        Path("out/sweep"), "--out", "-o", help="Folder: results.jsonl (resumable), jobs/*.csv, summary.csv, plots."
    ),
    plot_format: str = typer.Option("png", "--plot-format", help="png, svg or png,svg."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the plots."),
    cdf_rate: Optional[float] = typer.Option(
        None,
        "--cdf-rate",
        callback=finite,
        help="Input rate for the JCT CDF plot (default: the highest rate no policy saturates).",
    ),
    restart_cost: Optional[float] = RESTART_COST_OPTION,
    migration_aware: bool = MIGRATION_AWARE_OPTION,
    reuse_solves: int = reuse_solves_option(
        0, " (default 0).", before="For the LAS policies of the grid (the others solve every time): "
    ),
    max_scale: float = MAX_SCALE_DEFAULT_OPTION,
    scale_efficiency: Optional[float] = SCALE_EFFICIENCY_DEFAULT_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the summary rows as JSON."),
):
    """Sweep policies x input rates x seeds in parallel; plot JCT vs load and JCT CDFs (paper Figs. 8-10).

    Example: rota sweep --table simulation_throughputs.json --cluster 36:36:36
    --policies max_min_fairness,max_min_fairness_perf --rates 0:6:16 --seeds 0,1,2
    --window 4000:5000 --gavel-compat --workers 8 --out fig8/

    On a Ray cluster: add --ray auto (or --ray HOST:PORT).

    Your own jobs instead of generated ones: rota sweep --table data/throughputs.csv
    --cluster data/cluster.yaml --trace data/jobs.csv --policies fifo,max_min_fairness_perf --out mine/

    Restarts cost 120 s (restarts and goodput columns): add --restart-cost 120 --migration-aware
    """

    names = [p.strip() for p in policies.split(",") if p.strip()]
    for name in names:
        if name not in POLICY_NAMES and not name.startswith("allox_alpha="):
            raise InputError(f"unknown policy {name!r}; choose from: {', '.join(POLICY_NAMES)}", field="--policies")
    seed_list = _integers(seeds, "--seeds")
    job_counts = _integers(static_jobs, "--static-jobs") if static_jobs is not None else []
    if static_jobs is not None and not job_counts:
        raise InputError("the list is empty: give at least one number of jobs", field="--static-jobs")
    formats = [f.strip() for f in plot_format.split(",") if f.strip()]
    if ray_address is not None and not ray_address.strip():
        raise InputError("give a Ray address (HOST:PORT) or 'auto'", field="--ray")
    rate_list = rate_grid(rates) if rates is not None else []
    SweepSpec(
        table="",
        cluster="",
        policies=names,
        seeds=seed_list,
        rates=rate_list,
        static_jobs=job_counts,
        trace=None if trace is None else str(trace),
        reuse_solves=reuse_solves,
    ).check_grid()  # empty, repeated or oversized lists: one line before any file is read
    check_method(method)
    thr, spec_cluster = load_table(table), load_cluster(cluster)  # fail fast on bad inputs, before any worker starts
    for name in names:
        check_tenants(name, spec_cluster)  # a policy that cannot keep the cluster's tenant quotas
    if trace is not None:
        read = read_trace_scaled(trace, thr, spec_cluster, ScaleOptions(max_scale, scale_efficiency))
        for line in [] if as_json else read.warnings:
            err.print(styled("[yellow]warning:[/] ") + one_line(line), highlight=False, soft_wrap=True)
    spec = SweepSpec(
        table=str(table),
        cluster=cluster,
        policies=names,
        seeds=seed_list,
        rates=rate_list,
        static_jobs=job_counts,
        trace=None if trace is None else str(trace),
        window=parse_window(window),
        multi_gpu=multi_gpu,
        multi_priority=multi_priority,
        gavel_compat=gavel_compat,
        round_s=round_s,
        solver_method=method,
        max_active_jobs=max_active,
        restart_cost_s=restart_cost,
        migration_aware=migration_aware,
        max_scale_extrapolation=max_scale,
        scale_efficiency=scale_efficiency,
        reuse_solves=reuse_solves,
    )
    if gavel_compat and (restart_cost or migration_aware):
        raise InputError(
            "Gavel's simulator charges no restart cost and has no migration-aware mode", field="--gavel-compat"
        )

    # Connected here, where the Ray driver's connect_ray (a missing token said at once) may be
    # imported; the sweep reuses this connection.
    with connected(ray_address, connect_ray) if ray_address is not None else contextlib.nullcontext():
        records = _run_with_progress(spec, out_dir, jobs, ray_address, quiet=as_json)
    attach_rho(records, out_dir)
    write_summary_csv(records, out_dir / "summary.csv")
    setting = f"cluster {cluster}" + (f", jobs {window} measured" if window else "") + f", seeds {seeds}"
    plots = [] if no_plots else make_sweep_plots(records, out_dir, formats, cdf_rate=cdf_rate, setting=setting)
    rows = summary_rows(records)
    if as_json:
        out.print_json(json.dumps({"summary": rows, "plots": [str(p) for p in plots]}, default=str))
        return
    # Compact box and short headers: the table fits 80 columns (a pipe, a CI log).
    restarts = any(r["restarts"] is not None for r in rows)
    grid = Table(
        title=f"sweep {out_dir}",
        caption="average and p99 JCT, makespan: hours; "
        + (">=: an incomplete point's lower bound, not a result; " if any(r["jct_lower_bound_h"] for r in rows) else "")
        + ("good: goodput (GPU time not lost to restarts); " if restarts else "")
        + "wall time per point: summary.csv",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 0, 0, 1),
    )
    columns = ("policy", "load", "seed", "status", "JCT", "p99", "makespan", "util")
    for column in columns + (("good",) if restarts else ()):
        grid.add_column(column, justify="left" if column in ("policy", "status") else "right", no_wrap=True)
    for r in rows:
        load = (
            "trace"
            if trace is not None
            else f"{r['num_jobs']} jobs"
            if r["num_jobs"] is not None
            else f"{r['rate']:g}/h"
        )
        grid.add_row(
            r["policy"],
            load,
            str(r["seed"]),
            r["status"],
            _number(r["avg_jct_h"], ".3g") if r["jct_lower_bound_h"] is None else f">={r['jct_lower_bound_h']:.3g}",
            _number(r["p99_jct_h"], ".3g"),
            _number(r["makespan_h"], ".3g"),
            _number(r["utilisation"], ".2f"),
            *((_number(r["goodput"], ".3f"),) if restarts else ()),
        )
    out.print(grid)
    out.print(f"wrote {out_dir / 'summary.csv'}" + (f" and {len(plots)} plot files" if plots else ""))


def _run_with_progress(
    spec: SweepSpec, out_dir: Path, jobs: int | None, ray_address: str | None, *, quiet: bool
) -> list[dict]:
    """run_sweep behind a progress bar; warnings as one line each; SIGTERM/SIGINT: say what
    was kept and exit 128 + the signal's number."""
    with progress_bar("[bold]sweep[/]", "{task.fields[last]}", hidden=quiet) as bar:
        task = bar.add_task("sweep", total=len(spec.points()), last="")

        def on_point(rec, done, total):
            bar.update(task, completed=done, last=f"{rec['key']}: {rec['status']}")

        def on_warning(message: str) -> None:
            err.print(styled("[yellow]warning:[/] {}", one_line(message)), highlight=False, soft_wrap=True)

        try:
            records = run_sweep(
                spec, out_dir, jobs=jobs, ray_address=ray_address, on_point=on_point, on_warning=on_warning
            )
        except SweepInterrupted as stop:
            bar.stop()
            finished = len(load_results(out_dir))
            err.print(
                f"{stop}: {finished} of {len(spec.points())} points are in {out_dir / RESULTS}; "
                "run the same command again to resume",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(128 + stop.signum) from None
    return records


def _integers(text: str, field: str) -> list[int]:
    """A comma-separated list of integers (blank items ignored); the grid check bounds them."""
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"expected comma-separated integers, got {text!r}", field=field) from None


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
