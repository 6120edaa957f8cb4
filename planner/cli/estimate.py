"""`rota table estimate`: fill missing co-location entries of a throughput table.

The main CLI registers `estimate_command` with
``table_app.command("estimate")(estimate_command)``. User errors raise
planner.errors.InputError, which the main CLI prints as one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from planner.errors import InputError
from planner.estimate.completion import DEFAULT_RANK, DEFAULT_REG, ZERO_MODES, EstimateReport, estimate_table
from planner.formats.table import ThroughputTable, read_table, write_table

_SHOWN = 5  # list at most this many missing solo rows / pairs to measure


def _read(path: Path) -> ThroughputTable:
    # A Gavel JSON file is accepted directly, as a convenience for studies.
    if path.suffix.lower() == ".json":
        from planner.formats.gavel_json import import_gavel

        return import_gavel(path)
    return read_table(path)


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
        int, typer.Option(help="Rank of the low-rank term (0 = job and partner biases only).")
    ] = DEFAULT_RANK,
    reg: Annotated[float, typer.Option(help="Ridge regularisation, per measurement.")] = DEFAULT_REG,
    seed: Annotated[int, typer.Option(help="Seed of the initial factors and of the holdout split.")] = 0,
    zeros: Annotated[
        str,
        typer.Option(
            help="Measured 'cannot co-locate' pairs: 'exclude' them from the fit, or fit them as factor 'zero'."
        ),
    ] = "exclude",
    min_measured: Annotated[
        int,
        typer.Option(
            help="Measured pairs a job type and a partner (per worker type) need before their entries are estimated."
        ),
    ] = 1,
    partial: Annotated[
        bool,
        typer.Option(
            help="Estimate what can be estimated instead of failing when some job types or partners lack measurements."
        ),
    ] = False,
    holdout: Annotated[
        float, typer.Option(help="Fraction of measured pairs hidden and re-estimated to report an error (0 = skip).")
    ] = 0.1,
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Fill every missing co-location entry from the measured ones.

    Builds, per scale factor, the matrix of normalised co-location factors
    (pair throughput / solo throughput) over job types x (worker type,
    partner), completes it with alternating least squares on a biased low-rank
    model, clips to [0, 1] and writes throughput = factor x solo with status
    and source 'estimated' and the method in device_name. Measured rows are
    kept as they are; solo rows are never estimated.

    Example:

        rota table estimate measured.csv --out full.csv --rank 4
    """
    if zeros not in ZERO_MODES:
        raise InputError(f"unknown value {zeros!r} (expected one of {', '.join(ZERO_MODES)})", field="--zeros")
    if min_measured < 1:
        raise InputError(f"must be >= 1, got {min_measured}", field="--min-measured")
    if out.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise InputError("unsupported table format (use .csv or .parquet)", path=out)
    source = _read(table)
    full, report = estimate_table(
        source, rank=rank, seed=seed, reg=reg, zeros=zeros, min_measured=min_measured, partial=partial, holdout=holdout
    )
    write_table(full, out)
    if json_output:
        typer.echo(json.dumps({"input": str(table), "output": str(out), **report.to_dict()}, indent=2))
    else:
        print_summary(report, table, out)


def print_summary(report: EstimateReport, table: Path, out: Path, console: Console | None = None) -> None:
    console = console or Console()
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
    console.print(view)
    for g in report.groups:
        if g.note and not g.note.startswith("complete"):
            console.print(f"scale factor {g.scale_factor}: {g.note}")
        if g.unestimable_entries and g.to_measure:
            more = " ..." if len(g.to_measure) > _SHOWN else ""
            console.print(
                f"  scale factor {g.scale_factor}: {g.unestimable_entries} entries not estimated; "
                f"measure next ({len(g.to_measure)}): " + "; ".join(g.to_measure[:_SHOWN]) + more
            )
    if report.missing_solo:
        shown = ", ".join(report.missing_solo[:_SHOWN])
        more = f" and {len(report.missing_solo) - _SHOWN} more" if len(report.missing_solo) > _SHOWN else ""
        console.print(f"solo rows missing (not estimated; measure them): {shown}{more}")
    holdouts = [g.holdout for g in report.groups if g.holdout]
    if holdouts:
        console.print(
            f"holdout: {holdouts[0].fraction:.0%} of measured pairs hidden and re-estimated; "
            "error is |estimated - measured| of the normalised factor"
        )
    console.print(f"{report.measured_entries} measured + {report.estimated_entries} estimated entries -> {out}")
