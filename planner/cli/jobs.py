"""`rota jobs validate`: every problem of a job list in one run, each with what fixes it.

The rows are checked by `planner.formats.jobs.check_jobs`, the very checks `rota plan` makes;
on top of them come the warnings of a list that plans but may not run as meant: job types with
no table row on some worker type of the cluster (`planner.formats.coverage`), gangs bigger than
any node, and commands a launcher refuses (`planner.export.common`) or a shell cannot split.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from planner.cli.common import err, one_line, styled, user_errors
from planner.cli.common import out as stdout
from planner.estimate.scaling import (
    DEFAULT_MAX_FACTOR,
    EFFICIENCY_HELP,
    MAX_FACTOR_HELP,
    JobsRead,
    ScaleOptions,
    check_jobs_scaled,
)
from planner.export.common import control_character
from planner.formats.cluster import Cluster
from planner.formats.coverage import missing_cells
from planner.formats.inputs import load_cluster, load_table
from planner.formats.jobs import (
    JobListCheck,
    Problem,
    node_warnings,
    read_job_list,
)
from planner.formats.table import JobType, ThroughputTable

jobs_app = typer.Typer(no_args_is_help=True, help="Check job lists.")

JSON_FORMAT = "rota.jobs-validation/v1"


def _max_factor(value: float) -> float:
    """Typer callback: a finite factor >= 1."""
    if not (math.isfinite(value) and value >= 1.0):
        raise typer.BadParameter(f"must be a number >= 1, got {value:g}")
    return value


def _efficiency(value: float | None) -> float | None:
    """Typer callback: None, or an efficiency in (0, 1]."""
    if value is not None and not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise typer.BadParameter(f"must be in (0, 1], got {value:g}")
    return value


# The estimation of missing scale factors (planner/estimate/scaling.py), for every command that reads
# a job list or trace: --max-scale-extrapolation F --scale-efficiency E (with --strict-cells: none).
# For Annotated parameters:
MAX_SCALE_OPTION = typer.Option(
    "--max-scale-extrapolation", metavar="FACTOR", callback=_max_factor, help=MAX_FACTOR_HELP
)
SCALE_EFFICIENCY_OPTION = typer.Option("--scale-efficiency", metavar="E", callback=_efficiency, help=EFFICIENCY_HELP)
# For parameters whose default is the option (`max_scale: float = MAX_SCALE_DEFAULT_OPTION`):
MAX_SCALE_DEFAULT_OPTION = typer.Option(
    DEFAULT_MAX_FACTOR, "--max-scale-extrapolation", metavar="FACTOR", callback=_max_factor, help=MAX_FACTOR_HELP
)
SCALE_EFFICIENCY_DEFAULT_OPTION = typer.Option(
    None, "--scale-efficiency", metavar="E", callback=_efficiency, help=EFFICIENCY_HELP
)


def validate_command(
    jobs: Annotated[Path, typer.Argument(help="Job list (.csv or .json).", metavar="JOBS", show_default=False)],
    table: Annotated[
        Path,
        typer.Option("--table", "-t", help="Throughput table (.csv, .parquet, or Gavel .json).", show_default=False),
    ],
    cluster: Annotated[
        str,
        typer.Option(
            "--cluster",
            "-c",
            help="Cluster spec (.yaml or .json), or an inline spec such as 'v100=4,k80=8'.",
            show_default=False,
        ),
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help=f"Print one JSON object ({JSON_FORMAT}): jobs, table, cluster, valid, rows, valid_rows, errors, "
            "warnings, unlisted, problems[] with severity, rows (the first 1000), row_count, field, message "
            "and remedy, and estimated_scale_factors[] (the job types whose GPU count was estimated).",
        ),
    ] = False,
    max_scale: Annotated[float, MAX_SCALE_OPTION] = DEFAULT_MAX_FACTOR,
    scale_efficiency: Annotated[Optional[float], SCALE_EFFICIENCY_OPTION] = None,
    strict_cells: Annotated[
        bool,
        typer.Option(
            "--strict-cells",
            help="Check as 'rota plan --strict-cells' plans: no scale factor is estimated, and a job type with "
            "no row on a worker type of the cluster it would fit is an error.",
        ),
    ] = False,
) -> None:
    """Check a job list against a table and cluster: every problem, with its fix.

    Errors (exit status 2) are what 'rota plan' refuses: unknown models,
    batch sizes or scale factors, jobs larger than any worker type or
    that can run on none, duplicate ids, bad numbers; and commands with a
    control character, which 'rota export' and 'rota run' refuse.
    Warnings (exit status 0): job types with no table row on some worker
    type (they will not run there), gangs larger than any node, commands
    a shell cannot split, and scale factors (GPU counts) the table lacks
    that 'rota plan' estimates from the job type's other scale factors.
    The same problem in several rows is one entry that names them all.

    Example:

        rota jobs validate data/jobs.csv -t data/throughputs.csv -c data/cluster.yaml
    """
    thr = load_table(table)
    spec = load_cluster(cluster)
    records, columns = read_job_list(jobs)
    scaling = ScaleOptions(max_scale, scale_efficiency, strict_cells)
    check, read = check_jobs_scaled(records, table=thr, cluster=spec, path=jobs, columns=columns, options=scaling)
    thr = read.table  # with the rows estimated for the list
    check.problems[:0] = _cluster_problems(thr, spec, table)
    check.problems += _scale_warnings(check, read) + _warnings(check, thr, spec, table, strict_cells)
    check.problems.sort(key=_order)
    valid = _valid_rows(check)
    if as_json:
        summary = _to_json(check, len(records), valid, jobs, table, cluster)
        summary["estimated_scale_factors"] = read.to_json()
        typer.echo(json.dumps(summary, indent=2))
    else:
        _print(check, len(records), valid, jobs)
    if check.errors or check.unlisted:
        raise typer.Exit(2)


def _valid_rows(check: JobListCheck) -> int:
    """Rows with no error: jobs 'rota plan' takes and a launcher runs."""
    bad = {row for p in check.errors for row in p.rows}
    return sum(row not in bad for row in check.rows)


def _order(problem: Problem) -> tuple[int, int]:
    """File order: the file as a whole first, then by first row (errors before warnings there)."""
    return (problem.rows[0] if problem.rows else 0, problem.severity != "error")


def _cluster_problems(thr: ThroughputTable, spec: Cluster, table_path: Path) -> list[Problem]:
    """The cluster's worker types the table has no row of (which 'rota plan' refuses)."""
    missing = [w for w in spec.names if w not in thr.worker_types]
    if not missing:
        return []
    names = ", ".join(missing)
    return [
        Problem(
            "error",
            f"worker type(s) {names} of cluster {spec.path} have no rows in the table",
            "worker_type",
            f"measure them into {shlex.quote(str(table_path))} (rota profile --device-types "
            f"{shlex.quote(','.join(missing))}), or remove them from {spec.path}",
            path=table_path,
        )
    ]


