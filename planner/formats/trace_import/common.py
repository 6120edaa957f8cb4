"""What every trace importer shares: the job a reader yields, the options, the summary, bad rows.

A reader (one module per format) turns a public trace into `SourceJob`s, one per job of the
trace, in file order; `planner.formats.trace_import.convert` then decides which become rota
jobs and how (`ImportOptions`), and counts every decision in an `ImportSummary`.
"""

from __future__ import annotations

import csv
import math
import os
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from planner.errors import InputError
from planner.formats.fields import MAX_TIME_S, Where, number_text, short
from planner.formats.files import read_text
from planner.formats.table import JobType

SUMMARY_FORMAT = "rota.trace-import/v1"

# Bounds (a hostile or mistaken input must not make an import run out of memory or forever).
MAX_IMPORT_JOBS = 1_000_000  # jobs one import may keep (rota simulates far fewer)
MAX_GPUS = 100_000  # --max-gpus
BAD_ROWS_KEPT = 20  # unparseable rows whose error the summary quotes (the rest are counted)

# Why a job of the trace is not in the output: summary key -> what it means.
DROP_REASONS: dict[str, str] = {
    "bad_row": "unparseable row (--skip-bad-rows)",
    "no_submit_time": "no submission time",
    "no_attempts": "no scheduling attempt recorded",
    "running": "still running when the trace was taken (no end time)",
    "no_tasks": "no task rows",
    "no_duration": "no run time (a start or end time missing)",
    "zero_duration": "run time 0 or negative",
    "zero_steps": "0 steps",
    "zero_gpus": "no GPUs",
    "fractional_gpus": "a fractional GPU share (--fractional-gpus drop)",
    "status": "status not in --status",
    "entity": "entity not in --entity",
    "short": "shorter than --min-duration-s",
    "window": "submitted outside --start-s/--end-s",
    "over_max_gpus": "more GPUs than --max-gpus (--max-gpus-action drop)",
    "unmeasured": "GPU count not in the table (--unmeasured drop)",
    "too_many_steps": "more steps than a job may have (1e12)",
    "max_jobs": "after the first --max-jobs jobs",
}

UNMEASURED_ACTIONS = ("keep", "cap", "drop")
MAX_GPUS_ACTIONS = ("cap", "drop")


@dataclass(slots=True)
class SourceJob:
    """One job of a public trace, as its reader understood it."""

    row: Where  # where it was read (file and row, for messages)
    job_id: str
    submit_s: float | None  # submission time on the trace's own clock (seconds)
    duration_s: float | None = None  # run time (traces of real clusters)
    gpus: int | None = None
    status: str | None = None
    entity: str | None = None
    problem: str | None = None  # a DROP_REASONS key found while reading
    job_type: JobType | None = None  # given by the trace (Gavel's); None: drawn from the table
    total_steps: float | None = None  # given by the trace (Gavel's)
    priority_weight: float = 1.0
    slo: float | None = None  # Gavel: a multiple of the job's run time on the reference type


@dataclass(frozen=True)
class ImportOptions:
    """Every decision of an import (the command's options)."""

    seed: int = 0
    job_types: tuple[str, ...] | None = None  # labels or model names; None: every scale-1 type
    reference_type: str | None = None  # None: default_reference_type(table)
    max_gpus: int | None = None
    max_gpus_action: str = "cap"  # cap | drop
    unmeasured: str = "keep"  # keep | cap | drop
    statuses: tuple[str, ...] | None = None  # None: every status
    entities: tuple[str, ...] | None = None  # None: every entity
    start_s: float | None = None  # seconds after the trace's first submission
    end_s: float | None = None
    max_jobs: int | None = None
    min_duration_s: float = 0.0
    skip_bad_rows: bool = False

    def __post_init__(self) -> None:
        if self.unmeasured not in UNMEASURED_ACTIONS:
            raise InputError(
                f"expected one of {', '.join(UNMEASURED_ACTIONS)}, got {short(self.unmeasured)}", field="--unmeasured"
            )
        if self.max_gpus_action not in MAX_GPUS_ACTIONS:
            raise InputError(
                f"expected one of {', '.join(MAX_GPUS_ACTIONS)}, got {short(self.max_gpus_action)}",
                field="--max-gpus-action",
            )
        if self.start_s is not None and self.end_s is not None and self.end_s <= self.start_s:
            raise InputError(f"must be after --start-s ({self.start_s:g}), got {self.end_s:g}", field="--end-s")

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "job_types": None if self.job_types is None else list(self.job_types),
            "reference_type": self.reference_type,
            "max_gpus": self.max_gpus,
            "max_gpus_action": self.max_gpus_action,
            "unmeasured": self.unmeasured,
            "status": None if self.statuses is None else list(self.statuses),
            "entity": None if self.entities is None else list(self.entities),
            "start_s": self.start_s,
            "end_s": self.end_s,
            "max_jobs": self.max_jobs,
            "min_duration_s": self.min_duration_s,
            "skip_bad_rows": self.skip_bad_rows,
        }


