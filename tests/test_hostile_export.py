"""Every exporter against hostile job ids, node names, worker types, policy names and
commands: either a one-line InputError, or launcher files that treat the string as
data (scripts parse, running them creates nothing the command itself does not,
every YAML file holds exactly one object, progress files stay in their folder)."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner.errors import InputError
from planner.export import export_schedule, load_context
from planner.export.common import control_character, progress_file_name
from planner.export.flat_csv import spreadsheet_safe
from planner.formats.schedule import SCHEDULE_FORMAT

HOSTILE = [
    "=cmd|' /C calc'!A0",
    "+1+2",
    "@SUM(A1:A2)",
    "-2+3",
    "a\nb",
    "a\ntouch INJ_NL",
    "$(touch INJ_SUB)",
    "`touch INJ_BT`",
    "a; touch INJ_SEMI",
    "a && touch INJ_AND",
    "it's",
    'say "hi"',
    "a b",
    "--uid=0",
    "n0 --uid=0",
    "---\nkind: ConfigMap\nmetadata: {name: smuggled}",
    "a\n---\nkind: ConfigMap",
    "../../escape",
    "/abs/path",
    ".hidden",
    "a\rb",
    "a\tb",
    "a\u2028b\x85c",
    "ünïcødé-ジョブ",
    "[bold]a",
    "# not a comment",
    "x" * 3000,
    "a\\nb",
    "$HOME",
    "*",
]
ROLES = ["job", "node", "worker_type", "policy", "command"]
FORMATS = ["slurm", "kubernetes", "ray", "csv"]
PROGRESS_DIR = "/shared/progress"


def write_inputs(folder: Path, *, job="j1", node="n0", worker_type="v100", policy="fifo", command="true") -> Path:
    """A cluster file and a two-round schedule: a co-located pair, a 3-GPU gang over two
    nodes with unequal GPU counts, then the job alone."""
    folder.mkdir(parents=True, exist_ok=True)
    cluster = {"worker_types": {worker_type: {"gpus": 4, "gpus_per_node": 2, "nodes": [node, "n1"]}}}
    (folder / "cluster.yaml").write_text(yaml.safe_dump(cluster), encoding="utf-8")

    def gpus(*slots):
        return [{"node": n, "gpu": g} for n, g in slots]

    entry = {"total_steps": 1000, "arrival_s": 0, "scale_factor": 1, "command": command}
    schedule = {
        "format": SCHEDULE_FORMAT,
        "policy": {"name": policy, "options": {}},
        "round_s": 360,
        "inputs": {"cluster": {"path": "cluster.yaml", "digest": None}},
        "rounds": [
            {
                "index": 0,
                "start_s": 0,
                "end_s": 360,
                "assignments": [
                    {
                        "jobs": [job, "j2"],
                        "worker_type": worker_type,
                        "gpus": gpus((node, 0)),
                        "planned_steps": {job: 10, "j2": 10},
                    },
                    {
                        "jobs": ["j3"],
                        "worker_type": worker_type,
                        "gpus": gpus((node, 1), ("n1", 0), ("n1", 1)),
                        "planned_steps": {"j3": 10},
                    },
                ],
            },
            {
                "index": 1,
                "start_s": 360,
                "end_s": 720,
                "assignments": [
                    {"jobs": [job], "worker_type": worker_type, "gpus": gpus(("n1", 0)), "planned_steps": {job: 10}}
                ],
            },
        ],
        "jobs": {job: entry, "j2": {**entry, "command": "true"}, "j3": {**entry, "scale_factor": 3, "command": "true"}},
    }
    path = folder / "schedule.json"
    path.write_text(json.dumps(schedule), encoding="utf-8")
    return path


def _export(tmp_path: Path, fmt: str, **names) -> Path | None:
    """The export folder, or None after a one-line InputError."""
    out = tmp_path / "out"
    try:
        context = load_context(write_inputs(tmp_path / "in", **names))
        export_schedule(fmt, context, out, progress_dir=PROGRESS_DIR, namespace="team-a")
    except InputError as exc:
        text = str(exc)
        assert text and "Traceback" not in text
        return None
    return out


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _stubs(folder: Path) -> dict[str, str]:
    """Environment whose PATH starts with do-nothing sbatch, squeue, scancel and kubectl."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in {"sbatch": "echo 1", "squeue": "true", "scancel": "true", "kubectl": "true"}.items():
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\n{body}\n")
        stub.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(folder), "ROUND_S": "0", "GRACE_S": "0"}


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> None:
    subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)


