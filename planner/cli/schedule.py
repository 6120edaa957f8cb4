"""`rota schedule validate|show`: check and view schedule files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from planner.cli.common import marked_out, out, styled
from planner.export import load_context
from planner.report.timeline import plot_gantt, round_slice, timeline_tables


def schedule_validate_command(
    schedule: Annotated[
        Path, typer.Argument(help="Schedule JSON (rota.schedule/v1).", metavar="SCHEDULE", show_default=False)
    ],
    cluster: Annotated[Optional[Path], typer.Option(help="Cluster spec (default: the one the schedule names).")] = None,
    table: Annotated[Optional[Path], typer.Option(help="Throughput table (default: the schedule's).")] = None,
    jobs: Annotated[Optional[Path], typer.Option(help="Job list (default: the schedule's).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the violations as JSON.")] = False,
):
    """Check a schedule against its cluster, table and jobs; exit 1 with the list of violations.

    Rules: no GPU double-booked in a round, gangs whole and on one worker type, co-located
    pairs only where the table has a pair throughput, planned steps <= steps left, rounds
    contiguous. Example: rota schedule validate schedule.json
    """

    context = load_context(schedule, cluster=cluster, table=table, jobs=jobs, need_commands=False, need_table=True)
    problems = context.violations()
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "schedule": str(schedule),
                    "valid": not problems,
                    "skipped": context.skipped,
                    "violations": [v.to_dict() for v in problems],
                }
            )
        )
    else:
        for note in context.skipped:
            out.print(f"note: skipped {note}")
        if problems:
            grid = Table(title=f"{schedule}: {len(problems)} violation(s)")
            for column in ("round", "rule", "what"):
                grid.add_column(column)
            for v in problems:
                grid.add_row("-" if v.round is None else str(v.round), v.kind, v.message)
            out.print(grid)
        else:
            n = sum(len(r["assignments"]) for r in context.schedule["rounds"])
            out.print(
                styled("[green]ok[/] {}: {} rounds, {} assignments", schedule, len(context.schedule["rounds"]), n)
            )
    if problems:
        raise typer.Exit(1)


def schedule_show_command(
    schedule: Annotated[
        Path, typer.Argument(help="Schedule JSON (rota.schedule/v1).", metavar="SCHEDULE", show_default=False)
    ],
    cluster: Annotated[Optional[Path], typer.Option(help="Cluster spec (default: the one the schedule names).")] = None,
    rounds: Annotated[
        Optional[str], typer.Option(help="Rounds to show, FIRST:LAST (inclusive) or one index; default: the first 30.")
    ] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Also draw a Gantt chart (PNG) here; needs matplotlib.")] = None,
):
    """Timeline of a schedule: per worker type, which job held which GPU in each round.

    Example: rota schedule show schedule.json --rounds 0:9 --plot gantt.png
    """

    context = load_context(schedule, cluster=cluster, need_commands=False)
    context.document  # noqa: B018 - checks the shape of every round (InputError naming the field)
    chosen = round_slice(context.schedule["rounds"], rounds)
    for renderable in timeline_tables(context.schedule, context.cluster, chosen):
        marked_out.print(renderable)
    if rounds is None and len(chosen) < len(context.schedule["rounds"]):
        out.print(
            f"(rounds {chosen[0]['index']}-{chosen[-1]['index']} of {len(context.schedule['rounds'])}; "
            "see more with --rounds FIRST:LAST)"
        )
    if plot is not None:
        plot_gantt(context.schedule, context.cluster, chosen if rounds else context.schedule["rounds"], plot)
        out.print(f"wrote {plot}")
