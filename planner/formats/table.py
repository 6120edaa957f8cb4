"""The throughput table: the contract between the profiler and the planner.

Long format (DESIGN.md §3), one row per (worker_type, model, batch_size,
scale_factor, partner) measurement, read and written as CSV or Parquet.
`throughput` is steps/s of the whole job (all its GPUs together). A row with a
partner is the throughput of `model` while co-located with the partner on the
same device(s); a co-location gives two rows, one per member.

A throughput of 0 or a status other than ok/estimated means "cannot run there";
`ThroughputTable.solo` and `.pair` return 0.0 for such rows.

This module imports neither torch nor anything from the profiler.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, get_args

import numpy as np

from planner.errors import InputError
from planner.formats.atomic import write_with
from planner.formats.fields import (
    TABLE_INTEGER,
    TABLE_NUMBER,
    Where,
    is_blank,
    optional_float,
    optional_int,
    optional_text,
    parse_choice,
    parse_float,
    parse_int,
    required_text,
)
from planner.formats.files import read_bytes, read_csv_records

if TYPE_CHECKING:  # pandas costs half a second to import; only the file readers and writers need it
    import pandas as pd

TABLE_FORMAT = "rota.table/v1"

KEY_COLUMNS = ["worker_type", "model", "batch_size", "scale_factor", "partner_model", "partner_batch_size"]
VALUE_COLUMNS = [
    "throughput",
    "status",
    "samples_per_s",
    "step_time_median_s",
    "step_time_iqr_s",
    "n_steps",
    "peak_memory_bytes",
]
PROVENANCE_COLUMNS = ["source", "device_name", "host", "torch_version", "measured_at"]
# Optional, solo rows only: seconds a (re)start of the job costs on that worker type (blank: unknown).
# startup_s: process start to the first steady step (imports, model build, warm-up).
RESTART_COLUMNS = ["startup_s", "checkpoint_save_s", "checkpoint_load_s"]
NOTE_COLUMNS = ["notes"]  # free text, e.g. which user workload or command was measured
COLUMNS = KEY_COLUMNS + VALUE_COLUMNS + PROVENANCE_COLUMNS + RESTART_COLUMNS + NOTE_COLUMNS
REQUIRED_COLUMNS = ["worker_type", "model", "scale_factor", "throughput"]

# What a row's status and source may say (written verbatim in table files).
Status = Literal["ok", "oom", "failed", "estimated"]
Source = Literal["measured", "imported", "estimated", "synthetic", "observed"]  # observed: rates from progress reports
STATUSES: tuple[Status, ...] = get_args(Status)
RUNNABLE_STATUSES: tuple[Status, ...] = ("ok", "estimated")
SOURCES: tuple[Source, ...] = get_args(Source)

_INT_COLUMNS = ("batch_size", "partner_batch_size", "n_steps", "peak_memory_bytes")
_FLOAT_COLUMNS = ("throughput", "samples_per_s", "step_time_median_s", "step_time_iqr_s", *RESTART_COLUMNS)
_GAVEL_NAME = re.compile(r"^(?P<model>.*) \(batch size (?P<bs>\d+)\)$")


class TableRow(TypedDict):
    """One validated row: every column of COLUMNS, None where a file leaves it empty."""

    worker_type: str
    model: str
    batch_size: int | None
    scale_factor: int
    partner_model: str | None
    partner_batch_size: int | None
    throughput: float  # steps/s of the whole job; 0.0 when the status is not runnable
    status: Status
    samples_per_s: float | None
    step_time_median_s: float | None
    step_time_iqr_s: float | None
    n_steps: int | None
    peak_memory_bytes: int | None
    source: Source | None
    device_name: str | None
    host: str | None
    torch_version: str | None
    measured_at: str | None
    startup_s: float | None
    checkpoint_save_s: float | None
    checkpoint_load_s: float | None
    notes: str | None


@dataclass(frozen=True)
class JobType:
    """What the planner schedules by: a model, its batch size and its GPU count."""

    model: str
    batch_size: int | None
    scale_factor: int = 1

    @property
    def name(self) -> str:
        """Gavel-style model name, e.g. 'ResNet-18 (batch size 16)'."""
        return model_label(self.model, self.batch_size)

    @property
    def label(self) -> str:
        return self.name if self.scale_factor == 1 else f"{self.name} x{self.scale_factor}"

    def sort_key(self) -> tuple:
        return (self.model, self.batch_size or 0, self.scale_factor)


def model_label(model: str, batch_size: int | None) -> str:
    return model if batch_size is None else f"{model} (batch size {batch_size})"


def split_model_label(label: str) -> tuple[str, int | None]:
    """Inverse of `model_label`: 'LM (batch size 10)' -> ('LM', 10); 'A3C' -> ('A3C', None)."""
    match = _GAVEL_NAME.match(label)
    if match:
        return match["model"], int(match["bs"])
    return label, None


# --------------------------------------------------------------------------- parsing


def _partner(raw: Mapping[str, Any], at: Where) -> tuple[str | None, int | None]:
    partner = optional_text(raw.get("partner_model"))
    batch = optional_int(raw.get("partner_batch_size"), at, "partner_batch_size", minimum=1, wording=TABLE_INTEGER)
    if partner is None and batch is not None:
        raise at.error("partner_batch_size", "set without partner_model")
    return partner, batch


def _throughput(value: Any, status: Status, at: Where) -> float:
    """Steps/s; required (and positive) exactly when the status says the job runs."""
    runnable = status in RUNNABLE_STATUSES
    if is_blank(value):
        if runnable:
            raise at.error("throughput", f"is required when status is '{status}'")
        return 0.0
    throughput = parse_float(value, at, "throughput", minimum=0, wording=TABLE_NUMBER)
    if runnable and throughput == 0.0:
        raise at.error(
            "throughput", f"is 0 with status '{status}'; mark a job that cannot run with status 'oom' or 'failed'"
        )
    if not runnable and throughput != 0.0:
        raise at.error("throughput", f"must be 0 or empty when status is '{status}'")
    return throughput


def _measure(raw: Mapping[str, Any], at: Where, field: str) -> float | None:
    return optional_float(raw.get(field), at, field, minimum=0, wording=TABLE_NUMBER)


def _count(raw: Mapping[str, Any], at: Where, field: str) -> int | None:
    return optional_int(raw.get(field), at, field, minimum=0, wording=TABLE_INTEGER)


def _restart_times(raw: Mapping[str, Any], at: Where, partner: str | None) -> dict[str, float | None]:
    """The restart columns (seconds, non-negative, finite); only solo rows may set them."""
    times = {field: _measure(raw, at, field) for field in RESTART_COLUMNS}
    if partner is not None:
        for field, value in times.items():
            if value is not None:
                raise at.error(field, "is for solo rows only (leave it empty on a co-location row)")
    return times


def _parse_key(raw: Mapping[str, Any], at: Where) -> tuple:
    """The key fields of a raw record, in row_key's order (InputError if one is bad)."""
    worker_type = required_text(raw.get("worker_type"), at, "worker_type")
    model = required_text(raw.get("model"), at, "model")
    scale = raw.get("scale_factor")
    scale_factor = parse_int(1 if is_blank(scale) else scale, at, "scale_factor", minimum=1, wording=TABLE_INTEGER)
    batch_size = optional_int(raw.get("batch_size"), at, "batch_size", minimum=1, wording=TABLE_INTEGER)
    partner_model, partner_batch_size = _partner(raw, at)
    return worker_type, model, batch_size, scale_factor, partner_model, partner_batch_size


