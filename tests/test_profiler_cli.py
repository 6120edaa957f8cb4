"""`rota profile` through typer, registered on a local app as the main CLI does."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from planner.formats.table import read_table
from profiler.cli import profile_command

ROOT = Path(__file__).resolve().parents[1]
app = typer.Typer()
app.command("profile")(profile_command)


@app.command("other")
def _other() -> None:  # a second command keeps "profile" a subcommand, as in the real app
    pass


runner = CliRunner()


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
    )
    deadline = time.monotonic() + 90
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "--resume" in output and "Traceback" not in output
    assert 1 <= len(read_table(out)) < 5