def _created_by(command: str, tmp_path: Path, env: dict[str, str]) -> set[str]:
    """Files the command creates when run directly, as the user wrote it."""
    box = tmp_path / "direct"
    box.mkdir()
    _run(["/bin/sh", "-c", command], box, env)
    return _files(box)


def _job_logs(box: Path) -> set[str]:
    """The per-job log files the Slurm wrapper appends to: logs/<safe name>.log, nothing else."""
    logs = {f for f in _files(box) if f == "logs" or f.startswith("logs/")}
    for f in logs - {"logs"}:
        name = f[len("logs/") :]
        assert re.fullmatch(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,140}\.log", name), f"unsafe log file {f!r}"
    return logs


def _check_scripts(out: Path, scripts: list[tuple[str, str]], tmp_path: Path, expected: set[str]) -> None:
    """Each (name, shell text) parses; run in an empty folder it creates exactly `expected`."""
    env = _stubs(tmp_path / "stubs")
    created: set[str] = set()
    for k, (name, text) in enumerate(scripts):
        check = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
        assert check.returncode == 0, f"{name}: {check.stderr}"
        box = tmp_path / f"box{k}"
        box.mkdir()
        (tmp_path / f"script{k}").write_text(text, encoding="utf-8")
        _run(["bash", str(tmp_path / f"script{k}")], box, env)
        made = _files(box) - _job_logs(box)
        assert made <= expected, f"{name} created {made - expected}"
        created |= made
    assert created == expected, "the command did not run as written"
    drivers = [p for p in (out / "driver.sh",) if p.exists()]
    for driver in drivers:
        before = _files(out)
        _run(["bash", str(driver)], tmp_path, env)
        assert _files(out) - before <= {"logs"}, f"driver.sh created {_files(out) - before}"


def _check_slurm(out: Path, tmp_path: Path, expected: set[str]) -> None:
    scripts = sorted(out.rglob("*.sbatch"))
    assert len(scripts) == 3
    for script in scripts:
        for line in script.read_text(encoding="utf-8").splitlines():
            if line.startswith("#SBATCH"):
                assert len(shlex.split(line[len("#SBATCH") :])) == 1, f"{script.name}: {line!r}"
    _check_scripts(out, [(p.name, p.read_text(encoding="utf-8")) for p in scripts], tmp_path, expected)


def _check_kubernetes(out: Path, tmp_path: Path, expected: set[str]) -> None:
    manifests = sorted(out.rglob("*.yaml"))
    assert len(manifests) == 3
    scripts = []
    for manifest in manifests:
        docs = list(yaml.safe_load_all(manifest.read_text(encoding="utf-8")))
        assert len(docs) == 1, f"{manifest.name} holds {len(docs)} objects"
        doc = docs[0]
        assert doc["kind"] in ("Job", "JobSet")
        for task in doc["spec"]["tasks"]:
            container = task["template"]["spec"]["containers"][0]
            assert container["command"][:2] == ["/bin/sh", "-c"]
            scripts.append((manifest.name, container["command"][2]))
    _check_scripts(out, scripts, tmp_path, expected)


def _check_ray(out: Path, names: dict[str, str]) -> None:
    plan = json.loads((out / "ray_plan.json").read_text(encoding="utf-8"))
    jobs = [j for r in plan["rounds"] for g in r["groups"] for j in g["jobs"]]
    assert len(jobs) == 4
    if "job" in names:
        assert names["job"] in {j["job_id"] for j in jobs}
    if "command" in names:
        assert names["command"] in {j["command"] for j in jobs}
    for j in jobs:
        progress = Path(j["env"]["ROTA_PROGRESS_FILE"])
        assert progress.parent == Path(PROGRESS_DIR) and os.path.normpath(progress) == str(progress)


