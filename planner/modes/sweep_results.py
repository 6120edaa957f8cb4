"""A sweep's `results.jsonl`: one JSON record per finished point, appended as points finish.

A record counts once its line ends in a newline. A run killed mid-append can leave
a torn last line (no newline, or text that is not JSON); the next run cuts it away,
says so, and runs that point again, so that its own first record starts on a fresh
line. Any other line that is not a record means the file was edited or damaged by
something else: that is an error naming the line (skipping it would hide a
damaged file and run its point again on every resume). Blank lines are ignored.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from planner.errors import InputError
from planner.formats.files import read_bytes

RESULTS = "results.jsonl"
# What every record has: the point's key and coordinates, and how it ended.
REQUIRED = ("key", "policy", "seed", "rate", "num_jobs", "status")
# Records are written with sorted keys, so "key" comes first even in a torn line.
_TORN_KEY = re.compile(r'^\{"key": "((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class TornLine:
    """The unfinished last line of a results file."""

    line: int  # 1-based
    offset: int  # byte offset where the line starts (the file's length once it is cut away)
    key: str | None  # the point it belonged to, when the torn text still shows it


@dataclass
class Results:
    records: dict[str, dict]  # finished points by key; a later line for a key wins
    torn: TornLine | None = None


def read_results(path: Path) -> Results:
    """The finished records in `path` (none when it does not exist); a torn last line
    is reported, not read. Raises InputError for any other line that is not a record."""
    if not path.exists():
        return Results({})
    data = read_bytes(path)  # the input layer: a regular file (a FIFO here would hang), size cap
    lines = data.split(b"\n")
    last = lines.pop()  # what follows the last newline: b"" for a whole file
    records: dict[str, dict] = {}
    offset = 0
    torn = None
    for number, raw in enumerate(lines, start=1):
        rec = _parse(raw)
        if not raw.strip():
            pass  # a blank line (a hand edit) holds nothing
        elif rec is None and number == len(lines) and not last:
            torn = TornLine(number, offset, _torn_key(raw))  # ends in a newline, but is not JSON
        elif rec is None:
            raise InputError(
                f"line {number} is not a sweep record ({_show(raw)}); fix or delete that line, or use another --out",
                path=path,
            )
        else:
            records[rec["key"]] = rec
        offset += len(raw) + 1
    if last:
        torn = TornLine(len(lines) + 1, offset, _torn_key(last))
    return Results(records, torn)


def cut_torn_line(path: Path, torn: TornLine) -> str:
    """Truncate `path` just before the torn line; return the one-line warning to show."""
    with path.open("r+b") as f:
        f.truncate(torn.offset)
        f.flush()
        os.fsync(f.fileno())
    point = f"point {torn.key} runs again" if torn.key else "its point runs again"
    return f"{path}: line {torn.line} was cut off (a killed run?); removed it, {point}"


def append_result(path: Path, record: dict) -> None:
    """Append one record as one line, in one write, on a fresh line, synced to disk."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # never glue a record onto an unfinished line
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse(raw: bytes) -> dict | None:
    try:
        rec = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(rec, dict) or any(k not in rec for k in REQUIRED) or not isinstance(rec["key"], str):
        return None
    return rec


def _torn_key(raw: bytes) -> str | None:
    match = _TORN_KEY.match(raw.decode("utf-8", errors="replace"))
    if match is None:
        return None
    try:
        return str(json.loads(f'"{match.group(1)}"'))
    except json.JSONDecodeError:
        return None


def _show(raw: bytes, width: int = 40) -> str:
    text = raw.decode("utf-8", errors="replace")
    return repr(text if len(text) <= width else text[:width] + "...")
