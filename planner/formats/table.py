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

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError
from planner.formats.atomic import write_with

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
COLUMNS = KEY_COLUMNS + VALUE_COLUMNS + PROVENANCE_COLUMNS
REQUIRED_COLUMNS = ["worker_type", "model", "scale_factor", "throughput"]

STATUSES = ("ok", "oom", "failed", "estimated")
RUNNABLE_STATUSES = ("ok", "estimated")
SOURCES = ("measured", "imported", "estimated", "synthetic")

_INT_COLUMNS = ("batch_size", "partner_batch_size", "n_steps", "peak_memory_bytes")
_FLOAT_COLUMNS = ("throughput", "samples_per_s", "step_time_median_s", "step_time_iqr_s")
_GAVEL_NAME = re.compile(r"^(?P<model>.*) \(batch size (?P<bs>\d+)\)$")


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


def _is_blank(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return False  # NaN is reported as NaN, not as "missing"
    return isinstance(value, str) and value.strip() == ""


def _parse_int(value: Any, *, path, row, field, minimum: int) -> int:
    try:
        if isinstance(value, str):
            number = float(value.strip())
        else:
            number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"expected an integer, got {value!r}", path=path, row=row, field=field) from None
    if math.isnan(number):
        raise InputError("is NaN", path=path, row=row, field=field)
    if not number.is_integer():
        raise InputError(f"expected an integer, got {value!r}", path=path, row=row, field=field)
    if number < minimum:
        raise InputError(f"must be >= {minimum}, got {int(number)}", path=path, row=row, field=field)
    return int(number)


def _parse_float(value: Any, *, path, row, field) -> float:
    try:
        number = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise InputError(f"expected a number, got {value!r}", path=path, row=row, field=field) from None
    if math.isnan(number):
        raise InputError("is NaN", path=path, row=row, field=field)
    if math.isinf(number):
        raise InputError("is infinite", path=path, row=row, field=field)
    if number < 0:
        raise InputError(f"must not be negative, got {number}", path=path, row=row, field=field)
    return number


