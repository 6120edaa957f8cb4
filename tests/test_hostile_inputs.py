"""Every reader against hostile files: binary, UTF-16, empty, nested 100,000 deep,
alias bombs, huge magnitudes, a folder instead of a file. Each ends in a one-line
InputError naming the file, never a traceback, hang or runaway allocation; and the
command line prints user strings literally, on one line."""

from __future__ import annotations

import csv
import functools
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.cli.plan import _parse_mapping
from planner.errors import InputError
from planner.export import load_context
from planner.formats.cluster import parse_cluster, read_cluster
from planner.formats.gavel_json import import_gavel
from planner.formats.jobs import read_jobs
from planner.formats.progress import read_progress
from planner.formats.schedule import load_schedule
from planner.formats.state import read_state
from planner.formats.table import ThroughputTable, read_table
from planner.formats.trace import read_gavel_trace

TABLE = read_table(DATA / "throughputs.csv")
CLUSTER = read_cluster(DATA / "cluster.yaml")
GAVEL_TABLE = DATA / "gavel" / "simulation_throughputs.json"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")
)
GENERIC = {
    "empty": b"",
    "binary": bytes(range(256)) * 8,
    "utf16": "job_id,steps_done\na,1\n".encode("utf-16"),
    "deep-json": b"[" * 100_000 + b"]" * 100_000,
    "deep-object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "huge-int": b"1" * 5000,
    "null": b"null",
    "string": b'"x"',
    "alias-bomb": BOMB.encode(),
    "deep-yaml": b"[" * 5000 + b"]" * 5000,
}


def _jobs(path: Path) -> object:
    return read_jobs(path, table=TABLE, cluster=CLUSTER)


@functools.cache
def _gavel_table() -> ThroughputTable:
    return import_gavel(GAVEL_TABLE)


def _trace(path: Path) -> object:
    return read_gavel_trace(path, _gavel_table(), parse_cluster("36:36:36"))


def _schedule(path: Path) -> object:
    load_schedule(path)
    return None


def _export_context(path: Path) -> object:
    context = load_context(path, cluster=DATA / "cluster.yaml", need_commands=False)
    context.violations()
    return context.document


def _entity_weights(path: Path) -> object:
    return _parse_mapping(str(path), "--entity-weights", float)


READERS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "cluster-yaml": ("cluster.yaml", read_cluster),
    "cluster-json": ("cluster.json", read_cluster),
    "table": ("table.csv", read_table),
    "gavel-json": ("gavel.json", import_gavel),
    "jobs-csv": ("jobs.csv", _jobs),
    "jobs-json": ("jobs.json", _jobs),
    "trace": ("jobs.trace", _trace),
    "progress-json": ("progress.json", read_progress),
    "progress-csv": ("progress.csv", read_progress),
    "state": ("state.json", read_state),
    "schedule": ("schedule.json", _schedule),
    "schedule-export": ("schedule.json", _export_context),
    "entity-weights": ("weights.yaml", _entity_weights),
}


def _refused(read: Callable[[Path], object], path: Path) -> str:
    with pytest.raises(InputError) as caught:
        read(path)
    message = str(caught.value)
    assert str(path) in message
    return message


@pytest.mark.parametrize("content", GENERIC, ids=list(GENERIC))
@pytest.mark.parametrize("reader", READERS)
def test_generic_hostile_file(tmp_path, reader, content):
    name, read = READERS[reader]
    path = tmp_path / name
    path.write_bytes(GENERIC[content])
    _refused(read, path)


# A progress folder is a valid input (one file per job): those readers are left out.
@pytest.mark.parametrize("reader", [r for r in READERS if not r.startswith("progress")])
def test_folder_instead_of_file(tmp_path, reader):
    name, read = READERS[reader]
    folder = tmp_path / name
    folder.mkdir()
    _refused(read, folder)


def _write_cluster(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "text, expected",
    [
        ("worker_types:\n  v100: {gpus: 1000000000000}\n", "more than"),
        ("worker_types:\n  v100: {gpus: 4}\n  v100: {gpus: 8}\n", "duplicate key"),
        ("worker_types:\n  v100: &s {gpus: 4}\n  k80: *s\n", "aliases"),
        ('worker_types:\n  "a\\nb": {gpus: 2}\n', "not a valid name"),
        ('worker_types:\n  v100: {gpus: 2, gpus_per_node: 1, nodes: ["n0\\ntouch x", n1]}\n', "not a valid name"),
        ("worker_types:\n  v100: {gpus: 2, gpus_per_node: 1, nodes: [{a: 1}, n1]}\n", "nodes[0].a': unknown key"),
        ("worker_types:\n  v100: {gpus: 1e400}\n", "positive integer"),
    ],
)
def test_cluster_bounds(tmp_path, text, expected):
    message = _refused(read_cluster, _write_cluster(tmp_path, text))
    assert expected in message


def test_inline_cluster_bounds():
    with pytest.raises(InputError, match="more than"):
        parse_cluster("1000000000000:0:0")


