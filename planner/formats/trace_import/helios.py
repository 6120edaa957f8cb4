"""SenseTime's Helios traces: `cluster_log.csv` of https://github.com/S-Lab-System-Group/HeliosData.

One CSV per cluster (Earth, Saturn, Uranus, Venus), with a header; the documented columns are
job_id, user, vc, gpu_num, cpu_num, node_num, state (COMPLETED, CANCELLED, FAILED, TIMEOUT,
NODE_FAIL), submit_time, start_time, end_time ('YYYY-MM-DD HH:MM:SS'), duration (seconds,
end_time - start_time) and queue (seconds, start_time - submit_time). Columns not used here
(cpu_num, node_num, queue, or a jobname some copies carry) may be present or not.

A job's run time is its `duration` (where blank: end_time - start_time), its GPUs `gpu_num`
(the CPU-only jobs, gpu_num 0, are most of the trace), its arrival `submit_time`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

from planner.errors import InputError
from planner.formats.fields import Where, number_text, short
from planner.formats.trace_import.common import (
    BadRows,
    SourceJob,
    csv_rows,
    entity_text,
    header_index,
    id_text,
    is_missing,
    parse_gpus,
    parse_time,
    status_text,
)

STATUSES = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL")
ENTITY_FROM = ("vc", "user", "none")
REQUIRED = ("job_id", "gpu_num", "state", "submit_time")


def _cell(cells: list[str], index: dict[str, int], name: str) -> str | None:
    i = index.get(name)
    return None if i is None else cells[i]


def _duration(cells: list[str], index: dict[str, int], at: Where) -> float | None:
    raw = _cell(cells, index, "duration")
    if not is_missing(raw):
        assert raw is not None
        seconds = number_text(raw)
        if seconds is None or not math.isfinite(seconds):
            raise at.error("duration", f"expected seconds, got {short(raw)}")
        return seconds
    start = parse_time(_cell(cells, index, "start_time"), at, "start_time")
    end = parse_time(_cell(cells, index, "end_time"), at, "end_time")
    return None if start is None or end is None else end - start


def _job(cells: list[str], index: dict[str, int], at: Where, entity_from: str) -> SourceJob:
    if len(cells) != len(index):
        raise at.error(None, f"has {len(cells)} cells, the header has {len(index)}")
    entity = None if entity_from == "none" else entity_text(_cell(cells, index, entity_from), at, entity_from)
    return SourceJob(
        at,
        id_text(_cell(cells, index, "job_id"), at, "job_id"),
        parse_time(_cell(cells, index, "submit_time"), at, "submit_time"),
        duration_s=_duration(cells, index, at),
        gpus=parse_gpus(_cell(cells, index, "gpu_num"), at, "gpu_num"),
        status=status_text(_cell(cells, index, "state")),
        entity=entity,
    )


def read_helios(path: str | os.PathLike, bad: BadRows, *, entity_from: str = "vc") -> Iterator[SourceJob]:
    """The jobs of a Helios `cluster_log.csv` in file order (rows count from 1 after the header)."""
    rows = csv_rows(path, header=True)
    try:
        _, header = next(rows)
    except StopIteration:
        raise InputError("cannot parse: empty file (no header row)", path=path) from None
    required = REQUIRED + (() if entity_from == "none" else (entity_from,))
    index = header_index(path, header, required)
    if "duration" not in index and not {"start_time", "end_time"} <= set(index):
        raise InputError("missing column (give duration, or start_time and end_time)", path=path, field="duration")
    for at, cells in rows:
        try:
            job = _job(cells, index, at, entity_from)
        except InputError as exc:
            bad.add(exc)
            continue
        yield job
