"""`rota profile` through typer, registered on a local app as the main CLI does."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from planner.formats.table import read_table
from profiler import cli as profiler_cli
from profiler import devices as devices_mod
from profiler.cli import profile_command
from profiler.devices import DeviceType
from profiler.plan import JobRef, Task
from profiler.report import device_table, model_table, noisy_note, outcome_line
from profiler.session import RunOptions, TaskOutcome
from profiler.workloads import parse_workload

ROOT = Path(__file__).resolve().parents[1]
app = typer.Typer()
app.command("profile")(profile_command)


@app.command("other")
def _other() -> None:  # a second command keeps "profile" a subcommand, as in the real app
    pass


runner = CliRunner()
HUNG_S = 600  # only to fail a hung subprocess instead of blocking the suite; nothing is timed


def invoke(*args: str):
    return runner.invoke(app, ["profile", *args])


def test_help_has_an_example():
    result = invoke("--help")
    assert result.exit_code == 0
    assert "rota profile --device-types cpu --scale tiny" in result.output


def test_list_devices_shows_the_cpu():
    result = invoke("--list-devices", "--device-types", "cpu", "--json")
    assert result.exit_code == 0, result.output
    (cpu,) = json.loads(result.output)
    assert cpu["worker_type"] == "cpu" and cpu["max_scale_factor"] >= 1
    assert "cpu" in invoke("--list-devices", "--device-types", "cpu").output


def test_dry_run_prints_plan_and_estimate(tmp_path):
    result = invoke(
        "--dry-run",
        "--device-types",
        "cpu",
        "--scale",
        "tiny",
        "--models",
        "LM,A3C",
        "--scale-factors",
        "1",
        "--budget",
        "5",
        "--out",
        str(tmp_path / "t.csv"),
    )
    assert result.exit_code == 0, result.output
    assert "Profiling plan" in result.output
    assert "27 measurements to run" in result.output  # 6 solo + 6*7/2 pairs
    assert not (tmp_path / "t.csv").exists()
    plan = json.loads(invoke("--dry-run", "--json", "--device-types", "cpu", "--models", "A3C").output)
    assert [m["mode"] for m in plan["measurements"]] == ["solo", "pair"] and plan["estimate_s"] > 0


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--models", "AlexNet"], "unknown model 'AlexNet'"),
        (["--device-types", "tpu"], "no device of type tpu"),
        (["--scale", "huge"], "--scale"),
        (["--pairs", "LM@5"], "--pairs"),
        (["--budget", "0"], "budget"),
        (["--out", "table.txt"], ".csv or .parquet"),
    ],
)
def test_user_errors_are_one_line(args, needle):
    result = invoke("--dry-run", "--device-types", "cpu", *args)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.output
    assert "Traceback" not in result.output


def test_tiny_run_writes_a_valid_table_and_resume_skips(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "t.csv"
    args = [
        "--device-types",
        "cpu",
        "--scale",
        "tiny",
        "--models",
        "LM",
        "--batch-sizes",
        "5",
        "--pairs",
        "LM@5+LM@5",
        "--scale-factors",
        "1",
        "--budget",
        "0.5",
        "--out",
        str(out),
    ]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    table = read_table(out)
    frame = table.to_frame()
    assert len(frame) == 2 and set(frame.status) == {"ok"}
    assert frame.device_name.str.endswith("[tiny scale]").all()
    assert (frame.throughput > 0).all() and (frame.peak_memory_bytes >= 0).all()
    again = invoke(*args, "--resume")
    assert again.exit_code == 0 and "2 skipped" in again.output
    pd.testing.assert_frame_equal(frame, read_table(out).to_frame())


CLI = (
    "import sys, typer; sys.path.insert(0, {root!r}); from profiler.cli import profile_command;"
    "app = typer.Typer(); app.command()(profile_command); app()"
)


def test_ctrl_c_stops_cleanly_with_the_table_intact(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "t.csv"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CLI.format(root=str(ROOT)),
            "--device-types",
            "cpu",
            "--scale",
            "tiny",
            "--models",
            "LM",
            "--pairs",
            "none",
            "--scale-factors",
            "1",
            "--budget",
            "1",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, which gets the Ctrl-C as from a terminal
        # Python turns SIGINT into KeyboardInterrupt only if it was not ignored when it started, and an
        # ignored SIGINT is inherited (a background job of a script has it): the command gets the default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    # Interrupt once the first row is in (written atomically: there means complete). No deadline
    # decides when: HUNG_S only fails a hung run instead of blocking the suite.
    try:
        hung_at = time.monotonic() + HUNG_S
        while not out.exists():
            assert proc.poll() is None, f"ended before writing a row: {proc.communicate()[0]}"
            assert time.monotonic() < hung_at, "no row written: hung?"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # the command and its workers, starting or running
        output, _ = proc.communicate(timeout=HUNG_S)
    finally:
        if proc.poll() is None:  # the test failed: leave nothing running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, output
    assert "--resume" in output and "Traceback" not in output
    assert 1 <= len(read_table(out)) < 5


# --------------------------------------------------------------------------- what is printed


def rendered(*renderables) -> str:
    """What the command's console (rich markup on) shows for these."""
    console = Console(file=io.StringIO(), width=400, highlight=False)
    for r in renderables:
        console.print(r)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_list_devices_without_torch_names_the_extra_in_full(monkeypatch):
    monkeypatch.setattr(devices_mod, "torch_available", lambda: False)
    result = invoke("--list-devices", "--device-types", "cpu")
    assert result.exit_code == 0, result.output
    assert "pip install 'rota[profiler]'" in result.output  # rich once ate "[profiler]" as markup