def _jobs_with(tmp_path: Path, **changes: str) -> Path:
    rows = list(csv.DictReader(open(DATA / "jobs.csv", encoding="utf-8")))
    rows[0].update(changes)
    path = tmp_path / "jobs.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"total_steps": "1e308", "duration_s": ""}, "total_steps"),
        ({"duration_s": "1e300"}, "duration_s"),
        ({"job_id": "a\ntouch INJ"}, "job_id"),
        ({"job_id": "x" * 300}, "job_id"),
        ({"total_steps": "1e400", "duration_s": ""}, "total_steps"),
    ],
)
def test_job_list_bounds(tmp_path, changes, field):
    message = _refused(_jobs, _jobs_with(tmp_path, **changes))
    assert f"field '{field}'" in message


def test_trace_steps_bound(tmp_path):
    line = "ResNet-18 (batch size 128)\tpython3 main.py\tdir\t--num_steps\t1\t1e308\t1\t1\t-1\t0\n"
    path = tmp_path / "jobs.trace"
    path.write_text(line, encoding="utf-8")
    assert "field 'total_steps'" in _refused(_trace, path)


def test_schedule_with_wrong_types(tmp_path):
    """Malformed sections reach the validator as problems, not AttributeError / TypeError."""
    base = json.loads(
        json.dumps(
            {
                "format": "rota.schedule/v1",
                "round_s": 360,
                "rounds": "x",
                "jobs": {"a": {"total_steps": 10, "steps_done_at_start": "x"}},
            }
        )
    )
    for rounds in ("x", None, [{"index": 0, "start_s": 0, "end_s": 1, "assignments": "x"}], [{"assignments": [None]}]):
        base["rounds"] = rounds
        path = tmp_path / "schedule.json"
        path.write_text(json.dumps(base), encoding="utf-8")
        context = load_context(path, cluster=DATA / "cluster.yaml", need_commands=False)
        assert context.violations()


# --------------------------------------------------------------------------- the command line

runner = CliRunner()


