"""The `rota` command line (typer). User errors print one line, never a traceback."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from planner.errors import InputError, SolverError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="rota: heterogeneity-aware scheduling for deep-learning training clusters.",
)
table_app = typer.Typer(no_args_is_help=True, help="Inspect, validate, convert and merge throughput tables.")
app.add_typer(table_app, name="table")

out = Console()
err = Console(stderr=True)


def user_errors(func):
    """Turn InputError / SolverError into 'error: ...' on stderr and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (InputError, SolverError) as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


# --------------------------------------------------------------------------- table


@table_app.command("show")
@user_errors
def table_show(
    table: Path = typer.Argument(..., help="Throughput table (.csv or .parquet)."),
    scale_factor: int = typer.Option(1, "--scale-factor", "-s", help="Show job types with this GPU count."),
    as_json: bool = typer.Option(False, "--json", help="Print the matrix as JSON."),
):
    """Print solo throughputs (steps/s) as a job type x worker type matrix.

    Example: rota table show data/throughputs.csv
    """
    from planner.formats.table import read_table

    t = read_table(table)
    job_types = [jt for jt in t.job_types if jt.scale_factor == scale_factor]
    matrix = {jt.name: {w: (t.solo(w, jt) if t.has(w, jt) else None) for w in t.worker_types} for jt in job_types}
    if as_json:
        out.print_json(json.dumps(matrix))
        return
    n_pairs = sum(1 for r in t.rows if r["partner_model"] is not None)
    grid = Table(title=f"{table} - solo steps/s, scale factor {scale_factor}")
    grid.add_column("job type")
    for w in t.worker_types:
        grid.add_column(w, justify="right")
    for name, row in matrix.items():
        grid.add_row(name, *["-" if v is None else ("cannot run" if v == 0 else f"{v:.3f}") for v in row.values()])
    out.print(grid)
    out.print(
        f"{len(t)} rows: {len(t.job_types)} job types, {len(t.worker_types)} worker types, {n_pairs} co-location rows"
    )


@table_app.command("validate")
@user_errors
def table_validate(table: Path = typer.Argument(..., help="Throughput table (.csv or .parquet).")):
    """Check a throughput table; exit code 2 with one line naming row and field if it is bad.

    Example: rota table validate data/throughputs.csv
    """
    from planner.formats.table import read_table

    t = read_table(table)
    statuses: dict[str, int] = {}
    for r in t.rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    out.print(f"[green]ok[/] {table}: {len(t)} rows ({summary}); worker types: {', '.join(t.worker_types)}")


@table_app.command("import-gavel")
@user_errors
def table_import_gavel(
    source: Path = typer.Argument(..., help="Gavel throughput JSON (e.g. simulation_throughputs.json)."),
    out_path: Path = typer.Option(..., "--out", "-o", help="Table to write (.csv or .parquet)."),
):
    """Convert Gavel's throughput JSON into a rota table (lossless).

    Example: rota table import-gavel simulation_throughputs.json --out gavel.csv
    """
    from planner.formats.gavel_json import import_gavel
    from planner.formats.table import write_table

    t = import_gavel(source)
    write_table(t, out_path)
    out.print(f"wrote {out_path}: {len(t)} rows, worker types {', '.join(t.worker_types)}")


@table_app.command("export-gavel")
@user_errors
def table_export_gavel(
    table: Path = typer.Argument(..., help="rota table (.csv or .parquet)."),
    out_path: Path = typer.Option(..., "--out", "-o", help="Gavel JSON to write."),
):
    """Write a rota table in Gavel's throughput JSON layout.

    Example: rota table export-gavel gavel.csv --out simulation_throughputs.json
    """
    from planner.formats.gavel_json import export_gavel
    from planner.formats.table import read_table

    t = read_table(table)
    export_gavel(t, out_path)
    out.print(f"wrote {out_path}: {len(t.worker_types)} worker types, {len(t.job_types)} job types")