def _parse_row(raw: Mapping[str, Any], *, path: object, row: int) -> TableRow:
    """One raw record (CSV cells or Python values) as a validated row, or InputError.
    Fields are checked in column order, so a row's first fault is the one reported."""
    at = Where(path, row)
    worker_type, model, batch_size, scale_factor, partner_model, partner_batch_size = _parse_key(raw, at)
    status = parse_choice(raw.get("status"), at, "status", STATUSES, what="status") or "ok"
    return TableRow(
        worker_type=worker_type,
        model=model,
        scale_factor=scale_factor,
        batch_size=batch_size,
        partner_batch_size=partner_batch_size,
        partner_model=partner_model,
        status=status,
        throughput=_throughput(raw.get("throughput"), status, at),
        samples_per_s=_measure(raw, at, "samples_per_s"),
        step_time_median_s=_measure(raw, at, "step_time_median_s"),
        step_time_iqr_s=_measure(raw, at, "step_time_iqr_s"),
        n_steps=_count(raw, at, "n_steps"),
        peak_memory_bytes=_count(raw, at, "peak_memory_bytes"),
        source=parse_choice(raw.get("source"), at, "source", SOURCES, what="source"),
        device_name=optional_text(raw.get("device_name")),
        host=optional_text(raw.get("host")),
        torch_version=optional_text(raw.get("torch_version")),
        measured_at=optional_text(raw.get("measured_at")),
        **_restart_times(raw, at, partner_model),  # type: ignore[typeddict-item]  # exactly RESTART_COLUMNS
        notes=optional_text(raw.get("notes")),
    )


