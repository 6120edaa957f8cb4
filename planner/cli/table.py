"""`rota table ...`: inspect, validate, convert, merge and complete throughput tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from planner.cli.common import out as stdout
from planner.cli.common import report_problems, state_input, styled, user_errors
from planner.cli.simulate import finite
from planner.errors import InputError
from planner.estimate.cold_start import ESTIMATE_BAND, SoloReport, estimate_solo_rows
from planner.estimate.completion import (
    DEFAULT_RANK,
    DEFAULT_REG,
    MAX_RANK,
    METHOD,
    ZERO_MODES,
    EstimateReport,
    estimate_table,
    missing_solo_rows,
)
from planner.estimate.observed import DEFAULT_MIN_OBSERVATIONS, exported_rows
from planner.estimate.restart_learnt import RESTART_CSV_COLUMNS, restart_rows
from planner.formats.atomic import write_text_atomic
from planner.formats.files import same_file
from planner.formats.gavel_json import export_gavel, import_gavel
from planner.formats.inputs import load_table
from planner.formats.quality import NOISY_SPREAD, is_user_row, noisy_rows, remeasure_hint
from planner.formats.schedule import csv_text, spreadsheet_safe
from planner.formats.state import read_state
from planner.formats.table import (
    COLUMNS,
    JobType,
    TableRow,
    ThroughputTable,
    is_estimate,
    merge_tables,
    read_table,
    row_key,
    table_problems,
    write_table,
)
from planner.modes.generator import MAX_SEED

table_app = typer.Typer(no_args_is_help=True, help="Inspect, validate, convert and merge throughput tables.")

_SHOWN = 5  # list at most this many missing solo rows / pairs to measure
MAX_REG = 1e6  # --reg: beyond it every estimate is the bias terms alone
MAX_MIN_MEASURED = 10_000  # --min-measured: pairs a job type needs; no table holds more


@table_app.command("show")
@user_errors
def table_show(
    table: Path = typer.Argument(..., help="Throughput table (.csv or .parquet).", metavar="TABLE"),
    scale_factor: int = typer.Option(1, "--scale-factor", "-s", help="Show job types with this GPU count."),
    as_json: bool = typer.Option(False, "--json", help="Print the matrix as JSON."),
):
    """Print solo throughputs (steps/s) as a job type x worker type matrix.

    Example: rota table show data/throughputs.csv
    """

    t = read_table(table)
    job_types = [jt for jt in t.job_types if jt.scale_factor == scale_factor]
    if not job_types:
        scales = ", ".join(str(s) for s in sorted({jt.scale_factor for jt in t.job_types}))
        raise InputError(f"no job type with scale factor {scale_factor} (the table has {scales})", path=table)
    matrix = {jt.name: {w: (t.solo(w, jt) if t.has(w, jt) else None) for w in t.worker_types} for jt in job_types}
    if as_json:
        stdout.print_json(json.dumps(matrix))
        return
    n_pairs = sum(1 for r in t.rows if r["partner_model"] is not None)
    grid = Table(title=f"{table} - solo steps/s, scale factor {scale_factor}")
    grid.add_column("job type")
    for w in t.worker_types:
        grid.add_column(w, justify="right")
    solo_rows = {
        (r["worker_type"], JobType(r["model"], r["batch_size"], r["scale_factor"])): r
        for r in t.rows
        if r["partner_model"] is None
    }
    marked = False
    for jt in job_types:
        cells = []
        for w, v in matrix[jt.name].items():
            text, mark = _cell_text(v, solo_rows.get((w, jt)))
            cells.append(text)
            marked = marked or mark
        grid.add_row(jt.name, *cells)
    if marked:
        grid.caption = "~ estimated (± p90 error, where known); obs: observed"
    stdout.print(grid)
    stdout.print(
        f"{len(t)} rows: {len(t.job_types)} job types, {len(t.worker_types)} worker types, {n_pairs} co-location rows"
    )


def _cell_text(value: float | None, row: TableRow | None) -> tuple[str, bool]:
    """A cell of `table show`, and whether it is marked: estimated and observed cells say so, so
    that a guess does not read as a measurement."""
    if value is None or row is None:
        return "-", False
    text = "cannot run" if value == 0 else f"{value:.3f}"
    if is_estimate(row):
        band = ESTIMATE_BAND.search(row["device_name"] or "")
        return f"~{text}" + (f" ±{band['pct']} %" if band else ""), True
    if row["source"] == "observed":
        return f"{text} obs", True
    return text, False


@table_app.command("validate")
@user_errors
def table_validate(table: Path = typer.Argument(..., help="Throughput table (.csv or .parquet).", metavar="TABLE")):
    """Check a throughput table; if it is bad, list every problem (one line each, naming row and field), exit 2.

    Example: rota table validate data/throughputs.csv
    """

    rows, problems = table_problems(table)
    if problems:
        report_problems(problems)
    t = ThroughputTable(rows, path=table)
    statuses: dict[str, int] = {}
    for r in t.rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    stdout.print(
        styled("[green]ok[/] {}: {} rows ({}); worker types: {}", table, len(t), summary, ", ".join(t.worker_types))
    )
    noisy = noisy_rows(t.rows)
    if noisy:
        listed = ", ".join(map(str, noisy[:10])) + (f" and {len(noisy) - 10} more" if len(noisy) > 10 else "")
        stdout.print(
            styled("[yellow]warning:[/] ") + f"{len(noisy)} row(s) spread more than {100 * NOISY_SPREAD:.0f} % "
            f"(step_time_iqr_s / step_time_median_s): rows {listed}; {_hint(t.rows, noisy)}",
            highlight=False,
            soft_wrap=True,
        )


def _hint(rows: list, noisy: list[int]) -> str:
    users = [is_user_row(rows[i - 1]) for i in noisy]
    return remeasure_hint(reference=not all(users), user=any(users))


@table_app.command("import-gavel")
@user_errors
def table_import_gavel(
    source: Path = typer.Argument(
        ..., help="Gavel throughput JSON (e.g. simulation_throughputs.json).", metavar="SOURCE"
    ),
    out_path: Path = typer.Option(..., "--out", "-o", help="Table to write (.csv or .parquet)."),
):
    """Convert Gavel's throughput JSON into a rota table (lossless).

    Example: rota table import-gavel simulation_throughputs.json --out gavel.csv
    """

    t = import_gavel(source)
    write_table(t, out_path)
    stdout.print(f"wrote {out_path}: {len(t)} rows, worker types {', '.join(t.worker_types)}")


@table_app.command("export-gavel")
@user_errors
def table_export_gavel(
    table: Path = typer.Argument(..., help="rota table (.csv or .parquet).", metavar="TABLE"),
    out_path: Path = typer.Option(..., "--out", "-o", help="Gavel JSON to write."),
):
    """Write a rota table in Gavel's throughput JSON layout.

    Example: rota table export-gavel gavel.csv --out simulation_throughputs.json
    """

    t = read_table(table)
    export_gavel(t, out_path)
    stdout.print(f"wrote {out_path}: {len(t.worker_types)} worker types, {len(t.job_types)} job types")


@table_app.command("merge")
@user_errors
def table_merge(
    tables: list[Path] = typer.Argument(
        ..., help="Tables to merge; later ones win on duplicate rows (see --strict).", metavar="TABLES"
    ),
    out_path: Path = typer.Option(..., "--out", "-o", help="Merged table to write."),
    strict: bool = typer.Option(
        False, "--strict", help="Fail on two rows with the same key and different values instead (names both)."
    ),
):
    """Merge tables, e.g. one per machine or GPU type; the result is written atomically.

    Example: rota table merge cpu.csv h200.csv --out all.csv
    """

    merged = merge_tables([read_table(p) for p in tables], path=out_path, strict=strict)
    write_table(merged, out_path)
    stdout.print(f"wrote {out_path}: {len(merged)} rows, worker types {', '.join(merged.worker_types)}")


@table_app.command("observed")
@user_errors
def table_observed(
    state: Path = typer.Argument(
        ..., help="Next-round planner state (rota.state/v1) of 'rota plan-next'.", metavar="STATE"
    ),
    out_path: Path = typer.Option(..., "--out", "-o", help="Table of observed rows to write (.csv or .parquet)."),
    table: Path | None = typer.Option(
        None, "--table", "-t", help="Leave out the cells this table measured (default: the state's table)."
    ),
    min_count: int = typer.Option(
        DEFAULT_MIN_OBSERVATIONS, "--min", min=1, max=1_000_000, help="Reports a cell needs to be written."
    ),
    restarts_path: Path | None = typer.Option(
        None,
        "--restarts",
        help="Also write the restart costs reports taught (CSV: worker type, job type, restarts, median and "
        "IQR seconds), for job types with at least --min restarts.",
    ),
):
    """Write the throughputs observed in production as table rows (source observed).

    Cells the table measured are left out, so 'rota table merge' cannot replace them.
    Example: rota table observed state.json --out observed.csv, then
    rota table merge data/throughputs.csv observed.csv --out merged.csv

    With the restart costs learnt from the same reports:
    rota table observed state.json --out observed.csv --restarts restarts.csv
    """

    document = read_state(state)
    table_path = table or state_input(document.inputs, "table", state)
    base = read_table(table_path) if table_path is not None else None
    rows, left_out = exported_rows(document.observed, base, min_count)
    restarts = restart_rows(document.restart.learnt if document.restart else {}, min_count)
    if restarts_path is not None and (restarts_path == out_path or same_file(restarts_path, out_path)):
        raise InputError("give the restart costs another file than --out", field="--restarts")
    write_table(ThroughputTable(rows, path=out_path), out_path)
    skipped = f"; left out {left_out} cell(s) {table_path} measured" if left_out else ""
    stdout.print(f"wrote {out_path}: {len(rows)} observed row(s) with at least {min_count} report(s){skipped}")
    if restarts_path is not None:
        text = csv_text(
            RESTART_CSV_COLUMNS, ([spreadsheet_safe(row[c]) for c in RESTART_CSV_COLUMNS] for row in restarts)
        )
        write_text_atomic(restarts_path, text)
        stdout.print(
            f"wrote {restarts_path}: {len(restarts)} learnt restart cost(s) with at least {min_count} restart(s)"
        )


def estimate_command(
    table: Annotated[
        Path,
        typer.Argument(
            help="Measured throughput table (.csv, .parquet, or Gavel .json).", metavar="TABLE", show_default=False
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Where to write the completed table (.csv or .parquet).",
            metavar="FULL",
            show_default=False,
        ),
    ],
    rank: Annotated[
        int, typer.Option(min=0, max=MAX_RANK, help="Rank of the low-rank term (0 = job and partner biases only).")
    ] = DEFAULT_RANK,
    reg: Annotated[
        float, typer.Option(min=0.0, max=MAX_REG, callback=finite, help="Ridge regularisation, per measurement.")
    ] = DEFAULT_REG,
    seed: Annotated[
        int, typer.Option(min=0, max=MAX_SEED, help="Seed of the initial factors and of the holdout split.")
    ] = 0,
    zeros: Annotated[
        str,
        typer.Option(
            help="Measured 'cannot co-locate' pairs: 'exclude' them from the fit, or fit them as factor 'zero'."
        ),
    ] = "exclude",
    min_measured: Annotated[
        int,
        typer.Option(
            max=MAX_MIN_MEASURED,
            help="Measured pairs a job type and a partner (per worker type) need before their entries are estimated.",
        ),
    ] = 1,
    partial: Annotated[
        bool,
        typer.Option(
            help="Estimate what can be estimated instead of failing when some job types or partners lack measurements."
        ),
    ] = False,
    holdout: Annotated[
        float,
        typer.Option(
            callback=finite, help="Fraction of measured pairs hidden and re-estimated to report an error (0 = skip)."
        ),
    ] = 0.1,
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    solo: Annotated[
        bool,
        typer.Option(
            "--solo",
            help="Also estimate missing solo rows of job types with a measured row, and the pairs of job types "
            "without a measured pair.",
        ),
    ] = False,
    worker_types: Annotated[
        str,
        typer.Option(
            help="Comma-separated worker types the completed table must cover (each needs one measured row); "
            "implies --solo.",
            show_default=False,
        ),
    ] = "",
) -> None:
    """Fill every missing co-location entry from the measured ones.

    Builds, per scale factor, the matrix of normalised co-location factors
    (pair throughput / solo throughput) over job types x (worker type,
    partner), completes it with alternating least squares on a biased low-rank
    model, clips to [0, 1] and writes throughput = factor x solo with status
    and source 'estimated' and the method in device_name. Measured rows are
    kept as they are. With --solo, missing solo rows are estimated first
    (log-speed model, or another batch size of the same model), and job
    types without a measured pair get their pairs from that batch size or
    the partner's mean (docs/estimation.md, "Estimating a new job type").

    Example:

        rota table estimate measured.csv --out full.csv --rank 4
        rota table estimate measured.csv --out full.csv --solo --worker-types h100,l4
    """
    if zeros not in ZERO_MODES:
        raise InputError(f"unknown value {zeros!r} (expected one of {', '.join(ZERO_MODES)})", field="--zeros")
    if min_measured < 1:
        raise InputError(f"must be >= 1, got {min_measured}", field="--min-measured")
    if out.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise InputError("unsupported table format (use .csv or .parquet)", path=out)
    source = load_table(table)
    names = [w.strip() for w in worker_types.split(",") if w.strip()]
    solo = solo or bool(names)
    solo_report = None
    if solo:
        source, solo_report = _with_solo_estimates(source, names, seed)
    if solo and not _has_measured_pairs(source):  # solo rows alone are worth writing
        full = source
        report = EstimateReport(METHOD, rank, reg, seed, zeros, [], missing_solo_rows(source), True)
    else:
        full, report = estimate_table(
            source,
            rank=rank,
            seed=seed,
            reg=reg,
            zeros=zeros,
            min_measured=min_measured,
            partial=partial,
            holdout=holdout,
            cold_start=solo,
        )
    report.solo = solo_report
    write_table(full, out)
    if json_output:
        typer.echo(json.dumps({"input": str(table), "output": str(out), **report.to_dict()}, indent=2))
    else:
        print_summary(report, table, out)


def _with_solo_estimates(
    source: ThroughputTable, worker_types: list[str], seed: int
) -> tuple[ThroughputTable, SoloReport]:
    """The table with its missing solo rows estimated (older solo estimates replaced)."""
    rows, solo_report = estimate_solo_rows(source, worker_types, seed=seed)
    replaced = {row_key(r) for r in rows}
    kept = [r for r in source.rows if row_key(r) not in replaced]
    return ThroughputTable.from_records([*kept, *rows], columns=COLUMNS, path=source.path), solo_report


def _has_measured_pairs(t: ThroughputTable) -> bool:
    return any(r["partner_model"] is not None and "estimated" not in (r["status"], r["source"]) for r in t.rows)


def print_solo_summary(report: SoloReport) -> None:
    bands = ", ".join(
        f"{w} {'?' if band != band else f'{100 * band:.0f} %'}" for w, band in report.worker_bands.items()
    )
    stdout.print(
        f"solo rows estimated: {report.estimated_rows} rows of {report.job_types} job types "
        f"({report.by_sibling} from another batch size of the same model, the rest by the {report.method} "
        f"model, rank {report.rank})" + (f"; median p90 hold-out error by worker type: {bands}" if bands else "")
    )
    if report.not_estimable:
        shown = ", ".join(report.not_estimable[:_SHOWN])
        more = f" and {len(report.not_estimable) - _SHOWN} more" if len(report.not_estimable) > _SHOWN else ""
        stdout.print(f"solo rows not estimable: {shown}{more}")


def print_summary(report: EstimateReport, table: Path, written: Path) -> None:
    if report.solo is not None:
        print_solo_summary(report.solo)
    if not report.groups:
        stdout.print("no co-location measured: pairs not estimated")
    else:
        _print_groups(report)
    if report.missing_solo:
        shown = ", ".join(report.missing_solo[:_SHOWN])
        more = f" and {len(report.missing_solo) - _SHOWN} more" if len(report.missing_solo) > _SHOWN else ""
        hint = "measure them" if report.cold_start else "measure them, or pass --solo"
        stdout.print(f"solo rows missing (not estimated; {hint}): {shown}{more}")
    for g in report.groups:
        if g.cold_start_entries:
            jobs = g.cold_job_types
            listed = ", ".join(jobs[:_SHOWN]) + (f" and {len(jobs) - _SHOWN} more" if len(jobs) > _SHOWN else "")
            stdout.print(
                f"scale factor {g.scale_factor}: {g.cold_start_entries} entries estimated by cold start (job types "
                "or worker types without a measured pair)" + (f"; job types: {listed}" if jobs else "")
            )
    holdouts = [g.holdout for g in report.groups if g.holdout]
    if holdouts:
        stdout.print(
            f"holdout: {holdouts[0].fraction:.0%} of measured pairs hidden and re-estimated; "
            "error is |estimated - measured| of the normalised factor"
        )
    if report.groups:
        stdout.print(f"{report.measured_entries} measured + {report.estimated_entries} estimated entries -> {written}")
    else:  # --solo on a table without pairs: only solo rows were estimated
        solo = 0 if report.solo is None else report.solo.estimated_rows
        stdout.print(f"wrote {written}" + (f" with {solo} estimated solo row(s)" if solo else ""))


def _print_groups(report: EstimateReport) -> None:
    """The co-location table and what each scale factor left to measure."""
    view = Table(title=f"Estimated co-locations ({report.method}, rank {report.rank}, reg {report.reg:g})")
    for name in ("scale", "jobs", "pairs", "measured", "failed", "estimated", "holdout med", "p90"):
        view.add_column(name, justify="right")
    for g in report.groups:
        h = g.holdout
        view.add_row(
            str(g.scale_factor),
            str(g.job_types),
            str(g.measured_pairs),
            str(g.measured_entries),
            str(g.failed_entries),
            str(g.estimated_entries),
            f"{h.median:.3f}" if h else "-",
            f"{h.p90:.3f}" if h else "-",
        )
    stdout.print(view)
    for g in report.groups:
        if g.note and not g.note.startswith("complete"):
            stdout.print(f"scale factor {g.scale_factor}: {g.note}")
        if g.unestimable_entries and g.to_measure:
            more = " ..." if len(g.to_measure) > _SHOWN else ""
            stdout.print(
                f"  scale factor {g.scale_factor}: {g.unestimable_entries} entries not estimated; "
                f"measure next ({len(g.to_measure)}): " + "; ".join(g.to_measure[:_SHOWN]) + more
            )


table_app.command("estimate")(user_errors(estimate_command))