def test_text_from_elsewhere_is_shown_as_written_not_read_as_markup():
    cpu = DeviceType("v100[lab]", "cpu", (0,), "Some CPU [tiny scale]", core_ids=(0,))
    table = rendered(device_table([cpu]))
    assert "v100[lab]" in table and "Some CPU [tiny scale]" in table
    spec = parse_workload("train=userwl:build")
    command = replace(spec, options={"command": "python train.py --layers [wide] [/data]"})
    assert "python train.py --layers [wide] [/data]" in rendered(model_table([command], ["command"]))
    task = Task(cpu, (JobRef(spec, None),))
    failed = TaskOutcome(task, "failed", [], "[rank0]: RuntimeError: [/oops]")  # a bad closing tag raised
    assert "failed  v100[lab]: train: [rank0]: RuntimeError: [/oops]" in rendered(outcome_line(failed))


def _noisy_row(model: str) -> dict:
    return {"model": model, "throughput": 10.0, "step_time_median_s": 0.1, "step_time_iqr_s": 0.05}


def test_the_noisy_hint_fits_the_jobs_measured():
    reference = noisy_note(["cpu: LM (batch size 5)"])
    assert reference is not None and "--models NAME" in reference
    user = noisy_note(["cpu: mine"], user=["cpu: mine"])
    assert user is not None and "--models NAME" not in user
    assert "the same --workload/--command options" in user and "--workload NAME=package.module:factory" in user
    both = noisy_note(["cpu: LM (batch size 5)", "cpu: mine"], user=["cpu: mine"])
    assert both is not None and "--models NAME" in both and "--workload/--command jobs give their options" in both


def test_a_noisy_user_workload_gets_the_user_hint_after_a_run(monkeypatch, tmp_path):
    """--models cannot select a --workload/--command job: the hint after the run must not suggest it."""
    cpu = DeviceType("cpu", "cpu", (0,), "test cpu", core_ids=(0,))
    task = Task(cpu, (JobRef(parse_workload("mine=userwl:build"), None),))

    def run_plan(tasks, options, on_start, on_done):
        for t in tasks:
            on_start(t)
            on_done(TaskOutcome(t, "ok", [_noisy_row("mine")], seconds=1.0))

    monkeypatch.setattr(profiler_cli, "run_plan", run_plan)
    console = Console(file=io.StringIO(), width=400, highlight=False)
    profiler_cli._run(console, [task], RunOptions(out=tmp_path / "t[v2].csv"))
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert f"→ {tmp_path / 't[v2].csv'}" in output  # a path is shown as written too
    assert "1 measurement(s) spread more than 10 %" in output and "cpu: mine" in output
    assert "--models NAME" not in output and "the same --workload/--command options" in output
