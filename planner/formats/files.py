"""Reading user files with one-line errors (writes live in planner/atomic.py)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.errors import InputError

# Bounds on what a document may hold (a hostile file must not exhaust time or memory).
MAX_DEPTH = 64  # nesting of YAML mappings / lists (rota's documents need a handful)


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file, or InputError naming it (missing, a folder, unreadable, binary)."""
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=path)
    if path.is_dir():
        raise InputError("is a folder, expected a file", path=path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        bad = f"byte {exc.object[exc.start]:#04x} at offset {exc.start}"
        raise InputError(f"not UTF-8 text ({bad}; binary, or another encoding)", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None


def parse_json(text: str, path: object) -> Any:
    """Parsed JSON text, or InputError naming the file (bad JSON, nested too deeply)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc}", path=path) from None
    except RecursionError:
        raise InputError("invalid JSON: nested too deeply", path=path) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InputError(f"invalid JSON: {str(exc).splitlines()[0]}", path=path) from None


def read_csv_records(path: str | os.PathLike) -> tuple[list[str], list[dict[str, str]]]:
    """A CSV file as (column names, records of raw strings), or InputError naming file and row.

    Blank lines are skipped and row numbers count data rows from 1 (the header is not a row);
    a short row's missing cells are empty strings, a row with more cells than the header is an error.
    """
    text = read_text(path).removeprefix("\ufeff")  # a byte-order mark is not part of the first name
    try:
        rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    except csv.Error as exc:
        raise InputError(f"cannot parse: {exc}", path=path) from None
    if not rows:
        raise InputError("cannot parse: empty file (no header row)", path=path)
    columns = [name.strip() for name in rows[0]]
    records = []
    width = len(columns)
    for index, row in enumerate(rows[1:], start=1):
        if len(row) != width:
            if len(row) > width:
                raise InputError(f"has {len(row)} cells, the header has {width}", path=path, row=index)
            row = row + [""] * (width - len(row))
        records.append(dict(zip(columns, row)))
    return columns, records


def read_json(path: str | os.PathLike) -> Any:
    """Parsed JSON, or InputError naming the file (missing, unreadable, bad JSON)."""
    return parse_json(read_text(path), path)


def file_digest(path: str | os.PathLike) -> str:
    """'sha256:<hex>' of a file's bytes: schedules and state record which inputs they came from."""
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def input_records(inputs: Mapping[str, str | os.PathLike] | None) -> dict[str, dict[str, str | None]]:
    """name -> {path, digest} of each input file, as schedules and state record them
    (digest None: the file cannot be read now, e.g. moved since the state was saved)."""
    out: dict[str, dict[str, str | None]] = {}
    for name, path in (inputs or {}).items():
        try:
            out[name] = {"path": str(path), "digest": file_digest(path)}
        except OSError:
            out[name] = {"path": str(path), "digest": None}
    return out