@dataclass
class ImportSummary:
    """What an import read, kept, dropped (and why) and changed."""

    source: str  # the format: gavel, philly, helios, alibaba-pai
    inputs: list[str]
    details: dict[str, Any] = field(default_factory=dict)  # the format's own options
    read: int = 0
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    bad_rows: list[dict[str, Any]] = field(default_factory=list)  # the first BAD_ROWS_KEPT
    statuses: Counter[str] = field(default_factory=Counter)  # of the jobs read
    gpus_capped_max: int = 0  # above --max-gpus, lowered to it
    gpus_capped_unmeasured: int = 0  # not in the table, lowered (--unmeasured cap)
    unmeasured_kept: int = 0  # not in the table, kept (--unmeasured keep)
    steps_extrapolated: int = 0  # drawn types kept unmeasured: steps from the nearest measured scale
    fractional_gpus: int = 0  # jobs with a fractional GPU share, rounded up
    types_drawn: int = 0
    types_redrawn: int = 0  # jobs whose first drawn type was not measured at their GPU count
    ids_renamed: int = 0  # job ids seen before, given a suffix
    rows_skipped: int = 0  # unparseable rows that are not jobs (task rows), skipped (--skip-bad-rows)
    reference_type: str | None = None
    first_submit_s: float | None = None  # on the trace's clock: the 0 of --start-s/--end-s
    arrival_offset_s: float | None = None  # the first kept job's submission after first_submit_s
    scale_factors: Counter[int] = field(default_factory=Counter)
    job_types: Counter[str] = field(default_factory=Counter)
    entities: Counter[str] = field(default_factory=Counter)
    last_arrival_s: float = 0.0
    total_duration_s: float = 0.0  # over kept jobs with a run time
    with_duration: int = 0

    def drop(self, reason: str) -> None:
        self.dropped[reason] += 1

    def bad_row(self, exc: InputError, *, job: bool = True) -> None:
        if job:
            self.dropped["bad_row"] += 1
        else:
            self.rows_skipped += 1
        if len(self.bad_rows) < BAD_ROWS_KEPT:
            self.bad_rows.append({"file": str(exc.path), "row": exc.row, "field": exc.field, "error": str(exc)})

    def to_json(
        self, output: str | None = None, table: str | None = None, options: ImportOptions | None = None
    ) -> dict[str, Any]:
        mean = self.total_duration_s / self.with_duration if self.with_duration else None
        return {
            "format": SUMMARY_FORMAT,
            "source": self.source,
            "inputs": self.inputs,
            "output": output,
            "table": table,
            "reference_type": self.reference_type,
            "options": {**(options.to_json() if options else {}), **self.details},
            "jobs_read": self.read,
            "jobs_kept": self.kept,
            "jobs_dropped": sum(self.dropped.values()),
            "dropped": {k: self.dropped[k] for k in DROP_REASONS if self.dropped[k]},
            "bad_rows": self.bad_rows,
            "statuses_read": dict(sorted(self.statuses.items())),
            "gpus_capped_max": self.gpus_capped_max,
            "gpus_capped_unmeasured": self.gpus_capped_unmeasured,
            "unmeasured_kept": self.unmeasured_kept,
            "steps_extrapolated": self.steps_extrapolated,
            "fractional_gpus_rounded_up": self.fractional_gpus,
            "types_drawn": self.types_drawn,
            "types_redrawn": self.types_redrawn,
            "ids_renamed": self.ids_renamed,
            "other_rows_skipped": self.rows_skipped,
            "first_submit_s": self.first_submit_s,
            "arrival_offset_s": self.arrival_offset_s,
            "last_arrival_s": self.last_arrival_s,
            "mean_duration_s": mean,
            "scale_factors": {str(k): v for k, v in sorted(self.scale_factors.items())},
            "job_types": dict(sorted(self.job_types.items())),
            "entities": len(self.entities),
        }


class BadRows:
    """Unparseable rows: an error (the default), or with --skip-bad-rows dropped and counted."""

    def __init__(self, summary: ImportSummary, skip: bool):
        self.summary, self.skip = summary, skip

    def add(self, exc: InputError, *, job: bool = True) -> None:
        """`exc` about a row that is a job (`job`: counted as read and dropped) or another row."""
        if not self.skip:
            raise exc
        self.summary.read += job
        self.summary.bad_row(exc, job=job)


# --------------------------------------------------------------------------- cells

_MISSING = ("", "none", "null", "nan", "nat", "na")
_EPOCH = datetime(1970, 1, 1)


def is_missing(value: Any) -> bool:
    """A value a trace writes for "not recorded": null, '', None, NaN, NA."""
    if value.__class__ is str:
        text = value.strip()
        return not text or (len(text) <= 4 and text.lower() in _MISSING)
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, str) and value.strip().lower() in _MISSING