def _check_csv(out: Path, names: dict[str, str]) -> None:
    with open(out / "schedule.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 + 3 + 1
    if "job" in names:
        assert sum(r["job_id"] == spreadsheet_safe(names["job"]) for r in rows) == 2
    if "node" in names:
        assert sum(r["node"] == spreadsheet_safe(names["node"]) for r in rows) == 3
    for row in rows:  # no cell a spreadsheet would run as a formula
        assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in row.values()), row


@pytest.mark.parametrize("fmt", FORMATS)
def test_valid_names_export(tmp_path, fmt):
    """The fixture itself exports cleanly (so the hostile cases below test the names)."""
    out = _export(tmp_path, fmt)
    assert out is not None


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_hostile_string(tmp_path, fmt, role, value):
    names = {role: value}
    out = _export(tmp_path, fmt, **names)
    if out is None:
        assert role != "command" or control_character(value), "a one-line command is run as written, never refused"
        return
    assert role != "command" or not control_character(value), "a command with a control character is refused"
    env = _stubs(tmp_path / "direct-stubs")
    expected = _created_by(value, tmp_path, env) if role == "command" else set()
    if fmt == "slurm":
        _check_slurm(out, tmp_path, expected)
    elif fmt == "kubernetes":
        _check_kubernetes(out, tmp_path, expected)
    elif fmt == "ray":
        _check_ray(out, names)
    else:
        _check_csv(out, names)


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_progress_file_stays_in_its_folder(value):
    name = progress_file_name(value)
    assert "/" not in name and "\\" not in name and not name.startswith(".") and name.isprintable()
    assert len(name) < 200


def test_plain_progress_names_unchanged():
    assert progress_file_name("job-7") == "job-7.json"
    assert progress_file_name("job 7") == "job 7.json"


# --------------------------------------------------------------------------- whole or not at all


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for a folder)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")}


def _leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".rota-export-" in p.name]


def _earlier_export(tmp_path: Path) -> Path:
    """An --out holding an earlier export's files and a file of the user's."""
    out = tmp_path / "out"
    (out / "round-0000").mkdir(parents=True)
    (out / "round-0000" / "old.sbatch").write_text("#!/bin/sh\necho old\n")
    (out / "driver.sh").write_text("#!/bin/sh\necho old driver\n")
    (out / "notes.txt").write_text("mine\n")
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failed_export_leaves_out_as_it_was(tmp_path, fmt, monkeypatch):
    """An error after some files were written (here: half of them) changes nothing in --out."""
    import planner.export.common as common

    out = _earlier_export(tmp_path)
    before = _snapshot(out)
    context = load_context(write_inputs(tmp_path / "in"))
    real = common.atomic_path
    calls = []

    def failing(target, mode=0o666):
        calls.append(target)
        if len(calls) == (1 if fmt == "csv" else 2):  # the CSV export is one file
            raise OSError(28, "No space left on device", str(target))
        return real(target, mode)

    monkeypatch.setattr(common, "atomic_path", failing)
    with pytest.raises(OSError):
        export_schedule(fmt, context, out, progress_dir=PROGRESS_DIR)
    assert _snapshot(out) == before
    assert _leftovers(tmp_path) == []


def test_an_interrupted_export_into_a_new_folder_creates_nothing(tmp_path, monkeypatch):
    import planner.export.common as common
    from planner.export import ExportInterrupted

    out = tmp_path / "new" / "out"
    context = load_context(write_inputs(tmp_path / "in"))
    real = common.atomic_path
    calls = []

    def interrupted(target, mode=0o666):
        calls.append(target)
        if len(calls) == 3:
            raise ExportInterrupted(2)
        return real(target, mode)

    monkeypatch.setattr(common, "atomic_path", interrupted)
    with pytest.raises(ExportInterrupted):
        export_schedule("slurm", context, out)
    assert not (tmp_path / "new").exists()
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "blocker, kind", [("round-0001", "file"), ("driver.sh", "folder"), ("round-0000/j3.sbatch", "folder")]
)
def test_something_in_the_way_is_found_before_any_file_moves(tmp_path, blocker, kind):
    out = _earlier_export(tmp_path)
    if kind == "file":
        (out / blocker).write_text("in the way\n")
    else:
        (out / blocker).unlink(missing_ok=True)
        (out / blocker).mkdir(parents=True)
    before = _snapshot(out)
    context = load_context(write_inputs(tmp_path / "in"))
    with pytest.raises(OSError) as caught:
        export_schedule("slurm", context, out)
    assert caught.value.filename == str(out / blocker)
    assert _snapshot(out) == before
    assert _leftovers(tmp_path) == []


