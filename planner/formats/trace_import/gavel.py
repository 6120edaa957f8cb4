"""Gavel's traces: the 7-column msr traces of Philly's virtual clusters, and 10-column generated ones.

`scheduler/traces/msr/seed=N/<vc>.trace` in https://github.com/stanford-futuredata/gavel (MIT
licence): one file per Philly virtual cluster, one job per line, 7 tab-separated columns

    job_type  command  num_steps_arg  needs_data_dir  total_steps  arrival_time  scale_factor

(the order Gavel's `parse_trace` read them in before its traces got 10 columns; a scale factor
of 0 was skipped there, and is dropped here as a job with no GPUs). Each file's arrivals count
from its own first job. The 10-column traces Gavel's generator writes (and `rota trace
generate`) are read with `planner.formats.trace`'s line parser. The job type comes from the
trace; a file's stem (its virtual cluster) becomes the jobs' entity.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from planner.errors import InputError
from planner.formats.fields import MAX_STEPS, MAX_TIME_S, TRACE, Where, parse_float, parse_int
from planner.formats.files import read_text
from planner.formats.table import JobType, split_model_label
from planner.formats.trace import TRACE_COLUMNS, _columns, _parse_line
from planner.formats.trace_import.common import BadRows, SourceJob

MSR_COLUMNS = [
    "job_type",
    "command",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "arrival_time",
    "scale_factor",
]
ENTITY_FROM = ("file", "none")


def _label(text: str, at: Where) -> JobType:
    label = text.strip()
    if not label or not label.isprintable():
        raise at.error("job_type", "is required (a job type such as 'ResNet-18 (batch size 64)')")
    model, batch = split_model_label(label)
    return JobType(model, batch, 1)


def _msr_job(parts: list[str], at: Where, job_id: str, entity: str | None) -> SourceJob:
    base = _label(parts[0], at)
    steps = parse_int(parts[4], at, "total_steps", minimum=0, wording=TRACE)
    if steps > MAX_STEPS:
        raise at.error("total_steps", f"{steps} steps, more than the {MAX_STEPS:g} a job may have")
    arrival = parse_float(parts[5], at, "arrival_time", minimum=0, wording=TRACE)
    if arrival > MAX_TIME_S:
        raise at.error("arrival_time", f"{arrival:g} s is more than {MAX_TIME_S:g} s")
    scale = parse_int(parts[6], at, "scale_factor", minimum=0, wording=TRACE)
    return SourceJob(
        at,
        job_id,
        arrival,
        gpus=scale,
        entity=entity,
        problem="zero_steps" if steps == 0 else None,
        job_type=base,
        total_steps=float(steps),
    )


def _generated_job(line: str, at: Where, job_id: str, entity: str | None) -> SourceJob:
    parsed = _parse_line(_columns(line, at), at)
    model, batch = split_model_label(parsed.label)
    if parsed.arrival_s > MAX_TIME_S:
        raise at.error("arrival_s", f"{parsed.arrival_s:g} s is more than {MAX_TIME_S:g} s")
    return SourceJob(
        at,
        job_id,
        parsed.arrival_s,
        gpus=parsed.scale_factor,
        entity=entity,
        job_type=JobType(model, batch, 1),
        total_steps=float(parsed.total_steps),
        priority_weight=parsed.priority_weight,
        slo=parsed.slo if parsed.slo > 0 else None,
    )


def _job(line: str, at: Where, job_id: str, entity: str | None) -> SourceJob:
    parts = line.split("\t")
    if len(parts) == len(MSR_COLUMNS):
        return _msr_job(parts, at, job_id, entity)
    if len(parts) == len(TRACE_COLUMNS):
        return _generated_job(line, at, job_id, entity)
    raise at.error(
        None,
        f"expected 7 tab-separated columns (Gavel's msr traces: {', '.join(MSR_COLUMNS)}) or 10 "
        f"(generated traces: {', '.join(TRACE_COLUMNS)}), found {len(parts)}",
    )


def read_gavel(paths: Sequence[str | os.PathLike], bad: BadRows, *, entity_from: str = "file") -> Iterator[SourceJob]:
    """The jobs of Gavel trace files, file by file; job ids are '<stem>-<n>' (n: the job's
    0-based position in its file, Gavel's job id)."""
    stems = [Path(p).stem for p in paths]
    for path, stem in zip(paths, stems):
        text = read_text(path, "trace")
        index = 0
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            at = Where(path, line_no)
            job_id = f"{stem}-{index}"
            index += 1
            try:
                job = _job(line, at, job_id, stem if entity_from == "file" else None)
            except InputError as exc:
                bad.add(exc)
                continue
            yield job
