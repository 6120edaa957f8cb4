"""Fuzzing every reader: random bytes, and valid files with bytes or values mutated,
never raise anything but InputError. A small, fixed example budget keeps CI fast."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile_inputs import READERS
from test_hostile_inputs2 import _Unblocker
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError

FUZZ = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
JSON_READERS = ("cluster-json", "gavel-json", "jobs-json", "progress-json", "state", "schedule", "schedule-export")


def _small_gavel() -> bytes:
    full = json.loads((DATA / "gavel" / "simulation_throughputs.json").read_text(encoding="utf-8"))
    small = {}
    for worker_type, entries in list(full.items())[:2]:
        keys = list(entries)[:3]  # three job types, with their pairs among themselves
        small[worker_type] = {k: {p: v for p, v in entries[k].items() if p == "null" or p in keys} for k in keys}
    return json.dumps(small).encode()


@pytest.fixture(scope="module")
def valid_files(tmp_path_factory) -> dict[str, bytes]:
    """A valid file for every reader."""
    folder = tmp_path_factory.mktemp("valid")
    result = CliRunner().invoke(
        app,
        ["plan", "-t", str(DATA / "throughputs.csv"), "-j", str(DATA / "jobs.csv"), "-c", str(DATA / "cluster.yaml")]
        + ["--state", str(folder / "state.json"), "--out", str(folder / "schedule.json"), "--rounds", "1"],
    )
    assert result.exit_code == 0, result.output
    jobs = [{k: v for k, v in row.items() if v} for row in _csv_rows(DATA / "jobs.csv")]
    return {
        "cluster-yaml": (DATA / "cluster.yaml").read_bytes(),
        "cluster-json": json.dumps({"worker_types": {"v100": {"gpus": 4, "gpus_per_node": 2}}}).encode(),
        "table": (DATA / "throughputs.csv").read_bytes(),
        "gavel-json": _small_gavel(),
        "jobs-csv": (DATA / "jobs.csv").read_bytes(),
        "jobs-json": json.dumps(jobs).encode(),
        "trace": (DATA / "gavel" / "traces" / "small_test.trace").read_bytes(),
        "progress-json": (DATA / "examples" / "progress.json").read_bytes(),
        "progress-csv": (DATA / "examples" / "progress.csv").read_bytes(),
        "state": (folder / "state.json").read_bytes(),
        "schedule": (folder / "schedule.json").read_bytes(),
        "schedule-export": (folder / "schedule.json").read_bytes(),
        "entity-weights": b"vision: 2\nnlp: 1\n",
    }


def _csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _only_input_errors(reader: str, data: bytes) -> None:
    name, read = READERS[reader]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        try:
            read(path)
        except InputError as exc:
            assert str(exc)


def _mutate(data: bytes, edits: list[tuple[float, int, bytes]]) -> bytes:
    """Each edit replaces `length` bytes at relative position `at` with `chunk`."""
    for at, length, chunk in edits:
        k = int(at * len(data))
        data = data[:k] + chunk + data[k + length :]
    return data


EDITS = st.lists(
    st.tuples(st.floats(0, 1), st.integers(0, 8), st.binary(max_size=8)),
    min_size=1,
    max_size=4,
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in list(value.items())[:20]:
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:5]):
            out += _paths(item, (*prefix, index))
    return out


def _replace(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize("reader", READERS)
@FUZZ
@given(data=st.binary(max_size=2000))
def test_random_bytes(reader: str, data: bytes) -> None:
    _only_input_errors(reader, data)


@pytest.mark.parametrize("reader", READERS)
@FUZZ
@given(edits=EDITS)
def test_mutated_bytes(valid_files: dict[str, bytes], reader: str, edits: list[tuple[float, int, bytes]]) -> None:
    _only_input_errors(reader, _mutate(valid_files[reader], edits))


@pytest.mark.parametrize("reader", JSON_READERS)
@FUZZ
@given(choice=st.integers(min_value=0), value=JSON_VALUES)
def test_mutated_values(valid_files: dict[str, bytes], reader: str, choice: int, value: Any) -> None:
    doc = json.loads(valid_files[reader])
    paths = _paths(doc)
    mutated = _replace(doc, paths[choice % len(paths)], value)
    _only_input_errors(reader, json.dumps(mutated).encode())


def test_valid_files_read(valid_files: dict[str, bytes]) -> None:
    """The fixtures themselves are read without error (so the fuzzing starts from valid files)."""
    read: Callable[[Path], object]
    for reader, (name, read) in READERS.items():
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / name
            path.write_bytes(valid_files[reader])
            read(path)


# --------------------------------------------------------------------------- number spellings and file kinds

# Digits and white space that float() and int() accept but rota's number syntax does not.
FOREIGN_DIGITS = st.sampled_from(["０１２３４５６７８９", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯"])
UNICODE_SPACE = st.sampled_from(["\u00a0", "\u2003", "\u3000", "\u2028", "\u202f", "\x1c", "\x85"])


@st.composite
def foreign_numbers(draw: st.DrawFn) -> str:
    """A number spelt with foreign digits, an underscore or Unicode white space."""
    digits = draw(st.text("0123456789", min_size=2, max_size=6))
    how = draw(st.sampled_from(["digits", "underscore", "space"]))
    if how == "digits":
        table = draw(FOREIGN_DIGITS)
        k = draw(st.integers(0, len(digits) - 1))
        return digits[:k] + table[int(digits[k])] + digits[k + 1 :]
    if how == "underscore":
        k = draw(st.integers(1, len(digits) - 1))
        return digits[:k] + "_" + digits[k:]
    space = draw(UNICODE_SPACE)
    return draw(st.sampled_from([space + digits, digits + space]))


# A numeric cell of each CSV reader: (reader, column).
NUMERIC_CELLS = [("table", "throughput"), ("jobs-csv", "priority_weight"), ("progress-csv", "steps_done")]


@pytest.mark.parametrize("reader, column", NUMERIC_CELLS)
@FUZZ
@given(spelling=foreign_numbers())
def test_foreign_number_spellings(valid_files: dict[str, bytes], reader: str, column: str, spelling: str) -> None:
    """A numeric cell spelt any other way than ASCII digits is an error naming that field."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(valid_files[reader].decode("utf-8"), newline="")))
    index = rows[0].index(column)
    rows[1][index] = spelling
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    name, read = READERS[reader]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(out.getvalue(), encoding="utf-8")
        with pytest.raises(InputError) as caught:
            read(path)
    assert f"field '{column}'" in str(caught.value)


FILE_KINDS = st.sampled_from(["fifo", "dev-zero", "dev-null", "folder", "dangling"])


@pytest.mark.parametrize("reader", READERS)
@settings(max_examples=5, deadline=None, derandomize=True)
@given(kind=FILE_KINDS)
def test_file_kinds(reader: str, kind: str) -> None:
    """Whatever the path is instead of a regular file, the reader ends in an InputError naming
    it, without opening it for reading (a FIFO would block)."""
    import os

    name, read = READERS[reader]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dev-zero":
            path.symlink_to("/dev/zero")
        elif kind == "dev-null":
            path.symlink_to("/dev/null")
        elif kind == "folder":
            if reader.startswith("progress"):
                return  # a progress folder is a valid input
            path.mkdir()
        else:
            path.symlink_to(Path(folder) / "missing")
        with _Unblocker(path) if kind == "fifo" else contextlib.nullcontext(), pytest.raises(InputError) as caught:
            read(path)
    assert str(path) in str(caught.value)
