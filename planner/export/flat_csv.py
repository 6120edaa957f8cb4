"""Flat CSV export: one row per (round, job, GPU), with the round length and the
job's command, for any launcher script (same columns as `rota plan --csv`, plus
`round_s` and `command`)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from planner.export.common import ExportContext, require_valid, write_files
from planner.formats.schedule import CSV_COLUMNS

EXPORT_COLUMNS = CSV_COLUMNS + ["round_s", "command"]


def schedule_rows(context: ExportContext):
    for r in context.schedule["rounds"]:
        for a in r["assignments"]:
            for jid in a["jobs"]:
                partners = ";".join(o for o in a["jobs"] if o != jid)
                for g in a["gpus"]:
                    yield {
                        "round": r["index"],
                        "start_s": f"{r['start_s']:.3f}",
                        "end_s": f"{r['end_s']:.3f}",
                        "job_id": jid,
                        "worker_type": a["worker_type"],
                        "node": g["node"],
                        "gpu": g["gpu"],
                        "planned_steps": a["planned_steps"][jid],
                        "co_located_with": partners,
                        "round_s": f"{context.round_s:g}",
                        "command": context.commands[jid],
                    }


def export_csv(context: ExportContext, out_dir: Path, **_ignored) -> list[Path]:
    require_valid(context)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(schedule_rows(context))
    return write_files(out_dir, {"schedule.csv": buffer.getvalue()})