def is_estimate(row: Mapping[str, Any]) -> bool:
    """A row that `rota table estimate` (or an import of estimates) wrote, not a measurement."""
    return row["status"] == "estimated" or row["source"] == "estimated"


def row_key(r: Mapping[str, Any]) -> tuple:
    """The key columns (KEY_COLUMNS): a table has one row per key."""
    return (
        r["worker_type"],
        r["model"],
        r["batch_size"],
        r["scale_factor"],
        r["partner_model"],
        r["partner_batch_size"],
    )


def _describe_key(key: tuple) -> str:
    wt, model, bs, s, pm, pbs = key
    text = f"{model_label(model, bs)} x{s} on {wt}"
    return text if pm is None else f"{text} with {model_label(pm, pbs)}"


def validate_records(
    records: Iterable[Mapping[str, Any]], *, columns: Iterable[str], path: object = "<table>"
) -> list[TableRow]:
    """Parse and check raw rows; return normalised rows or raise the first problem as InputError.

    Row numbers in messages count data rows from 1 (the CSV header is not a row).
    """
    rows, problems = check_records(records, columns=columns, path=path)
    if problems:
        raise problems[0]
    return rows


def check_records(
    records: Iterable[Mapping[str, Any]], *, columns: Iterable[str], path: object = "<table>"
) -> tuple[list[TableRow], list[InputError]]:
    """Every problem of a table at once (for `rota table validate`), with the rows that parsed."""
    columns = list(columns)
    problems = [
        InputError(f"unknown column (expected a subset of: {', '.join(COLUMNS)})", path=path, field=column)
        for column in columns
        if column not in COLUMNS
    ]
    missing = [column for column in REQUIRED_COLUMNS if column not in columns]
    if missing:  # every row would fail on the same field: say it once
        return [], problems + [InputError("required column is missing", path=path, field=c) for c in missing]

    rows: list[TableRow] = []
    first_seen: dict[tuple, int] = {}
    for index, raw in enumerate(records, start=1):
        try:
            parsed = _parse_row(raw, path=path, row=index)
        except InputError as exc:
            problems.append(exc)
            try:  # a row whose key is sound still counts as present for its partners' checks
                first_seen.setdefault(_parse_key(raw, Where(path, index)), index)
            except InputError:
                pass
            continue
        key = row_key(parsed)
        if key in first_seen:
            problems.append(
                InputError(
                    f"duplicate of row {first_seen[key]} ({_describe_key(key)})",
                    path=path,
                    row=index,
                    field="worker_type",
                )
            )
            continue
        first_seen[key] = index
        rows.append(parsed)
    problems += _partner_problems(first_seen, path)
    return rows, problems


def _partner_problems(first_seen: Mapping[tuple, int], path: object) -> list[InputError]:
    """A co-location row needs its partner's solo row and the mirror row."""
    problems = []
    for (worker_type, model, batch_size, scale, partner, partner_batch), index in first_seen.items():
        if partner is None:
            continue
        partner_solo = (worker_type, partner, partner_batch, scale, None, None)
        mirror = (worker_type, partner, partner_batch, scale, model, batch_size)
        for needed, what in ((partner_solo, "solo row"), (mirror, "mirror pair row")):
            if needed not in first_seen:
                problems.append(
                    InputError(
                        f"partner has no {what} ({_describe_key(needed)})", path=path, row=index, field="partner_model"
                    )
                )
    return problems


# --------------------------------------------------------------------------- the table