def parse_time(value: Any, at: Where, field: str) -> float | None:
    """Seconds on the trace's clock, or None when not recorded. A number is taken as seconds;
    a date and time ('2017-10-07 01:12:09', ISO 8601) as seconds since 1970 (UTC unless it
    names its zone: differences are what an import uses)."""
    if is_missing(value):
        return None
    if isinstance(value, bool):
        raise at.error(field, f"expected a date and time or seconds, got {short(value)}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _text_time(value, at, field)
    else:
        raise at.error(field, f"expected a date and time or seconds, got {short(value)}")
    if not math.isfinite(seconds) or abs(seconds) > MAX_TIME_S:
        raise at.error(field, f"time {short(value)} is out of range (at most {MAX_TIME_S:g} s)")
    return seconds


def _text_time(value: str, at: Where, field: str) -> float:
    if ":" not in value:  # a date has a time of day; seconds have no colon
        number = number_text(value)
        if number is not None:
            return number
    try:
        stamp = datetime.fromisoformat(value.strip())
    except ValueError:
        raise at.error(
            field, f"expected a date and time such as 2017-10-07 01:12:09, or seconds, got {short(value)}"
        ) from None
    if stamp.tzinfo is not None:
        return stamp.timestamp()
    return (stamp - _EPOCH).total_seconds()


def parse_gpus(value: Any, at: Where, field: str) -> int | None:
    """A GPU count: a whole number >= 0, None when not recorded."""
    if is_missing(value):
        return None
    number = number_text(value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise at.error(field, f"expected a whole number of GPUs, got {short(value)}")
    if not math.isfinite(number) or number < 0 or not float(number).is_integer() or number > 1e9:
        raise at.error(field, f"expected a whole number of GPUs >= 0, got {short(value)}")
    return int(number)


def entity_text(value: Any, at: Where, field: str) -> str | None:
    """An entity (virtual cluster, user) as text; None when not recorded."""
    if is_missing(value):
        return None
    text = str(value).strip()
    if not text.isprintable() or len(text) > 253:
        raise at.error(field, f"{short(text)} is not a valid name (printable, at most 253 characters)")
    return sys.intern(text)  # a few names, repeated on every job


def status_text(value: Any) -> str | None:
    """A job's final status as the trace spells it; None when not recorded."""
    return None if is_missing(value) else sys.intern(str(value).strip())


def id_text(value: Any, at: Where, field: str) -> str:
    """A job id: required, printable, at most 253 characters."""
    if is_missing(value):
        raise at.error(field, "is required")
    text = str(value).strip()
    if not text.isprintable() or len(text) > 253:
        raise at.error(field, f"{short(text)} is not a valid job id (printable, at most 253 characters)")
    return text


def csv_rows(path: str | os.PathLike, *, header: bool) -> Iterator[tuple[Where, list[str]]]:
    """The rows of a CSV file as (where, cells), blank lines skipped; strict quoting. Rows count
    data rows from 1 (a header, when `header`, is row 0, as rota's other CSV readers count)."""
    text = read_text(path, "trace").removeprefix("\ufeff")
    reader = csv.reader(_lines(text), strict=True)
    row = 0 if header else 1
    try:
        for cells in reader:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            yield Where(path, row if row else None), cells
            row += 1
    except csv.Error as exc:
        raise InputError(f"cannot parse: {exc} (a quote not closed?)", path=path, row=row or None) from None


def _lines(text: str) -> Iterator[str]:
    """The lines of `text` with their ends, one at a time (io.StringIO would hold a copy four
    times the size of an ASCII text)."""
    start, size = 0, len(text)
    while start < size:
        end = text.find("\n", start)
        end = size if end < 0 else end + 1
        yield text[start:end]
        start = end


def header_index(path: object, names: Sequence[str], required: Sequence[str]) -> dict[str, int]:
    """Column name -> position; an error naming the first required column that is missing."""
    index: dict[str, int] = {}
    for i, name in enumerate(names):
        name = name.strip()
        if name in index:
            raise InputError("column named twice in the header", path=path, field=short(name, 40).strip("'\""))
        index[name] = i
    for name in required:
        if name not in index:
            have = short(", ".join(index), 200)
            raise InputError(f"missing column (the header has {have})", path=path, field=name)
    return index


def split_list(text: str | None, option: str) -> tuple[str, ...] | None:
    """A comma-separated option value: its items, stripped; None when not given."""
    if text is None:
        return None
    items = tuple(item.strip() for item in text.split(","))
    if not all(items):
        raise InputError(f"an empty item in {short(text)}", field=option)
    if len(set(items)) != len(items):
        raise InputError(f"an item given twice in {short(text)}", field=option)
    if len(items) > 10_000:
        raise InputError(f"at most 10000 items, got {len(items)}", field=option)
    return items


def choice(value: str, choices: Sequence[str], option: str) -> str:
    """`value` if it is one of `choices` (an option's fixed values), else an error naming the option."""
    if value not in choices:
        raise InputError(f"expected one of {', '.join(choices)}, got {short(value)}", field=option)
    return value