def _warnings(
    check: JobListCheck, thr: ThroughputTable, spec: Cluster, table_path: Path, strict: bool = False
) -> list[Problem]:
    known = Cluster({w: t for w, t in spec.worker_types.items() if w in thr.worker_types}, spec.path)
    problems = _missing_cell_warnings(check, thr, known, table_path, strict) if known.worker_types else []
    return problems + node_warnings(check, thr, spec) + _command_problems(check)


def _scale_warnings(check: JobListCheck, read: JobsRead) -> list[Problem]:
    """Job types whose scale factor the table lacks, estimated from their other scale factors."""
    out = []
    for estimate in read.estimates:
        problem = Problem(
            "warning",
            f"{estimate.job_type.label} {estimate.message()}",
            "scale_factor",
            estimate.remedy(),
        )
        for job, row in zip(check.jobs, check.rows):
            if job.job_type == estimate.job_type:
                problem.add_row(row)
        out.append(problem)
    return out


def _missing_cell_warnings(
    check: JobListCheck, thr: ThroughputTable, spec: Cluster, table_path: Path, strict: bool = False
) -> list[Problem]:
    """Job types with no solo row on some worker type they would fit: they will not run there
    (an error with --strict-cells, which `rota plan` then refuses)."""
    rows: dict[JobType, list[int]] = {}
    for job, row in zip(check.jobs, check.rows):
        rows.setdefault(job.job_type, []).append(row)
    t = shlex.quote(str(table_path))
    out = []
    for cells in missing_cells(thr, check.jobs, spec):
        types = ", ".join(cells.worker_types)
        noun, it = ("row", "it") if len(cells.worker_types) == 1 else ("rows", "them")
        problem = Problem(
            "error" if strict else "warning",
            f"{cells.job_type.label} has no {types} {noun} in the table: it will not run on {types}",
            "model",
            f"estimate the {noun}: rota table estimate {t} --out FULL.csv --solo (then plan with --table "
            f"FULL.csv), or measure {it}: rota profile on a {types} machine with --out {t}, or add "
            f"{'a hand-written row' if it == 'it' else 'hand-written rows'} to {t}",
        )
        for row in rows[cells.job_type]:
            problem.add_row(row)
        out.append(problem)
    return out