class ThroughputTable:
    """Validated rows plus fast lookups of solo and co-located throughputs."""

    def __init__(self, rows: list[TableRow], path: object = "<table>"):
        self.rows = rows
        self.path = path
        self._solo: dict[tuple[str, JobType], float] = {}
        self._pair: dict[tuple[str, JobType, JobType], float] = {}
        self._pair_dense: tuple[dict[JobType, int], dict[str, np.ndarray]] | None = None  # see pair_matrix
        self._solo_rows: dict[tuple, tuple[float, ...]] = {}  # see solo_row
        for r in rows:
            usable = r["throughput"] if r["status"] in RUNNABLE_STATUSES else 0.0
            jt = JobType(r["model"], r["batch_size"], r["scale_factor"])
            if r["partner_model"] is None:
                self._solo[(r["worker_type"], jt)] = usable
            else:
                partner = JobType(r["partner_model"], r["partner_batch_size"], r["scale_factor"])
                self._pair[(r["worker_type"], jt, partner)] = usable

    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]], columns: Iterable[str] | None = None, path: object = "<table>"
    ) -> ThroughputTable:
        records = list(records)
        if columns is None:
            seen: dict[str, None] = {}
            for rec in records:
                seen.update(dict.fromkeys(rec))
            columns = list(seen) or REQUIRED_COLUMNS
        return cls(validate_records(records, columns=columns, path=path), path=path)

    # lookups ---------------------------------------------------------------
    # The rows never change after __init__, so the sorted names are computed once: the job-list
    # reader asks for them once per job (10⁵ jobs × 10⁴ rows was seconds).
    @functools.cached_property
    def _worker_types(self) -> tuple[str, ...]:
        return tuple(sorted({wt for wt, _ in self._solo}))

    @functools.cached_property
    def _job_types(self) -> tuple[JobType, ...]:
        return tuple(sorted({jt for _, jt in self._solo}, key=JobType.sort_key))

    @property
    def worker_types(self) -> list[str]:
        return list(self._worker_types)

    @property
    def job_types(self) -> list[JobType]:
        return list(self._job_types)

    def has(self, worker_type: str, job_type: JobType) -> bool:
        """Whether the table says anything of the job type alone on the worker type (a row
        with status oom or failed does: it cannot run there)."""
        return (worker_type, job_type) in self._solo

    def solo(self, worker_type: str, job_type: JobType) -> float:
        """Steps/s of the whole job alone; 0.0 when it cannot run or was not measured."""
        return self._solo.get((worker_type, job_type), 0.0)

    def solo_row(self, worker_types: tuple[str, ...], job_type: JobType) -> tuple[float, ...]:
        """`solo` on each of `worker_types`, kept for the next ask (the rows never change): a
        simulation builds a problem at every re-solve from the same few job types."""
        key = (worker_types, job_type.model, job_type.batch_size, job_type.scale_factor)  # hashes in C
        row = self._solo_rows.get(key)
        if row is None:
            row = self._solo_rows[key] = tuple(self.solo(w, job_type) for w in worker_types)
        return row

    def pair(self, worker_type: str, job_type: JobType, partner: JobType) -> tuple[float, float]:
        """(own, partner) steps/s when co-located; (0, 0) when absent or not runnable."""
        own = self._pair.get((worker_type, job_type, partner), 0.0)
        other = self._pair.get((worker_type, partner, job_type), 0.0)
        if own <= 0.0 or other <= 0.0:
            return (0.0, 0.0)
        return (own, other)

    def has_pairs(self) -> bool:
        return bool(self._pair)

    def pair_matrix(self, worker_type: str, job_types: list[JobType]) -> tuple[np.ndarray, np.ndarray]:
        """(own, partner) as `pair()` gives them for every ordered pair of `job_types`:
        own[a, b] is a's steps/s next to b on `worker_type`, partner[a, b] b's; 0 where absent.
        Reads a dense copy of the pair rows made on first use (the table does not change)."""
        dense = self._pair_dense
        if dense is None:
            kinds = sorted({jt for key in self._pair for jt in key[1:]}, key=JobType.sort_key)
            number = {jt: i for i, jt in enumerate(kinds)}
            arrays: dict[str, np.ndarray] = {}
            for (w, a, b), rate in self._pair.items():
                grid = arrays.setdefault(w, np.zeros((len(kinds) + 1, len(kinds) + 1)))  # last: not in the table
                grid[number[a], number[b]] = rate
            dense = self._pair_dense = (number, arrays)
        number, arrays = dense
        rates = arrays.get(worker_type)
        if rates is None:
            zero = np.zeros((len(job_types), len(job_types)))
            return zero, zero.copy()
        missing = len(rates) - 1
        index = [number.get(jt, missing) for jt in job_types]
        own = rates[np.ix_(index, index)]
        partner = own.T
        ok = (own > 0) & (partner > 0)
        return np.where(ok, own, 0.0), np.where(ok, partner, 0.0)

    def has_restart_times(self) -> bool:
        return any(r[field] is not None for r in self.rows for field in RESTART_COLUMNS)  # type: ignore[literal-required]

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        # Columns added after v1 are written only when some row fills them (older tables stay byte-identical).
        columns = [
            c
            for c in COLUMNS
            if (c not in RESTART_COLUMNS or self.has_restart_times())
            and (c not in NOTE_COLUMNS or any(r["notes"] for r in self.rows))
        ]
        frame = pd.DataFrame(self.rows, columns=columns)
        for column in _INT_COLUMNS:
            frame[column] = frame[column].astype("Int64")
        frame["scale_factor"] = frame["scale_factor"].astype("int64")
        for column in _FLOAT_COLUMNS:
            if column in frame:
                frame[column] = frame[column].astype("float64")
        return frame

    def __len__(self) -> int:
        return len(self.rows)


# --------------------------------------------------------------------------- I/O


