"""Reading user files with one-line errors (writes live in planner/formats/atomic.py).

Every file rota reads goes through `open_input` (here): regular files only (a named pipe,
a device such as /dev/zero, a socket or a folder is refused by its `stat`, before any
read, and the opened descriptor is checked again), at most `MAX_BYTES[kind]` bytes, and
the file is remembered as an input of this process (device and inode, with its mtime and
size), so that the atomic writers refuse to replace it with an output (`would_overwrite`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.formats.fields import short

# Bounds on what a document may hold (a hostile file must not exhaust time or memory).
MAX_DEPTH = 64  # nesting of YAML mappings / lists (rota's documents need a handful)

GiB = 1 << 30
MiB = 1 << 20
# The largest file of each kind rota reads (bytes). Generous for real use: a 10^6-job list is
# ~100 MB, the largest profiled table a few MB; the caps only stop /dev/zero-like inputs.
MAX_BYTES: dict[str, int] = {
    "table": 2 * GiB,  # throughput table (CSV / Parquet)
    "trace": 2 * GiB,  # Gavel .trace or generated job list
    "jobs": 1 * GiB,  # job list (CSV / JSON)
    "state": 1 * GiB,  # next-round state
    "schedule": 1 * GiB,  # schedule JSON (and its CSV view)
    "progress": 256 * MiB,  # one progress report (file, or one file of a folder)
    "gavel": 256 * MiB,  # Gavel's throughput JSON
    "cluster": 64 * MiB,  # cluster YAML / JSON
    "catalogue": 64 * MiB,  # capacity catalogue YAML / JSON
    "file": 256 * MiB,  # anything else (manifests, templates)
}

_CHUNK = 16 * MiB

# Files read as inputs by this process: (st_dev, st_ino) -> (mtime_ns, size, path as given).
_inputs: dict[tuple[int, int], tuple[int, int, str]] = {}
# Files this process wrote itself (atomic writers): replacing one again loses nothing of the user's.
_written: set[tuple[int, int, int, int]] = set()


def kind_of(mode: int) -> str | None:
    """What a non-regular file is, in words (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _size_text(n: int) -> str:
    return f"{n / GiB:g} GiB" if n >= GiB else f"{n / MiB:g} MiB"


def _refuse_special(mode: int, path: object) -> None:
    what = kind_of(mode)
    if what == "a folder":
        raise InputError("is a folder, expected a file", path=path)
    if what is not None:
        raise InputError(f"is {what}, not a regular file; rota reads regular files only", path=path)


def _cap(kind: str) -> int:
    try:
        return MAX_BYTES[kind]
    except KeyError:
        raise ValueError(f"unknown input kind {kind!r}") from None


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def open_input(path: str | os.PathLike, kind: str = "file") -> tuple[int, os.stat_result]:
    """An open read-only descriptor of the regular file at `path` and its fstat, or InputError
    naming it (missing, a folder, a FIFO, a device, a socket, larger than `MAX_BYTES[kind]`).
    Never blocks: the path is stat'ed first and opened with O_NONBLOCK, and the opened
    descriptor is checked again (the path may have been swapped in between). The file is
    recorded as an input of this process. The caller closes the descriptor."""
    cap = _cap(kind)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    _refuse_special(st.st_mode, path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    try:
        st = os.fstat(fd)
        _refuse_special(st.st_mode, path)
        if st.st_size > cap:
            raise InputError(
                f"is {_size_text(st.st_size)}, more than the {_size_text(cap)} a {kind} file may have", path=path
            )
    except BaseException:
        os.close(fd)
        raise
    _inputs[(st.st_dev, st.st_ino)] = (st.st_mtime_ns, st.st_size, str(path))
    return fd, st


def read_bytes(path: str | os.PathLike, kind: str = "file") -> bytes:
    """The bytes of a regular file (see `open_input`); a file that grows past its cap while
    being read is refused too."""
    cap = _cap(kind)
    fd, st = open_input(path, kind)
    try:
        chunks: list[bytes] = []
        total = 0
        want = st.st_size + 1  # one read for a file that does not change; then chunks
        while True:
            chunk = os.read(fd, min(max(want, 1), cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise InputError(f"is more than the {_size_text(cap)} a {kind} file may have", path=path)
            want = _CHUNK
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def decode_text(data: bytes, path: object) -> str:
    """UTF-8 text, or InputError saying what it is instead (UTF-16, binary, another encoding)."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise InputError("not UTF-8 text (UTF-16, by its byte-order mark); save it as UTF-8", path=path)
    nul = data.find(b"\x00")
    if nul >= 0:
        head = data[:4096]
        if head.count(b"\x00") * 3 >= len(head):  # every other byte 0: ASCII text as UTF-16
            raise InputError("not UTF-8 text (UTF-16?: every other byte is 0); save it as UTF-8", path=path)
        raise InputError(f"not UTF-8 text (a NUL byte at offset {nul}; binary?)", path=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = f"byte {exc.object[exc.start]:#04x} at offset {exc.start}"
        raise InputError(f"not UTF-8 text ({bad}; binary, or another encoding)", path=path) from None


def read_text(path: str | os.PathLike, kind: str = "file") -> str:
    """A UTF-8 text file, or InputError naming it (missing, not a regular file, too large,
    unreadable, binary, UTF-16)."""
    return decode_text(read_bytes(path, kind), path)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def parse_json(text: str, path: object, *, what: str = "invalid JSON") -> Any:
    """Parsed JSON text, or InputError naming the file (bad JSON, a key given twice in one
    object, nested too deeply); messages start with `what`."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        message = f"{what}: an object has this key twice (one value would be lost)"
        raise InputError(message, path=path, field=exc.key if len(exc.key) <= 80 else short(exc.key)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{what}: {exc}", path=path) from None
    except RecursionError:
        raise InputError(f"{what}: nested too deeply", path=path) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InputError(f"{what}: {str(exc).splitlines()[0]}", path=path) from None


def read_csv_records(
    path: str | os.PathLike, kind: str = "file", *, multiline: bool = False
) -> tuple[list[str], list[dict[str, str]]]:
    """A CSV file as (column names, records of raw strings), or InputError naming file and row.

    Blank lines are skipped and row numbers count data rows from 1 (the header is not a row);
    a short row's missing cells are empty strings, a row with more cells than the header is an error.
    Quoting is strict: a quote that is not closed, or text after a closing quote, is an error
    naming the row, and (unless `multiline`) so is a cell spanning lines: an unclosed quote
    must not swallow the rows after it. A column named twice is an error.
    """
    text = read_text(path, kind).removeprefix("\ufeff")  # a byte-order mark is not part of the first name
    return parse_csv_records(text, path, multiline=multiline)


def parse_csv_records(text: str, path: object, *, multiline: bool = False) -> tuple[list[str], list[dict[str, str]]]:
    """`read_csv_records` on text already read."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[list[str]] = []
    lines: list[int] = []  # the physical line each row starts on
    line = 1
    try:
        for row in reader:
            if row:
                rows.append(row)
                lines.append(line)
                if not multiline and reader.line_num > line:
                    _refuse_line_break(rows, path, line, reader.line_num)
            line = reader.line_num + 1
    except csv.Error as exc:
        where = len(rows) if rows else None
        if "field limit" in str(exc):
            message = f"a cell is longer than {csv.field_size_limit()} characters (on line {line} or after)"
            raise InputError(message, path=path, row=where) from None
        raise InputError(
            f"cannot parse: {exc} (in the row starting on line {line}; a quote not closed?)", path=path, row=where
        ) from None
    if not rows:
        raise InputError("cannot parse: empty file (no header row)", path=path)
    columns = [name.strip() for name in rows[0]]
    seen: set[str] = set()
    for name in columns:
        if name in seen:
            raise InputError("column named twice in the header", path=path, field=name)
        seen.add(name)
    records = []
    width = len(columns)
    for index, row in enumerate(rows[1:], start=1):
        if len(row) != width:
            if len(row) > width:
                raise InputError(f"has {len(row)} cells, the header has {width}", path=path, row=index)
            row = row + [""] * (width - len(row))
        records.append(dict(zip(columns, row)))
    return columns, records


def _refuse_line_break(rows: list[list[str]], path: object, first: int, last: int) -> None:
    """The last row of `rows` spans lines `first`..`last`: an error naming its row and the
    cell with the line break, unless no cell has one (a lone carriage return between lines)."""
    row = rows[-1]
    for index, cell in enumerate(row):
        if "\n" in cell or "\r" in cell:
            header = rows[0] if len(rows) > 1 else []
            name = header[index].strip() if index < len(header) else None
            raise InputError(
                f"a quoted cell runs from line {first} to line {last}: a line break inside a cell, or a quote "
                "not closed (it would swallow the rows after it)",
                path=path,
                row=len(rows) - 1 if len(rows) > 1 else None,
                field=None if name is None else short(name, 40).strip("'\""),
            )


def read_json(path: str | os.PathLike, kind: str = "file") -> Any:
    """Parsed JSON, or InputError naming the file (missing, unreadable, bad JSON, duplicate keys)."""
    return parse_json(read_text(path, kind), path)


def _chunks(fd: int) -> Iterator[bytes]:
    while chunk := os.read(fd, _CHUNK):
        yield chunk


def file_digest(path: str | os.PathLike, kind: str = "table") -> str:
    """'sha256:<hex>' of a file's bytes: schedules and state record which inputs they came from."""
    fd, _ = open_input(path, kind)
    try:
        digest = hashlib.sha256()
        for chunk in _chunks(fd):
            digest.update(chunk)
    finally:
        os.close(fd)
    return "sha256:" + digest.hexdigest()


def input_records(inputs: Mapping[str, str | os.PathLike] | None) -> dict[str, dict[str, str | None]]:
    """name -> {path, digest} of each input file, as schedules and state record them
    (digest None: the file cannot be read now, e.g. moved since the state was saved)."""
    out: dict[str, dict[str, str | None]] = {}
    for name, path in (inputs or {}).items():
        try:
            out[name] = {"path": str(path), "digest": file_digest(path)}
        except (OSError, InputError):
            out[name] = {"path": str(path), "digest": None}
    return out


# --------------------------------------------------------------------------- outputs vs inputs


def would_overwrite(target: str | os.PathLike) -> str | None:
    """The path (as it was read) of the input of this process that `target` is, else None.
    A file this process wrote itself does not count (a command reading back its own output)."""
    try:
        st = os.stat(target)
    except OSError:
        return None
    seen = _inputs.get((st.st_dev, st.st_ino))
    if seen is None or seen[:2] != (st.st_mtime_ns, st.st_size) or _identity(st) in _written:
        return None
    return seen[2]


def note_written(target: str | os.PathLike) -> None:
    """Record that this process (an atomic writer) just wrote `target`."""
    try:
        _written.add(_identity(os.stat(target)))
    except OSError:
        pass


def recorded_input_path(raw: object, base: str | os.PathLike) -> Path | None:
    """The file an input path recorded in a schedule or state names, or None. Such a path is
    data, not a command: one with a `..` component is never followed (a document edited to
    say ../../etc/passwd must not make rota read outside); an absolute path is taken as
    written (rota records absolute paths when it was given them), a relative one from `base`
    (the document's folder). Only an existing regular file counts."""
    if not isinstance(raw, str) or not raw or "\0" in raw or len(raw) > 4096:
        return None
    path = Path(raw)
    if ".." in path.parts:
        return None
    candidate = path if path.is_absolute() else Path(base) / path
    try:
        return candidate if candidate.is_file() else None
    except OSError:  # e.g. a name too long for the file system
        return None


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one existing file (or, where either is missing, one resolved path)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def forget_inputs() -> None:
    """Forget the inputs and outputs recorded so far (tests that run many commands in one process)."""
    _inputs.clear()
    _written.clear()