def _parse_row(raw: Mapping[str, Any], *, path, row: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in ("worker_type", "model"):
        value = raw.get(field)
        if _is_blank(value):
            raise InputError("is required", path=path, row=row, field=field)
        out[field] = str(value).strip()
    out["scale_factor"] = _parse_int(
        raw.get("scale_factor", 1) if not _is_blank(raw.get("scale_factor")) else 1,
        path=path,
        row=row,
        field="scale_factor",
        minimum=1,
    )
    for field in ("batch_size", "partner_batch_size"):
        value = raw.get(field)
        out[field] = None if _is_blank(value) else _parse_int(value, path=path, row=row, field=field, minimum=1)
    partner = raw.get("partner_model")
    out["partner_model"] = None if _is_blank(partner) else str(partner).strip()
    if out["partner_model"] is None and out["partner_batch_size"] is not None:
        raise InputError("set without partner_model", path=path, row=row, field="partner_batch_size")

    status = raw.get("status")
    status = "ok" if _is_blank(status) else str(status).strip().lower()
    if status not in STATUSES:
        raise InputError(
            f"unknown status {status!r} (expected one of {', '.join(STATUSES)})", path=path, row=row, field="status"
        )
    out["status"] = status

    value = raw.get("throughput")
    if _is_blank(value):
        if status in RUNNABLE_STATUSES:
            raise InputError(f"is required when status is '{status}'", path=path, row=row, field="throughput")
        out["throughput"] = 0.0
    else:
        out["throughput"] = _parse_float(value, path=path, row=row, field="throughput")
    if status in RUNNABLE_STATUSES and out["throughput"] == 0.0:
        raise InputError(
            f"is 0 with status '{status}'; mark a job that cannot run with status 'oom' or 'failed'",
            path=path,
            row=row,
            field="throughput",
        )
    if status not in RUNNABLE_STATUSES and out["throughput"] != 0.0:
        raise InputError(f"must be 0 or empty when status is '{status}'", path=path, row=row, field="throughput")

    for field in ("samples_per_s", "step_time_median_s", "step_time_iqr_s"):
        value = raw.get(field)
        out[field] = None if _is_blank(value) else _parse_float(value, path=path, row=row, field=field)
    for field in ("n_steps", "peak_memory_bytes"):
        value = raw.get(field)
        out[field] = None if _is_blank(value) else _parse_int(value, path=path, row=row, field=field, minimum=0)

    source = raw.get("source")
    source = None if _is_blank(source) else str(source).strip().lower()
    if source is not None and source not in SOURCES:
        raise InputError(
            f"unknown source {source!r} (expected one of {', '.join(SOURCES)})", path=path, row=row, field="source"
        )
    out["source"] = source
    for field in ("device_name", "host", "torch_version", "measured_at"):
        value = raw.get(field)
        out[field] = None if _is_blank(value) else str(value).strip()
    return out


def _row_key(r: Mapping[str, Any]) -> tuple:
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
) -> list[dict[str, Any]]:
    """Parse and check raw rows; return normalised rows or raise InputError.

    Row numbers in messages count data rows from 1 (the CSV header is not a row).
    """
    columns = list(columns)
    for column in columns:
        if column not in COLUMNS:
            raise InputError(f"unknown column (expected a subset of: {', '.join(COLUMNS)})", path=path, field=column)
    for column in REQUIRED_COLUMNS:
        if column not in columns:
            raise InputError("required column is missing", path=path, field=column)

    rows: list[dict[str, Any]] = []
    first_seen: dict[tuple, int] = {}
    for index, raw in enumerate(records, start=1):
        parsed = _parse_row(raw, path=path, row=index)
        key = _row_key(parsed)
        if key in first_seen:
            raise InputError(
                f"duplicate of row {first_seen[key]} ({_describe_key(key)})", path=path, row=index, field="worker_type"
            )
        first_seen[key] = index
        rows.append(parsed)

    # A co-location row needs its partner's solo row and the mirror row.
    for index, r in enumerate(rows, start=1):
        if r["partner_model"] is None:
            continue
        partner_solo = (r["worker_type"], r["partner_model"], r["partner_batch_size"], r["scale_factor"], None, None)
        mirror = (
            r["worker_type"],
            r["partner_model"],
            r["partner_batch_size"],
            r["scale_factor"],
            r["model"],
            r["batch_size"],
        )
        for needed, what in ((partner_solo, "solo row"), (mirror, "mirror pair row")):
            if needed not in first_seen:
                raise InputError(
                    f"partner has no {what} ({_describe_key(needed)})", path=path, row=index, field="partner_model"
                )
    return rows


# --------------------------------------------------------------------------- the table


class ThroughputTable:
    """Validated rows plus fast lookups of solo and co-located throughputs."""

    def __init__(self, rows: list[dict[str, Any]], path: object = "<table>"):
        self.rows = rows
        self.path = path
        self._solo: dict[tuple[str, JobType], float] = {}
        self._pair: dict[tuple[str, JobType, JobType], float] = {}
        self._pair_dense: tuple[dict[JobType, int], dict[str, np.ndarray]] | None = None  # see pair_matrix
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
    @property
    def worker_types(self) -> list[str]:
        return sorted({wt for wt, _ in self._solo})

    @property
    def job_types(self) -> list[JobType]:
        return sorted({jt for _, jt in self._solo}, key=JobType.sort_key)

    def has(self, worker_type: str, job_type: JobType) -> bool:
        return (worker_type, job_type) in self._solo

    def solo(self, worker_type: str, job_type: JobType) -> float:
        """Steps/s of the whole job alone; 0.0 when it cannot run or was not measured."""
        return self._solo.get((worker_type, job_type), 0.0)

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
        grid = arrays.get(worker_type)
        if grid is None:
            zero = np.zeros((len(job_types), len(job_types)))
            return zero, zero.copy()
        missing = len(grid) - 1
        index = [number.get(jt, missing) for jt in job_types]
        own = grid[np.ix_(index, index)]
        partner = own.T
        ok = (own > 0) & (partner > 0)
        return np.where(ok, own, 0.0), np.where(ok, partner, 0.0)

    def to_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self.rows, columns=COLUMNS)
        for column in _INT_COLUMNS:
            frame[column] = frame[column].astype("Int64")
        frame["scale_factor"] = frame["scale_factor"].astype("int64")
        for column in _FLOAT_COLUMNS:
            frame[column] = frame[column].astype("float64")
        return frame

    def __len__(self) -> int:
        return len(self.rows)