def _command_problems(check: JobListCheck) -> list[Problem]:
    """Commands a launcher refuses (a control character: error) or a shell cannot split (an
    unclosed quote: warning, the job would fail when launched)."""
    found: dict[tuple[str, str], Problem] = {}
    for job, row in zip(check.jobs, check.rows):
        if not job.command:
            continue
        bad = control_character(job.command)
        if bad is not None:
            severity = "error"
            message = (
                f"the command holds the control character {ascii(bad)}: 'rota export' and 'rota run' refuse it "
                "(a command is one line of printable text, tabs allowed)"
            )
            remedy = "write the command on one line, without control characters"
        else:
            try:
                shlex.split(job.command, comments=True)
                continue
            except ValueError as exc:
                severity = "warning"
                message = f"a shell cannot split the command ({str(exc).lower()}): the job would fail when launched"
                remedy = "close the quote, or escape a quote meant literally with a backslash"
        problem = found.setdefault((severity, message), Problem(severity, message, "command", remedy))
        problem.add_row(row)
    return list(found.values())


def _print(check: JobListCheck, rows: int, valid_rows: int, path: Path) -> None:
    """Each problem as 'error:' or 'warning:' and its fix (stderr), then a summary line (stdout)."""
    for problem in check.problems:
        label = "[bold red]error:[/]" if problem.severity == "error" else "[yellow]warning:[/]"
        err.print(styled(f"{label} {{}}", one_line(problem.text(path, remedy=False))), highlight=False, soft_wrap=True)
        if problem.remedy:
            err.print(f"  fix: {one_line(problem.remedy)}", highlight=False, soft_wrap=True)
    errors, warnings = len(check.errors) + check.unlisted, len(check.warnings)
    if check.unlisted:
        err.print(f"{check.unlisted} more problem(s) not listed", highlight=False, soft_wrap=True)
    counts = f"{_count(errors, 'error')}, {_count(warnings, 'warning')}"
    valid = f"{valid_rows} of {_count(rows, 'job')} valid"
    if errors:
        stdout.print(f"{path}: {counts}; {valid}", highlight=False, soft_wrap=True)
    else:
        stdout.print(styled("[green]ok[/] {}: {}; {}", path, counts, valid), highlight=False, soft_wrap=True)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _to_json(check: JobListCheck, rows: int, valid_rows: int, jobs: Path, table: Path, cluster: str) -> dict[str, Any]:
    return {
        "format": JSON_FORMAT,
        "jobs": str(jobs),
        "table": str(table),
        "cluster": cluster,
        "valid": not (check.errors or check.unlisted),
        "rows": rows,
        "valid_rows": valid_rows,
        "errors": len(check.errors) + check.unlisted,
        "warnings": len(check.warnings),
        "unlisted": check.unlisted,
        "problems": [p.to_json() for p in check.problems],
    }


jobs_app.command("validate")(user_errors(validate_command))
