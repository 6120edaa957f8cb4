"""Every input is hostile, second pass: special files, size caps, number spellings, broken
structure, implausible state and progress, outputs that would overwrite inputs, and messages
that stay short. Each class is tested through every reader it concerns (READERS), so a new
reader or a new shape of the class fails here."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest
from conftest import DATA
from hypothesis import given, settings
from hypothesis import strategies as st
from test_hostile_inputs import READERS, _jobs
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.formats import files
from planner.formats.atomic import write_text_atomic
from planner.formats.cluster import parse_cluster, read_cluster
from planner.formats.fields import Where, number_text, optional_float, parse_float, parse_int
from planner.formats.gavel_json import import_gavel
from planner.formats.progress import read_progress
from planner.formats.safe_yaml import load_yaml
from planner.formats.state import read_state
from planner.formats.table import read_table

runner = CliRunner()
PLAN = ["-t", str(DATA / "throughputs.csv"), "-c", str(DATA / "cluster.yaml")]


def _refused(read, path: Path, *words: str) -> str:
    with pytest.raises(InputError) as caught:
        read(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message
    for word in words:
        assert word in message, message
    return message


class _Unblocker:
    """Opens the write end of a FIFO whenever a reader waits on it, so a reader that wrongly
    opens a FIFO gets end-of-file instead of hanging the test run (no timing involved)."""

    def __init__(self, fifo: Path):
        self.fifo, self.done = fifo, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.wait(0.02):
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: nobody reads
                continue
            os.close(fd)

    def __enter__(self) -> _Unblocker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


# --------------------------------------------------------------------------- 1. special files


@pytest.mark.parametrize("reader", READERS)
def test_named_pipe_is_refused_without_reading(tmp_path, reader):
    name, read = READERS[reader]
    fifo = tmp_path / name
    os.mkfifo(fifo)
    with _Unblocker(fifo):
        _refused(read, fifo, "named pipe", "regular file")


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_device_behind_a_symlink_is_refused(tmp_path, reader, device):
    name, read = READERS[reader]
    link = tmp_path / name
    link.symlink_to(device)
    _refused(read, link, "character device")


@pytest.mark.parametrize("reader", ["table", "jobs-csv", "state", "progress-json"])
def test_socket_is_refused(tmp_path, reader):
    name, read = READERS[reader]
    path = tmp_path / name
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        _refused(read, path, "socket")


def test_fifo_inside_a_progress_folder(tmp_path):
    folder = tmp_path / "progress"
    folder.mkdir()
    os.mkfifo(folder / "lm-a.json")
    with _Unblocker(folder / "lm-a.json"):
        _refused(read_progress, folder / "lm-a.json", "named pipe")
        with pytest.raises(InputError, match="named pipe"):
            read_progress(folder)


def test_gavel_json_table_fifo_through_the_cli(tmp_path):
    fifo = tmp_path / "gavel.json"
    os.mkfifo(fifo)
    with _Unblocker(fifo):
        result = runner.invoke(app, ["table", "import-gavel", str(fifo), "--out", str(tmp_path / "t.csv")])
    assert result.exit_code == 2
    assert "named pipe" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("reader", READERS)
def test_size_cap_of_every_reader(tmp_path, reader, monkeypatch):
    """Every reader has a cap: with every cap at 64 bytes, a larger file is refused by its size."""
    name, read = READERS[reader]
    monkeypatch.setattr(files, "MAX_BYTES", dict.fromkeys(files.MAX_BYTES, 64))
    path = tmp_path / name
    path.write_bytes(b" " * 65)
    _refused(read, path, "more than the")


def test_real_cap_on_a_sparse_table(tmp_path):
    """A 3 GiB file (sparse: no disk used) is refused by its size before anything is read."""
    path = tmp_path / "huge.csv"
    with open(path, "wb") as f:
        f.truncate(3 * files.GiB)
    _refused(read_table, path, "3 GiB", "2 GiB")


def test_caps_are_generous():
    assert files.MAX_BYTES["table"] == files.MAX_BYTES["trace"] == 2 * files.GiB
    assert min(files.MAX_BYTES.values()) >= 64 * files.MiB


# --------------------------------------------------------------------------- 2. number spellings

FULL_WIDTH = str.maketrans("0123456789.-+", "０１２３４５６７８９．－＋")
ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
DEVANAGARI = str.maketrans("0123456789", "०१२३४५६७८९")


def _spellings(number: str) -> list[str]:
    """Ways to write `number` that float() or int() accept but that are not ASCII numbers."""
    out = [number.translate(FULL_WIDTH), number.translate(ARABIC_INDIC), number.translate(DEVANAGARI)]
    out += [number + "\u00a0", "\u00a0" + number, number + "\u3000", "\u2003" + number, number + "\u2028"]
    if len(number) > 1 and number.isdigit():
        out.append(number[0] + "_" + number[1:])
    return [s for s in out if s != number]


NUMBERS = st.integers(min_value=1, max_value=10**9).map(str) | st.floats(0.5, 1e6).map(lambda x: f"{x:.3f}")


@settings(max_examples=40, deadline=None, derandomize=True)
@given(number=NUMBERS, pick=st.integers(min_value=0))
def test_non_ascii_spellings_are_not_numbers(number, pick):
    spellings = _spellings(number)
    text = spellings[pick % len(spellings)]
    assert number_text(number) is not None
    assert number_text(text) is None
    where = Where("f.csv", 3)
    for parse in (parse_float, parse_int):
        with pytest.raises(InputError, match=r"f.csv: row 3: field 'x'"):
            parse(text, where, "x")
    with pytest.raises(InputError):
        optional_float(text, where, "x")


@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_not_numbers(value):
    with pytest.raises(InputError, match="expected a number"):
        parse_float(value, Where("f.json"), "x")
    with pytest.raises(InputError, match="expected an integer"):
        parse_int(value, Where("f.json"), "x")


def _jobs_csv(tmp_path: Path, column: str, value: str) -> Path:
    text = (DATA / "jobs.csv").read_text(encoding="utf-8").splitlines()
    header = text[0].split(",")
    cells = text[1].split(",")
    cells[header.index(column)] = value
    path = tmp_path / "jobs.csv"
    path.write_text("\n".join([text[0], ",".join(cells)]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("value", ["１", "٢", "1_0", "2\u00a0", "1:30"])
@pytest.mark.parametrize("column", ["priority_weight", "arrival_s", "duration_s"])
def test_job_list_number_spellings(tmp_path, column, value):
    _refused(_jobs, _jobs_csv(tmp_path, column, value), f"field '{column}'")


def test_json_true_where_a_number_goes(tmp_path):
    jobs = [{"job_id": "a", "model": "LM", "batch_size": 20, "duration_s": 60, "priority_weight": True}]
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(jobs), encoding="utf-8")
    _refused(_jobs, path, "field 'priority_weight'")
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"jobs": [{"job_id": "a", "steps_done": True}]}), encoding="utf-8")
    _refused(read_progress, progress, "field 'steps_done'")


@pytest.mark.parametrize(
    "scalar, expected",
    [("1:30", "1:30"), ("010", "010"), ("0x1F", "0x1F"), ("1_000", "1_000"), ("0o17", "0o17"), ("yes", "yes")]
    + [("on", "on"), ("12", 12), ("-3", -3), ("1.5", 1.5), ("1e3", 1000.0), ("true", True), ("0", 0)],
)
def test_yaml_core_schema(scalar, expected):
    assert load_yaml(f"a: {scalar}\n", "f.yaml") == {"a": expected}


@pytest.mark.parametrize("gpus", ["1:30", "010", "0x10", "1_0", "yes", "１"])
def test_yaml_1_1_numbers_in_a_cluster(tmp_path, gpus):
    path = tmp_path / "cluster.yaml"
    path.write_text(f"worker_types:\n  v100:\n    gpus: {gpus}\n", encoding="utf-8")
    _refused(read_cluster, path, "gpus")


@pytest.mark.parametrize("spec", ["３６:36:36", "1_0:1:1", "٣:1:1", "v100=１"])
def test_inline_cluster_spellings(spec):
    with pytest.raises(InputError, match="GPU count"):
        parse_cluster(spec)


# --------------------------------------------------------------------------- 3. broken structure


def test_unclosed_quote_in_a_job_list(tmp_path):
    lines = (DATA / "jobs.csv").read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 12
    lines[2] = lines[2].replace(",python", ',"python', 1)
    path = tmp_path / "jobs.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    message = _refused(_jobs, path, "row 2", "quote")
    assert len(message) < 400


@pytest.mark.parametrize("reader", ["table", "jobs-csv", "progress-csv"])
def test_duplicate_csv_column(tmp_path, reader):
    name, read = READERS[reader]
    source = {"table": DATA / "throughputs.csv", "jobs-csv": DATA / "jobs.csv"}.get(reader)
    text = source.read_text(encoding="utf-8") if source else "job_id,steps_done\nlm-a,5\n"
    head, _, rest = text.partition("\n")
    first = head.split(",")[0]
    body = "\n".join(line + "," + line.split(",")[0] for line in rest.splitlines() if line)
    path = tmp_path / name
    path.write_text(f"{head},{first}\n{body}\n", encoding="utf-8")
    _refused(read, path, "twice", f"field '{first}'")


def _with_duplicate_key(data: bytes) -> bytes:
    """The first key of the top-level object given twice (the second value kept by json.loads)."""
    text = data.decode().lstrip()
    assert text.startswith("{")
    doc = json.loads(text)
    key = next(iter(doc))
    return ("{" + json.dumps(key) + ": " + json.dumps(doc[key]) + ", " + text[1:]).encode()


@pytest.mark.parametrize(
    "reader, content",
    [
        ("cluster-json", b'{"worker_types": {"v100": {"gpus": 4}}}'),
        ("gavel-json", (DATA / "gavel" / "simulation_throughputs.json").read_bytes()),
        ("progress-json", (DATA / "examples" / "progress.json").read_bytes()),
        ("jobs-json", b'{"format": "rota.jobs/v1", "jobs": []}'),
    ],
)
def test_duplicate_json_key(tmp_path, reader, content):
    name, read = READERS[reader]
    path = tmp_path / name
    path.write_bytes(_with_duplicate_key(content))
    _refused(read, path, "twice")


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> Path:
    """A folder with state.json and schedule.json of one planned round."""
    folder = tmp_path_factory.mktemp("planned")
    result = runner.invoke(
        app,
        ["plan", *PLAN, "-j", str(DATA / "jobs.csv"), "--state", str(folder / "state.json")]
        + ["--out", str(folder / "schedule.json"), "--rounds", "1"],
    )
    assert result.exit_code == 0, result.output
    return folder


def test_schedule_with_a_second_rounds_key(tmp_path, planned):
    text = (planned / "schedule.json").read_text(encoding="utf-8")
    path = tmp_path / "schedule.json"
    path.write_text(text.replace("{", '{"rounds": [], ', 1), encoding="utf-8")
    _refused(READERS["schedule"][1], path, "twice", "rounds")
    state = tmp_path / "state.json"
    state.write_text((planned / "state.json").read_text().replace("{", '{"rounds_done": 0, ', 1))
    _refused(read_state, state, "twice")


def test_header_only_table_and_empty_gavel(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text((DATA / "throughputs.csv").read_text().splitlines()[0] + "\n", encoding="utf-8")
    _refused(read_table, table, "no rows")
    gavel = tmp_path / "g.json"
    gavel.write_text("{}", encoding="utf-8")
    _refused(import_gavel, gavel, "no rows")
    result = runner.invoke(app, ["table", "import-gavel", str(gavel), "--out", str(tmp_path / "o.csv")])
    assert result.exit_code == 2 and "no rows" in result.output
    assert not (tmp_path / "o.csv").exists()


# --------------------------------------------------------------------------- 4. implausible state and progress


def _state_with(planned: Path, tmp_path: Path, edit) -> Path:
    data = json.loads((planned / "state.json").read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "field, value",
    [
        ("progress", float("nan")),
        ("progress", -5),
        ("steps_done", -1),
        ("total_steps", float("inf")),
        ("total_steps", 1e300),
        ("progress", 1e11),  # more than the job's total
        ("arrival_s", 1e308),
        ("priority_weight", 0),
    ],
)
def test_implausible_job_in_state(tmp_path, planned, field, value):
    path = _state_with(planned, tmp_path, lambda d: d["jobs"][0].update({field: value}))
    _refused(read_state, path, f"jobs.{field}", "row 1")


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d.update(rounds_done=-1), "rounds_done"),
        (lambda d: d["engine"].update(t=1e308), "engine.t"),
        (lambda d: d["mechanism"].update(round_s=float("nan")), "mechanism.round_s"),
        (lambda d: d["mechanism"].update(worker_time=[float("nan")] * len(d["worker_types"])), "mechanism.worker_time"),
    ],
)
def test_implausible_engine_in_state(tmp_path, planned, edit, field):
    _refused(read_state, _state_with(planned, tmp_path, edit), f"field '{field}'")


@pytest.mark.parametrize(
    "report, field",
    [
        ({"time_s": 1e308, "jobs": []}, "time_s"),
        ({"jobs": [{"job_id": "lm-a", "steps_done": 5, "elapsed_s": 1e300}]}, "elapsed_s"),
        ({"jobs": [{"job_id": "lm-a", "steps_done": 1e15, "elapsed_s": 0.001}]}, "steps_done"),
    ],
)
def test_implausible_progress_values(tmp_path, report, field):
    path = tmp_path / "progress.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    _refused(read_progress, path, f"field '{field}'")


def _plan_next(planned: Path, tmp_path: Path, progress: dict | Path, *extra: str):
    state = tmp_path / "state.json"
    shutil.copy(planned / "state.json", state)
    if isinstance(progress, dict):
        path = tmp_path / "progress.json"
        path.write_text(json.dumps(progress), encoding="utf-8")
    else:
        path = progress
    args = ["plan-next", "--state", str(state), "--progress", str(path), "--out", str(tmp_path / "r.json"), *extra]
    return runner.invoke(app, args), state


def _planned_steps(planned: Path, job: str) -> tuple[float, float]:
    state = json.loads((planned / "state.json").read_text(encoding="utf-8"))
    before = state["last_plan"]["jobs"][job]
    entry = next(e for e in state["jobs"] if e["job_id"] == job)
    return before, entry["progress"] - before


def test_report_far_above_the_plan_is_refused(tmp_path, planned):
    before, steps = _planned_steps(planned, "lm-a")
    assert steps > 0
    result, state = _plan_next(planned, tmp_path, {"jobs": [{"job_id": "lm-a", "steps_done": before + 17 * steps}]})
    assert result.exit_code == 2, result.output
    assert "lm-a" in result.output and "steps_done" in result.output and "plausible" in result.output
    assert state.read_bytes() == (planned / "state.json").read_bytes()  # nothing written


def test_report_above_the_total_is_counted_as_the_total(tmp_path, planned):
    state = json.loads((planned / "state.json").read_text(encoding="utf-8"))
    entry = next(e for e in state["jobs"] if e["job_id"] == "a3c-a")
    total = entry["total_steps"]
    result, path = _plan_next(planned, tmp_path, {"jobs": [{"job_id": "a3c-a", "steps_done": total * 1.2}]})
    assert result.exit_code == 0, result.output
    assert "more than its total" in result.output
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert next(e for e in saved["jobs"] if e["job_id"] == "a3c-a")["progress"] == total


def test_report_somewhat_above_the_plan_warns(tmp_path, planned):
    before, steps = _planned_steps(planned, "lm-a")
    result, _ = _plan_next(planned, tmp_path, {"jobs": [{"job_id": "lm-a", "steps_done": before + 3 * steps}]})
    assert result.exit_code == 0, result.output
    assert "warning" in result.output and "were planned" in result.output


def test_progress_folder_job_id_must_match_file_name(tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "lm-a.json").write_text(json.dumps({"job_id": "lm-b", "steps_done": 5}), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_progress(folder)
    message = str(caught.value)
    assert "lm-a.json" in message and "'lm-b'" in message and "field 'job_id'" in message


def test_changed_table_is_named_in_a_warning(tmp_path, planned):
    table = tmp_path / "table.csv"
    shutil.copy(DATA / "throughputs.csv", table)
    state = tmp_path / "state.json"
    first = runner.invoke(
        app,
        ["plan-next", "-t", str(table), "-c", str(DATA / "cluster.yaml"), "-j", str(DATA / "jobs.csv")]
        + ["--state", str(state), "--out", str(tmp_path / "r0.json")],
    )
    assert first.exit_code == 0, first.output
    with open(table, "a", encoding="utf-8") as f:
        f.write("\n")  # same rows, other bytes
    again = runner.invoke(app, ["plan-next", "--state", str(state), "--out", str(tmp_path / "r1.json")])
    assert again.exit_code == 0, again.output
    assert "changed since the state was planned" in again.output and "table" in again.output


# --------------------------------------------------------------------------- 5. outputs that overwrite inputs


def _copy_inputs(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("jobs.csv", "throughputs.csv", "cluster.yaml"):
        out[name] = tmp_path / name
        shutil.copy(DATA / name, out[name])
    return out


def _plan_args(paths: dict[str, Path]) -> list[str]:
    return ["-t", str(paths["throughputs.csv"]), "-j", str(paths["jobs.csv"]), "-c", str(paths["cluster.yaml"])]


@pytest.mark.parametrize(
    "command",
    [
        lambda p, t: ["plan", *_plan_args(p), "--out", str(p["jobs.csv"])],
        lambda p, t: ["plan", *_plan_args(p), "--out", str(t / "s.json"), "--csv", str(p["throughputs.csv"])],
        lambda p, t: ["plan", *_plan_args(p), "--out", str(p["cluster.yaml"])],
        lambda p, t: (
            ["compare", "--jobs", str(p["jobs.csv"]), "-c", str(p["cluster.yaml"])]
            + ["-t", str(p["throughputs.csv"]), "-p", "fifo", "--out", str(p["jobs.csv"])]
        ),
        lambda p, t: (
            ["trace", "generate", "-t", str(p["throughputs.csv"]), "-n", "3"] + ["--out", str(p["throughputs.csv"])]
        ),
    ],
    ids=["plan-out-jobs", "plan-csv-table", "plan-out-cluster", "compare-out-jobs", "trace-out-table"],
)
def test_output_equal_to_an_input_is_refused(tmp_path, command):
    paths = _copy_inputs(tmp_path)
    before = {name: path.read_bytes() for name, path in paths.items()}
    result = runner.invoke(app, command(paths, tmp_path))
    assert result.exit_code == 2, result.output
    assert "would overwrite the input" in result.output and "Traceback" not in result.output
    assert {name: path.read_bytes() for name, path in paths.items()} == before


@pytest.mark.parametrize("option", ["--out", "--state-out"])
def test_plan_next_outputs_over_its_inputs(tmp_path, planned, option):
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"jobs": []}), encoding="utf-8")
    state = tmp_path / "state.json"
    shutil.copy(planned / "state.json", state)
    kept = {p: p.read_bytes() for p in (progress, state)}
    victim = state if option == "--out" else progress
    args = ["plan-next", "--state", str(state), "--progress", str(progress)]
    args += ["--out", str(victim if option == "--out" else tmp_path / "r.json")]
    if option == "--state-out":
        args += ["--state-out", str(progress)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "would overwrite the input" in result.output or "same file" in result.output
    assert {p: p.read_bytes() for p in kept} == kept


def test_plan_next_updates_its_state_in_place(tmp_path, planned):
    result, state = _plan_next(planned, tmp_path, {"jobs": []})
    assert result.exit_code == 0, result.output
    assert json.loads(state.read_text())["version"] == json.loads((planned / "state.json").read_text())["version"] + 1


def test_output_onto_a_device_or_fifo_is_refused(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    link = tmp_path / "null.json"
    link.symlink_to("/dev/null")
    for target in (fifo, link):
        with pytest.raises(InputError, match="an output must be a regular file"):
            write_text_atomic(target, "{}")
    assert fifo.is_fifo() and link.is_symlink()
    result = runner.invoke(app, ["plan", *PLAN, "-j", str(DATA / "jobs.csv"), "--out", str(fifo)])
    assert result.exit_code == 2 and "regular file" in result.output


def test_input_layer_records_what_it_read(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{}", encoding="utf-8")
    files.read_json(path)
    with pytest.raises(InputError, match="would overwrite the input"):
        write_text_atomic(path, "[]")
    write_text_atomic(path, "[]", replaces_input=True)  # the explicit allowance
    write_text_atomic(path, "[1]")  # now a file this process wrote: no user data at stake
    assert path.read_text() == "[1]"


# --------------------------------------------------------------------------- 6. clear messages

LONG = "m" * 1_000_000


@pytest.mark.parametrize("column", ["model", "job_id"])
def test_huge_values_are_cut_in_messages(tmp_path, column):
    message = _refused(_jobs, _jobs_csv(tmp_path, column, LONG[:100_000]), f"field '{column}'")
    assert len(message) < 1000 and "100000 characters" in message
    job = {"job_id": "a", "model": "LM", "batch_size": 20, "duration_s": 60, column: LONG}
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([job]), encoding="utf-8")
    message = _refused(_jobs, path, f"field '{column}'")
    assert len(message) < 1000 and "1000000 characters" in message
    _refused(_jobs, _jobs_csv(tmp_path, column, LONG), "longer than")


def test_huge_node_name_in_a_cluster(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(f"worker_types:\n  v100:\n    gpus: 1\n    nodes: [{LONG}]\n", encoding="utf-8")
    message = _refused(read_cluster, path)
    assert len(message) < 1000


@pytest.mark.parametrize("reader", READERS)
def test_utf16_without_bom(tmp_path, reader):
    name, read = READERS[reader]
    path = tmp_path / name
    path.write_bytes("job_id,steps_done\nlm-a,1\n".encode("utf-16-le"))
    message = _refused(read, path, "UTF-16")
    assert "\\x00" not in message and len(message) < 300


@pytest.mark.parametrize("weight", ["1e-300", "1e-7", "1e7", "1e300"])
def test_weights_are_bounded(tmp_path, weight):
    _refused(_jobs, _jobs_csv(tmp_path, "priority_weight", weight), "field 'priority_weight'", "outside")


def test_recorded_input_paths_never_climb(tmp_path):
    assert files.recorded_input_path("../../etc/passwd", tmp_path) is None
    assert files.recorded_input_path("a/../../x", tmp_path) is None
    (tmp_path / "t.csv").write_text("x", encoding="utf-8")
    assert files.recorded_input_path("t.csv", tmp_path) == tmp_path / "t.csv"
    assert files.recorded_input_path(str(tmp_path / "t.csv"), Path("/")) == tmp_path / "t.csv"