def test_cli_prints_user_strings_literally(tmp_path):
    """A job id like '[bold]a:x:' is neither rich markup nor an emoji code."""
    jobs = _jobs_with(tmp_path, job_id="[bold]a:x:")
    result = runner.invoke(
        app,
        ["plan", "-t", str(DATA / "throughputs.csv"), "-j", str(jobs), "-c", str(DATA / "cluster.yaml")]
        + ["--out", str(tmp_path / "s.json"), "--rounds", "1"],
    )
    assert result.exit_code == 0, result.output
    assert "[bold]a:x:" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["schedule", "validate", "{bad_json}"],
        ["export", "slurm", "{schedule}", "--out", "{file}"],
        ["export", "slurm", "{schedule}", "--out", "{file}/sub"],
        ["export", "slurm", "{schedule}", "--out", "{out}", "--cluster", "{bad_cluster}"],
        ["export", "slurm", "{schedule}", "--out", "{out}", "--sbatch-option", "--qos=a\ntouch INJ"],
        ["plan", "-t", "{binary}", "-j", "{jobs}", "-c", "{cluster}"],
    ],
    ids=["bad-json", "out-is-a-file", "out-under-a-file", "newline-name", "newline-option", "binary-table"],
)
def test_cli_errors_are_one_line(tmp_path, args):
    shutil.copy(DATA / "cluster.yaml", tmp_path / "cluster.yaml")
    schedule = tmp_path / "schedule.json"
    cluster = {"worker_types": {"v100": {"gpus": 1}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster), encoding="utf-8")
    schedule.write_text(
        json.dumps(
            {
                "format": "rota.schedule/v1",
                "round_s": 360,
                "inputs": {"cluster": {"path": "c.yaml", "digest": None}},
                "rounds": [
                    {
                        "index": 0,
                        "start_s": 0,
                        "end_s": 360,
                        "assignments": [
                            {
                                "jobs": ["a"],
                                "worker_type": "v100",
                                "gpus": [{"node": "v100-0", "gpu": 0}],
                                "planned_steps": {"a": 1},
                            }
                        ],
                    }
                ],
                "jobs": {"a": {"total_steps": 10, "command": "true"}},
            }
        ),
        encoding="utf-8",
    )
    (tmp_path / "bad.json").write_text("[" * 100_000, encoding="utf-8")
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "bad_cluster.yaml").write_text('worker_types:\n  "v\\n100": {gpus: 1}\n', encoding="utf-8")
    (tmp_path / "binary.csv").write_bytes(bytes(range(256)))
    names = {
        "bad_json": tmp_path / "bad.json",
        "schedule": schedule,
        "file": tmp_path / "file",
        "out": tmp_path / "out",
        "bad_cluster": tmp_path / "bad_cluster.yaml",
        "binary": tmp_path / "binary.csv",
        "jobs": DATA / "jobs.csv",
        "cluster": DATA / "cluster.yaml",
    }
    result = runner.invoke(app, [a.format(**names) for a in args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert not (tmp_path / "INJ").exists()


# --------------------------------------------------------------------------- state versions and missing progress


def _first_state(tmp_path: Path, jobs: Path = DATA / "jobs.csv") -> Path:
    state = tmp_path / "state.json"
    result = runner.invoke(
        app,
        ["plan-next", "--state", str(state), "--out", str(tmp_path / "r0.json"), "-j", str(jobs)]
        + ["-t", str(DATA / "throughputs.csv"), "-c", str(DATA / "cluster.yaml")],
    )
    assert result.exit_code == 0, result.output
    return state


@pytest.mark.parametrize(
    "key, value, field",
    [
        ("version", -1, "version"),
        ("version", "2", "version"),
        ("version", True, "version"),
        ("last_plan", "x", "last_plan"),
        ("last_plan", {"id": "", "from_version": 0, "first_round": 0, "rounds": 1}, "last_plan"),
        ("last_plan", {"id": "a", "from_version": 0, "first_round": 0, "rounds": 1, "jobs": {"a": -1}}, "last_plan"),
        ("last_plan", {"id": "a", "from_version": 0, "first_round": 0, "rounds": 1, "jobs": {"a": 1e400}}, "last_plan"),
        ("last_plan", {"id": "a", "from_version": 0, "first_round": 0, "rounds": 1, "jobs": ["a"]}, "last_plan"),
    ],
)
def test_state_version_fields(tmp_path, key, value, field):
    state = _first_state(tmp_path)
    data = json.loads(state.read_text())
    data[key] = value
    state.write_text(json.dumps(data))
    message = _refused(read_state, state)
    assert f"field '{field}'" in message
    result = runner.invoke(app, ["plan-next", "--state", str(state), "--out", str(tmp_path / "r1.json")])
    assert result.exit_code == 2 and f"field '{field}'" in result.output, result.output


def _round(path: Path) -> dict:
    return json.loads(path.read_text())


def test_a_job_without_a_report_made_no_progress(tmp_path):
    """One job ignored SIGTERM and hit TIMEOUT, one was cancelled before it started: neither wrote
    a report. They get 0 steps for the round, never the planned ones, with a warning each."""
    state = _first_state(tmp_path)
    planned = _round(tmp_path / "r0.json")
    listed = [a["jobs"][0] for a in planned["rounds"][0]["assignments"]]
    steps = {j: n for a in planned["rounds"][0]["assignments"] for j, n in a["planned_steps"].items()}
    silent = listed[:2]
    folder = tmp_path / "progress"
    folder.mkdir()
    for jid in listed[2:]:
        (folder / f"{jid}.json").write_text(json.dumps({"steps_done": steps[jid]}))
    result = runner.invoke(
        app, ["plan-next", "--state", str(state), "--progress", str(folder), "--out", str(tmp_path / "r1.json")]
    )
    assert result.exit_code == 0, result.output
    warned = [line.split(":")[1].strip() for line in result.output.splitlines() if "no progress report for" in line]
    assert warned == silent
    for jid in silent:
        assert (
            f"warning: {jid}: no progress report for round 0; counted as 0 steps, not the {steps[jid]:g}"
            in result.output
        )
    assert f"{len(silent)} job(s) of round 0 sent no progress report in {folder}" in result.output
    after = _round(tmp_path / "r1.json")["jobs"]
    for jid in silent:
        assert after[jid]["steps_done_at_start"] == 0
    for jid in listed[2:]:
        assert after[jid]["steps_done_at_start"] == steps[jid]


def test_no_report_at_all_credits_nothing(tmp_path):
    state = _first_state(tmp_path)
    listed = {j for a in _round(tmp_path / "r0.json")["rounds"][0]["assignments"] for j in a["jobs"]}
    result = runner.invoke(app, ["plan-next", "--state", str(state), "--out", str(tmp_path / "r1.json"), "--json"])
    assert result.exit_code == 0, result.output
    after = _round(tmp_path / "r1.json")["jobs"]
    assert all(after[j]["steps_done_at_start"] == 0 for j in listed)
    assert f"{len(listed)} job(s) of round 0 sent no progress report" in result.output


def test_a_job_planned_to_finish_without_a_report_runs_again(tmp_path):
    rows = list(csv.DictReader(open(DATA / "jobs.csv", encoding="utf-8")))
    rows[0].update(total_steps="10", duration_s="")
    jobs = tmp_path / "jobs.csv"
    with open(jobs, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    state = _first_state(tmp_path, jobs)
    short = rows[0]["job_id"]
    assert _round(tmp_path / "r0.json")["jobs"][short]["expected_finish_s"] is not None
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"round": 0, "jobs": [], "cancelled": [rows[1]["job_id"]]}))
    result = runner.invoke(
        app, ["plan-next", "--state", str(state), "--progress", str(progress), "--out", str(tmp_path / "r1.json")]
    )
    assert result.exit_code == 0, result.output
    after = _round(tmp_path / "r1.json")["jobs"]
    assert after[short]["steps_done_at_start"] == 0  # it did not finish: it is planned again
    assert rows[1]["job_id"] not in after
    assert f"warning: {rows[1]['job_id']}:" not in result.output  # cancelled, so not missing
