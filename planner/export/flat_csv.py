"""Flat CSV export: one row per (round, job, GPU), with the round length and the
job's command, for any launcher script (same columns as `rota plan --csv`, plus
`round_s` and `command`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from planner.export.common import ExportContext, require_valid, write_files
from planner.formats.schedule import CSV_COLUMNS, csv_rows, csv_text

EXPORT_COLUMNS = CSV_COLUMNS + ["round_s", "command"]


def schedule_rows(context: ExportContext) -> Iterator[dict[str, Any]]:
    round_s = f"{context.round_s:g}"
    job_id = CSV_COLUMNS.index("job_id")
    for row in csv_rows(context.document.rounds):
        yield dict(zip(EXPORT_COLUMNS, [*row, round_s, context.commands[row[job_id]]]))


def export_csv(context: ExportContext, out_dir: Path, **_ignored: Any) -> list[Path]:
    require_valid(context)
    rows = ([row[c] for c in EXPORT_COLUMNS] for row in schedule_rows(context))
    return write_files(out_dir, {"schedule.csv": csv_text(EXPORT_COLUMNS, rows)})
