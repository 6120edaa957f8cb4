"""Schedule files (DESIGN.md §3): `rota.schedule/v1` JSON and its flat CSV view.

A launcher acts on a schedule with no other input: every round lists which
jobs run on which GPUs of which node, from when to when, for how many steps.
"""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

from planner.formats.atomic import write_text_atomic

SCHEDULE_FORMAT = "rota.schedule/v1"
CSV_COLUMNS = ["round", "start_s", "end_s", "job_id", "worker_type", "node", "gpu", "planned_steps", "co_located_with"]


def build_schedule(*args: Any, **kwargs: Any) -> dict:
    """Moved to planner.modes.plan (it reads an engine run); kept here until every caller moved."""
    from planner.modes.plan import build_schedule as build

    return build(*args, **kwargs)


def file_digest(path: str | os.PathLike) -> str:
    """Moved to planner.formats.files."""
    from planner.formats.files import file_digest as digest

    return digest(path)


def schedule_csv(schedule: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in schedule["rounds"]:
        for a in r["assignments"]:
            for jid in a["jobs"]:
                partners = ";".join(other for other in a["jobs"] if other != jid)
                for gpu in a["gpus"]:
                    writer.writerow(
                        [
                            r["index"],
                            f"{r['start_s']:.3f}",
                            f"{r['end_s']:.3f}",
                            jid,
                            a["worker_type"],
                            gpu["node"],
                            gpu["gpu"],
                            a["planned_steps"][jid],
                            partners,
                        ]
                    )
    return buffer.getvalue()


def write_schedule(schedule: dict, path: str | os.PathLike, csv_path: str | os.PathLike | None = None) -> None:
    write_text_atomic(path, json.dumps(schedule, indent=1) + "\n")
    if csv_path is not None:
        write_text_atomic(csv_path, schedule_csv(schedule))