def read_table(path: str | os.PathLike) -> ThroughputTable:
    """Read a CSV or Parquet table (by suffix) and validate it."""
    path = Path(path)
    columns, records = _raw_records(path)
    return ThroughputTable.from_records(records, columns=columns, path=path)


def table_problems(path: str | os.PathLike) -> tuple[list[TableRow], list[InputError]]:
    """Every problem of the table at `path` (an unreadable file is one problem, raised)."""
    path = Path(path)
    columns, records = _raw_records(path)
    return check_records(records, columns=columns, path=path)


def _raw_records(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """Column names and raw records of a CSV or Parquet table, without any checks."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet", ".pq"):
        raise InputError(
            "unsupported table format (use .csv or .parquet; import Gavel JSON with 'rota table import-gavel')",
            path=path,
        )
    if suffix == ".csv":
        columns, records = read_csv_records(path, "table")
    else:
        data = read_bytes(path, "table")
        try:
            columns, records = _parquet_records(data)
        except Exception as exc:  # parser errors carry no row/field; name the file
            raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None
        twice = sorted({c for c in columns if columns.count(c) > 1})
        if twice:
            raise InputError("column named twice", path=path, field=twice[0])
    if not records:
        raise InputError("no rows (a header only): a throughput table needs at least one measurement", path=path)
    return columns, records


def write_table(table: ThroughputTable, path: str | os.PathLike, *, replaces_input: bool = False) -> None:
    """Write atomically as CSV or Parquet (by suffix); `replaces_input`: `path` is a table
    this process read and now updates in place (see planner/formats/atomic.py)."""
    path = Path(path)
    frame = table.to_frame()
    suffix = path.suffix.lower()
    if suffix == ".csv":
        write_with(path, lambda tmp: frame.to_csv(tmp, index=False), replaces_input=replaces_input)
    elif suffix in (".parquet", ".pq"):
        write_with(path, lambda tmp: frame.to_parquet(tmp, index=False), replaces_input=replaces_input)
    else:
        raise InputError("unsupported table format (use .csv or .parquet)", path=path)


def merge_tables(
    tables: Iterable[ThroughputTable], path: object = "<merged>", *, strict: bool = False
) -> ThroughputTable:
    """Union of tables; on duplicate keys the later table's row wins, or, with `strict`, two rows
    of one key that differ in any column are an InputError naming both files and rows."""
    merged: dict[tuple, TableRow] = {}
    origin: dict[tuple, tuple[object, int]] = {}  # key -> (table path, row number) it came from
    for table in tables:
        for number, r in enumerate(table.rows, start=1):
            key = row_key(r)
            if strict and key in merged and merged[key] != r:
                first_path, first_row = origin[key]
                raise InputError(
                    f"conflicts with {first_path} row {first_row} (both measure {_describe_key(key)}, "
                    "with different values)",
                    path=table.path,
                    row=number,
                    field="worker_type",
                )
            merged[key] = r
            origin[key] = (table.path, number)
    return ThroughputTable.from_records(list(merged.values()), columns=COLUMNS, path=path)


def append_rows(path: str | os.PathLike, new_rows: Iterable[Mapping[str, Any]]) -> ThroughputTable:
    """Add (or replace, same key) rows in the table at `path`, atomically.

    Used by the profiler after every measurement so a killed run loses nothing.
    Pair rows may be appended before their partner's solo row exists, so the
    partner check runs only on the final table read by the planner.
    """
    path = Path(path)
    existing: dict[tuple, TableRow] = {}
    if path.exists():
        for r in _read_rows_unchecked(path):
            existing[row_key(r)] = r
    for index, raw in enumerate(new_rows, start=1):
        parsed = _parse_row(raw, path=f"{path} (new rows)", row=index)
        existing[row_key(parsed)] = parsed
    table = ThroughputTable(list(existing.values()), path=path)
    write_table(table, path, replaces_input=True)  # the profiler's table grows in place
    return table


def _read_rows_unchecked(path: Path) -> list[TableRow]:
    """Rows parsed one by one, without cross-row checks (for appending)."""
    if path.suffix.lower() == ".csv":
        records = read_csv_records(path, "table")[1]
    else:
        records = _parquet_records(read_bytes(path, "table"))[1]
    return [_parse_row(rec, path=path, row=i) for i, rec in enumerate(records, start=1)]


def _parquet_records(data: bytes) -> tuple[list[str], list[dict[str, Any]]]:
    # pyarrow keeps null (missing) and NaN (a bad value) apart; pandas would not.
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow = pq.read_table(pa.BufferReader(data))
    return list(arrow.column_names), arrow.to_pylist()