def test_an_export_merges_into_an_earlier_one(tmp_path):
    out = _earlier_export(tmp_path)
    context = load_context(write_inputs(tmp_path / "in"))
    written = export_schedule("slurm", context, out)
    assert (out / "notes.txt").read_text() == "mine\n"  # files rota did not write stay
    assert (out / "round-0000" / "old.sbatch").exists()
    assert "old driver" not in (out / "driver.sh").read_text()  # rewritten
    assert all(p.is_file() for p in written) and _leftovers(tmp_path) == []
    assert os.access(out / "driver.sh", os.X_OK)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_export_leaves_out_as_it_was(tmp_path, signum):
    """`rota export` paused after its first file (the atomic writer's test hook), then signalled:
    exit 128 + the signal, one line, --out unchanged, no temporary folder left."""
    from conftest import ROOT

    out = _earlier_export(tmp_path)
    before = _snapshot(out)
    schedule = write_inputs(tmp_path / "in")
    flag = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROTA_TEST_PAUSE_IN_WRITE": str(flag)}
    command = [sys.executable, "-m", "planner.cli", "export", "slurm", str(schedule), "--out", str(out)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "test hook" in line, line
        proc.send_signal(signum)
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, rest
    assert f"stopped by {signal.Signals(signum).name}: nothing written" in rest and "Traceback" not in rest
    assert _snapshot(out) == before
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("command", ["python a.py\0--evil", "a\x1b[2Jb", "a\x7fb", "a\nb", "a\rb", "a\x85b"])
def test_a_command_with_a_control_character_is_refused(tmp_path, command):
    with pytest.raises(InputError) as caught:
        load_context(write_inputs(tmp_path / "in", job="job-7", command=command))
    message = str(caught.value)
    assert "job 'job-7'" in message and "field 'command'" in message and "control character" in message
    assert "\n" not in message and "\0" not in message


def test_a_tab_in_a_command_is_kept(tmp_path):
    context = load_context(write_inputs(tmp_path / "in", command="python\ta.py"))
    assert context.commands["j1"] == "python\ta.py"


def test_a_default_command_with_a_nul_is_refused(tmp_path):
    schedule = write_inputs(tmp_path / "in")
    data = json.loads(schedule.read_text())
    for entry in data["jobs"].values():
        del entry["command"]
    schedule.write_text(json.dumps(data))
    with pytest.raises(InputError, match="field '--default-command'"):
        load_context(schedule, default_command="run\0x")


@pytest.mark.parametrize("option", ["--qos=high --exclusive", "qos=high  --exclusive", " ", "--comment=a b"])
def test_one_sbatch_option_per_value(tmp_path, option):
    context = load_context(write_inputs(tmp_path / "in"))
    with pytest.raises(InputError, match="one option per --sbatch-option") as caught:
        export_schedule("slurm", context, tmp_path / "out", sbatch_options=[option])
    assert "field '--sbatch-option'" in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_sbatch_options_one_per_line(tmp_path):
    context = load_context(write_inputs(tmp_path / "in"))
    export_schedule("slurm", context, tmp_path / "out", sbatch_options=["--qos=high", "exclusive"])
    script = next((tmp_path / "out").rglob("*.sbatch")).read_text()
    assert "#SBATCH --qos=high\n" in script and "#SBATCH --exclusive\n" in script


def test_csv_cells_that_a_spreadsheet_would_run_get_a_quote(tmp_path):
    out = _export(tmp_path, "csv", job='=HYPERLINK("http://x")', command="@SUM(1+1)")
    assert out is not None
    with open(out / "schedule.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    mine = [r for r in rows if r["job_id"].startswith("'")]
    assert len(mine) == 2 and mine[0]["job_id"] == '\'=HYPERLINK("http://x")'
    assert mine[0]["command"] == "'@SUM(1+1)"
    assert [r["co_located_with"] for r in rows if r["job_id"] == "j2"][0] == '\'=HYPERLINK("http://x")'
    assert all(r["command"] == "true" for r in rows if not r["job_id"].startswith("'"))
