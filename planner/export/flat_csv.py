"""Flat CSV export: one row per (round, job, GPU), with the round length and the
job's command, for any launcher script (same columns as `rota plan --csv`, plus
`round_s` and `command`).

Spreadsheets run a cell that starts with '=', '+', '-', '@', a tab or a carriage
return as a formula (CSV injection). Following OWASP's recommendation, such a cell of
a text column (job ids, worker types, nodes, partners, commands: the user's strings)
is written with a single quote in front ('=cmd|...' becomes "'=cmd|..."); a script
that reads those columns removes one leading quote where the next character is one
of these. The numeric columns rota writes never start with one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from planner.export.common import ExportContext, require_valid, write_files
from planner.formats.schedule import CSV_COLUMNS, csv_rows, csv_text, spreadsheet_safe
from planner.formats.schedule import TEXT_COLUMNS as PLAN_TEXT_COLUMNS

EXPORT_COLUMNS = CSV_COLUMNS + ["round_s", "command"]
TEXT_COLUMNS = (*PLAN_TEXT_COLUMNS, "command")


def schedule_rows(context: ExportContext) -> Iterator[dict[str, Any]]:
    round_s = f"{context.round_s:g}"
    job_id = CSV_COLUMNS.index("job_id")
    for row in csv_rows(context.document.rounds):
        yield dict(zip(EXPORT_COLUMNS, [*row, round_s, context.commands[row[job_id]]]))


def export_csv(context: ExportContext, out_dir: Path, **_ignored: Any) -> list[Path]:
    require_valid(context)
    rows = (
        [spreadsheet_safe(row[c]) if c in TEXT_COLUMNS else row[c] for c in EXPORT_COLUMNS]
        for row in schedule_rows(context)
    )
    return write_files(out_dir, {"schedule.csv": csv_text(EXPORT_COLUMNS, rows)})