@table_app.command("merge")
@user_errors
def table_merge(
    tables: list[Path] = typer.Argument(..., help="Tables to merge; later ones win on duplicate rows."),
    out_path: Path = typer.Option(..., "--out", "-o", help="Merged table to write."),
):
    """Merge tables, e.g. one per machine or GPU type.

    Example: rota table merge cpu.csv h200.csv --out all.csv
    """
    from planner.formats.table import merge_tables, read_table, write_table

    merged = merge_tables([read_table(p) for p in tables], path=out_path)
    write_table(merged, out_path)
    out.print(f"wrote {out_path}: {len(merged)} rows, worker types {', '.join(merged.worker_types)}")


# --------------------------------------------------------------------------- policies


@app.command("policies")
def policies(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")):
    """List the scheduling policies.

    Example: rota policies
    """
    from planner.policies import describe_policies

    described = describe_policies()
    if as_json:
        out.print_json(json.dumps(described))
        return
    grid = Table(title="policies")
    grid.add_column("name", no_wrap=True)
    grid.add_column("what it optimises")
    grid.add_column("needs")
    for name, info in described.items():
        grid.add_row(name, info["description"], info["needs"])
    out.print(grid)


# --------------------------------------------------------------------------- plan


@app.command("plan")
@user_errors
def plan(
    table: Optional[Path] = typer.Option(None, "--table", "-t", help="Throughput table (.csv or .parquet)."),
    jobs: Optional[Path] = typer.Option(None, "--jobs", "-j", help="Job list (.csv or .json)."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", "-c", help="Cluster spec (.yaml or .json)."),
    policy: Optional[str] = typer.Option(
        None, "--policy", "-p", help="Policy name (see 'rota policies'); default max_min_fairness_perf."
    ),
    state: Optional[Path] = typer.Option(
        None,
        "--state",
        "-s",
        help="Next-round mode: planner state to continue from (created on the first "
        "call, then updated); plans --rounds (default 1) rounds. "
        "Same as 'rota plan-next'.",
    ),
    progress: Optional[Path] = typer.Option(
        None, "--progress", help="Next-round mode: progress reported by the launcher (see docs/launchers.md)."
    ),
    out_path: Path = typer.Option(Path("schedule.json"), "--out", "-o", help="Schedule JSON to write."),
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Also write the flat per-GPU CSV view."),
    rounds: Optional[int] = typer.Option(
        None, "--rounds", "-k", min=1, help="Write only the first K rounds (default: until all jobs finish)."
    ),
    round_s: Optional[float] = typer.Option(
        None, "--round-length", min=1.0, help="Round length tau in seconds (default 360)."
    ),
    method: Optional[str] = typer.Option(
        None, "--solver-method", help="HiGHS method: ipm (interior point, default) or simplex."
    ),
    no_aggregate: bool = typer.Option(
        False, "--no-aggregate", help="One LP row per job instead of per class of identical jobs."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed for randomised policies (fifo, gandiva)."),
    gavel_compat: bool = typer.Option(
        False,
        "--gavel-compat",
        help="Reproduce Gavel's numbers where rota fixes its behaviour "
        "(makespan bisection, agnostic FTF/makespan copying v100).",
    ),
    entity_weights: Optional[str] = typer.Option(
        None,
        "--entity-weights",
        help="Multi-level fairness for water-filling policies: 'vision=2,nlp=1' "
        "or a YAML/JSON file mapping entity -> weight.",
    ),
    entity_policy: Optional[str] = typer.Option(
        None, "--entity-policy", help="Policy inside each entity: 'nlp=fifo,vision=fairness' (default fairness)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of tables."),
):
    """Plan a batch of jobs: policy allocation, then round-by-round GPU assignments.

    Example: rota plan --table data/throughputs.csv --jobs data/jobs.csv
    --cluster data/cluster.yaml --policy max_min_fairness_perf --out schedule.json --csv schedule.csv

    Next round only, from a saved state: rota plan --state state.json --progress progress.json --rounds 1
    """
    if state is not None:
        from planner.cli.schedule import plan_next_round_command

        return plan_next_round_command(
            state=state,
            table=table,
            jobs=jobs,
            cluster=cluster,
            policy=policy,
            progress=progress,
            rounds=rounds or 1,
            out_path=out_path,
            state_out=None,
            csv_path=csv_path,
            round_s=round_s,
            method=method,
            seed=seed,
            as_json=as_json,
        )
    if progress is not None:
        raise InputError("--progress needs --state (next-round mode)", field="--progress")
    for value, option in ((table, "--table"), (jobs, "--jobs"), (cluster, "--cluster")):
        if value is None:
            raise InputError("is required (or use --state for next-round mode)", field=option)
    policy = policy or "max_min_fairness_perf"
    round_s = 360.0 if round_s is None else round_s
    method = method or "ipm"
    from planner.formats.cluster import read_cluster, require_table_rows
    from planner.formats.jobs import read_jobs
    from planner.formats.schedule import build_schedule, write_schedule
    from planner.formats.table import read_table
    from planner.policies import make_policy
    from planner.policies.lp import LP_METHODS
    from planner.rounds.engine import EngineConfig, run_engine

    if method not in LP_METHODS:
        raise InputError(
            f"unknown solver method {method!r}; use one of {', '.join(LP_METHODS)}", field="--solver-method"
        )
    spec = read_cluster(cluster)
    thr = read_table(table)
    require_table_rows(spec, thr, table)
    job_list = read_jobs(jobs, table=thr, cluster=spec)
    weights = _parse_mapping(entity_weights, "--entity-weights", float) if entity_weights else None
    inside = _parse_mapping(entity_policy, "--entity-policy", str) if entity_policy else {}
    pol = make_policy(
        policy,
        method=method,
        aggregate=not no_aggregate,
        seed=seed,
        gavel_compat=gavel_compat,
        entity_weights=weights,
        entity_policies=inside,
    )
    config = EngineConfig(round_s=round_s)

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("planning"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs finished"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=as_json,
    ) as bar:
        task = bar.add_task("plan", total=len(job_list))
        result = run_engine(
            job_list, thr, spec, pol, config, on_round=lambda rec, done, total: bar.update(task, completed=done)
        )
    options = {
        "solver_method": method,
        "aggregate": not no_aggregate,
        "seed": seed,
        "round_s": round_s,
        "gavel_compat": gavel_compat,
        "entity_weights": weights,
        "entity_policies": inside,
    }
    schedule = build_schedule(
        result,
        inputs={"table": table, "jobs": jobs, "cluster": cluster},
        policy=policy,
        options=options,
        config=config,
        rounds=rounds,
    )
    write_schedule(schedule, out_path, csv_path)
    estimated = _estimated_throughputs_used(thr, job_list, spec)
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "schedule": str(out_path),
                    "rounds_written": len(schedule["rounds"]),
                    "rounds_total": schedule["rounds_total"],
                    "makespan_s": result.makespan_s,
                    "solver": schedule["solver"],
                    "utilisation": schedule["utilisation"],
                    "estimated_throughputs_used": estimated,
                    "jobs": schedule["jobs"],
                }
            )
        )
        return
    _print_plan_summary(schedule, result, out_path, csv_path, estimated)