# --------------------------------------------------------------------------- I/O


def _records_from_frame(frame: pd.DataFrame) -> list[dict[str, Any]]:
    records = frame.to_dict(orient="records")
    for rec in records:
        for key, value in rec.items():
            if value is pd.NA or value is None:
                rec[key] = ""
    return records


def read_table(path: str | os.PathLike) -> ThroughputTable:
    """Read a CSV or Parquet table (by suffix) and validate it."""
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        elif suffix in (".parquet", ".pq"):
            return _read_parquet(path)
        else:
            raise InputError(
                "unsupported table format (use .csv or .parquet; import Gavel JSON with 'rota table import-gavel')",
                path=path,
            )
    except InputError:
        raise
    except Exception as exc:  # parser errors carry no row/field; name the file
        raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None
    frame.columns = [str(c).strip() for c in frame.columns]
    return ThroughputTable.from_records(_records_from_frame(frame), columns=frame.columns, path=path)


def write_table(table: ThroughputTable, path: str | os.PathLike) -> None:
    """Write atomically as CSV or Parquet (by suffix)."""
    path = Path(path)
    frame = table.to_frame()
    suffix = path.suffix.lower()
    if suffix == ".csv":
        write_with(path, lambda tmp: frame.to_csv(tmp, index=False))
    elif suffix in (".parquet", ".pq"):
        write_with(path, lambda tmp: frame.to_parquet(tmp, index=False))
    else:
        raise InputError("unsupported table format (use .csv or .parquet)", path=path)


def merge_tables(tables: Iterable[ThroughputTable], path: object = "<merged>") -> ThroughputTable:
    """Union of tables; on duplicate keys the later table's row wins."""
    merged: dict[tuple, dict[str, Any]] = {}
    for table in tables:
        for r in table.rows:
            merged[_row_key(r)] = r
    return ThroughputTable.from_records(list(merged.values()), columns=COLUMNS, path=path)


def append_rows(path: str | os.PathLike, new_rows: Iterable[Mapping[str, Any]]) -> ThroughputTable:
    """Add (or replace, same key) rows in the table at `path`, atomically.

    Used by the profiler after every measurement so a killed run loses nothing.
    Pair rows may be appended before their partner's solo row exists, so the
    partner check runs only on the final table read by the planner.
    """
    path = Path(path)
    existing: dict[tuple, dict[str, Any]] = {}
    if path.exists():
        for r in _read_rows_unchecked(path):
            existing[_row_key(r)] = r
    for index, raw in enumerate(new_rows, start=1):
        parsed = _parse_row(raw, path=f"{path} (new rows)", row=index)
        existing[_row_key(parsed)] = parsed
    table = ThroughputTable(list(existing.values()), path=path)
    write_table(table, path)
    return table


def _read_rows_unchecked(path: Path) -> list[dict[str, Any]]:
    """Rows parsed one by one, without cross-row checks (for appending)."""
    if path.suffix.lower() == ".csv":
        records = _records_from_frame(pd.read_csv(path, dtype=str, keep_default_na=False))
    else:
        records = _parquet_records(path)[1]
    return [_parse_row(rec, path=path, row=i) for i, rec in enumerate(records, start=1)]


def _parquet_records(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    # pyarrow keeps null (missing) and NaN (a bad value) apart; pandas would not.
    import pyarrow.parquet as pq

    arrow = pq.read_table(path)
    return list(arrow.column_names), arrow.to_pylist()


def _read_parquet(path: Path) -> ThroughputTable:
    try:
        columns, records = _parquet_records(path)
    except Exception as exc:
        raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None
    return ThroughputTable.from_records(records, columns=columns, path=path)