def _parse_mapping(text: str, option: str, kind):
    """'a=1,b=2' or a YAML/JSON file holding a mapping."""
    path = Path(text)
    if path.exists():
        import yaml

        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None
        if not isinstance(data, dict):
            raise InputError("expected a mapping entity -> value", path=path)
        items = list(data.items())
    else:
        items = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            if "=" not in part:
                raise InputError(f"expected name=value, got {part!r}", field=option)
            key, value = part.split("=", 1)
            items.append((key.strip(), value.strip()))
    result = {}
    for key, value in items:
        try:
            result[str(key)] = kind(value)
        except (TypeError, ValueError):
            raise InputError(f"bad value {value!r} for {key!r}", field=option) from None
        if kind is float and not result[str(key)] > 0:
            raise InputError(f"weight of {key!r} must be positive", field=option)
    return result


def _estimated_throughputs_used(thr, job_list, spec) -> int:
    """Estimated rows (solo or co-located) the plan could read: worker type in the cluster,
    job type and partner job type among the job list's; an estimate clipped to 'failed' counts too."""
    types, workers = {j.job_type for j in job_list}, set(spec.names)

    def usable(r) -> bool:
        partner = r["partner_model"] is None or _jt(r, partner=True) in types
        return r["worker_type"] in workers and _jt(r) in types and partner

    return sum(1 for r in thr.rows if "estimated" in (r["status"], r["source"]) and usable(r))


def _jt(r, partner: bool = False):
    from planner.formats.table import JobType

    if partner:
        return JobType(r["partner_model"], r["partner_batch_size"], r["scale_factor"])
    return JobType(r["model"], r["batch_size"], r["scale_factor"])


def _print_plan_summary(schedule, result, out_path, csv_path, estimated) -> None:
    solver = schedule["solver"]
    out.print(
        f"policy [bold]{schedule['policy']['name']}[/]: {solver['status']}"
        + (f", objective {solver['objective']:.6g}" if solver["objective"] is not None else "")
        + f", build {solver['build_s'] * 1000:.1f} ms, solve {solver['solve_s'] * 1000:.1f} ms"
        + (f", {solver['n_classes']} job classes" if solver["n_classes"] else "")
        + f", re-solved {len(solver['resolves'])}x"
    )
    jobs_grid = Table(title="jobs")
    for column in ("job", "job type", "GPUs", "steps", "expected finish"):
        jobs_grid.add_column(column, justify="right" if column in ("GPUs", "steps", "expected finish") else "left")
    for jid, o in result.outcomes.items():
        finish = "-" if o.finish_s is None else _duration(o.finish_s)
        jt = o.job.job_type
        label = jt.model if jt.batch_size is None else f"{jt.model} bs{jt.batch_size}"
        jobs_grid.add_row(jid, label, str(o.job.scale_factor), f"{o.job.total_steps:,.0f}", finish)
    out.print(jobs_grid)
    util = Table(title="worker types")
    for column in ("worker type", "GPUs", "utilisation"):
        util.add_column(column, justify="left" if column == "worker type" else "right")
    for w in result.worker_types:
        util.add_row(w, str(result.capacity[w]), f"{schedule['utilisation'][w] * 100:.1f} %")
    out.print(util)
    if estimated:
        out.print(f"note: {estimated} of the throughputs used are estimated, not measured")
    wrote = f"wrote {out_path} ({len(schedule['rounds'])} of {schedule['rounds_total']} rounds"
    out.print(
        wrote + (f"; per-GPU view {csv_path})" if csv_path else ")") + f"; makespan {_duration(result.makespan_s)}"
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _register_commands() -> None:
    """Commands that live in their own modules (the profiler's imports torch only when run)."""
    from planner.cli.estimate import estimate_command
    from planner.cli.schedule import (
        export_command,
        plan_next_round_command,
        schedule_show_command,
        schedule_validate_command,
    )
    from planner.cli.simulate import simulate_command, sweep_command, trace_generate_command
    from profiler.cli import profile_command

    app.command("profile")(user_errors(profile_command))
    table_app.command("estimate")(user_errors(estimate_command))
    app.command("plan-next")(user_errors(plan_next_round_command))
    app.command("simulate")(user_errors(simulate_command))
    app.command("sweep")(user_errors(sweep_command))
    trace_app = typer.Typer(no_args_is_help=True, help="Generate job traces (Gavel's generator).")
    trace_app.command("generate")(user_errors(trace_generate_command))
    app.add_typer(trace_app, name="trace")
    app.command("export")(user_errors(export_command))
    schedule_app = typer.Typer(no_args_is_help=True, help="Check and view schedule files.")
    schedule_app.command("validate")(user_errors(schedule_validate_command))
    schedule_app.command("show")(user_errors(schedule_show_command))
    app.add_typer(schedule_app, name="schedule")


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
