"""`rota profile --command`: a user's script, timed from its `ROTA_STEP <n>` lines.

The scripts are small torch-free Python files written into a temporary folder;
each step is a busy-wait of a known length, so a measurement takes a second or two.
"""

from __future__ import annotations

import math
import shlex
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from planner.errors import InputError
from planner.formats.table import read_table
from profiler.cli import profile_command
from profiler.command import command_argv, parse_command

app = typer.Typer()
app.command("profile")(profile_command)


@app.command("other")
def _other() -> None:  # keeps "profile" a subcommand, as in the real app
    pass


FAST = ["--device-types", "cpu", "--budget", "0.3", "--window-s", "0.05", "--warmup-steps", "2", "--pairs", "none"]

# {body} runs once per step i (1, 2, ...); spin(s) busy-waits s seconds
SCRIPT = """
import os, sys, time
def spin(s):
    end = time.perf_counter() + s
    while time.perf_counter() < end:
        pass
i = 0
while True:
    i += 1
    spin(0.002)
{body}
"""


def script(tmp_path: Path, name: str, body: str) -> str:
    """A command line running a script whose per-step body is `body`."""
    path = tmp_path / f"{name}.py"
    path.write_text(SCRIPT.format(body=textwrap.indent(textwrap.dedent(body), "    ")))
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def invoke(*args: str):
    return CliRunner().invoke(app, ["profile", *args])


def error_line(result) -> str:
    """Exit code 2 and one error line (after the progress bar's last state), no traceback."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.output
    assert "Traceback" not in result.output
    return errors[0]


# --------------------------------------------------------------------------- parsing


def test_parse_command_names_and_batch_size_placeholder():
    spec = parse_command("python train.py --batch-size {batch_size} --lr=0.1", (8,))
    assert spec.model == "train" and spec.batch_sizes == (8,) and spec.scale_factors == (1,)
    assert spec.description == "command python train.py --batch-size '{batch_size}' --lr=0.1"
    assert command_argv(spec, 8) == ["python", "train.py", "--batch-size", "8", "--lr=0.1"]
    assert parse_command("my-net=python a/b/run.py").model == "my-net"
    assert parse_command("./trainer --fast").model == "trainer"
    for bad in ("", "   ", "python 'unclosed", "bad!=python x.py"):
        with pytest.raises(InputError, match="--command"):
            parse_command(bad)


# --------------------------------------------------------------------------- runs


def test_a_command_is_profiled_with_startup_notes_and_resume(tmp_path):
    command = script(
        tmp_path,
        "train",
        """
        assert os.environ["ROTA_DEVICE"] == "cpu" and os.environ["ROTA_BATCH_SIZE"] == sys.argv[1]
        print(f"loss 0.5 at {i}")  # other output is ignored
        print(f"ROTA_STEP {i}", flush=True)
        """,
    )
    out = tmp_path / "t.csv"
    args = [*FAST, "--command", f"{command} {{batch_size}}", "--batch-sizes", "4", "--out", str(out)]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    (row,) = read_table(out).rows
    assert (row["model"], row["batch_size"], row["status"], row["source"]) == ("train", 4, "ok", "measured")
    assert row["notes"] is not None and row["notes"].startswith("command ") and "train.py" in row["notes"]
    # each step busy-waits 2 ms: at most 500 steps/s. Steps are timed when their lines are read, so a
    # loaded machine that delays a window's first line reads a little fast; counting every line as a step would be 2x.
    assert 0 < row["throughput"] <= 1.5 * 500 and row["samples_per_s"] == pytest.approx(4 * row["throughput"])
    assert row["n_steps"] is not None and row["n_steps"] >= 6
    assert row["startup_s"] is not None and 0 < row["startup_s"] < 300 and math.isfinite(row["startup_s"])
    assert row["checkpoint_save_s"] is None  # a script's state is not the profiler's to save
    again = invoke(*args, "--resume")
    assert again.exit_code == 0 and "1 skipped" in again.output, again.output


def test_a_script_reporting_every_few_steps_counts_the_steps_it_reports(tmp_path):
    command = script(tmp_path, "every5", 'if i % 5 == 0: print(f"ROTA_STEP {i}", flush=True)')
    out = tmp_path / "t.csv"
    result = invoke(*FAST, "--command", command, "--out", str(out))
    assert result.exit_code == 0, result.output
    (row,) = read_table(out).rows
    assert row["n_steps"] is not None and row["n_steps"] % 5 == 0
    assert row["step_time_median_s"] is not None and row["step_time_median_s"] >= 0.002 * 0.9  # per step, not per line


@pytest.mark.parametrize(
    "name,body,needle",
    [
        ("negative", 'print("ROTA_STEP -1", flush=True)', "negative: reported step -1 after step 0"),
        ("nan", 'print("ROTA_STEP nan", flush=True)', "nan: reported step 'nan'; expected a whole number"),
        ("fraction", 'print("ROTA_STEP 1.5", flush=True)', "reported step '1.5'; expected a whole number"),
        (
            "backwards",
            'print(f"ROTA_STEP {i if i < 4 else 2}", flush=True)',
            "backwards: reported step 2 after step 3; step counts must be positive and increase",
        ),
        ("repeats", 'print("ROTA_STEP 1", flush=True)', "reported step 1 after step 1"),
        (
            "crashes",
            'sys.exit("disk on fire") if i == 3 else print(f"ROTA_STEP {i}", flush=True)',
            "code 1: disk on fire",
        ),
        ("quits", 'sys.exit(0) if i == 2 else print(f"ROTA_STEP {i}", flush=True)', "quits: exited after 1 steps"),
    ],
)
def test_impossible_reports_and_bad_exits_are_errors_never_rows(tmp_path, name, body, needle):
    out = tmp_path / "t.csv"
    line = error_line(invoke(*FAST, "--command", script(tmp_path, name, body), "--out", str(out)))
    assert needle in line and "--command" in line
    assert not out.exists()


def test_a_script_that_never_reports_a_step_is_named_after_the_timeout(tmp_path):
    out = tmp_path / "t.csv"
    silent = script(tmp_path, "silent", "time.sleep(0.05)")
    line = error_line(invoke(*FAST, "--timeout", "3", "--command", silent, "--out", str(out)))
    assert "silent: reported no step within 3 s" in line and "ROTA_STEP <n>" in line
    assert not out.exists()


def test_a_script_that_runs_out_of_memory_is_an_oom_row(tmp_path):
    body = """
    if i == 3:
        sys.exit("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    print(f"ROTA_STEP {i}", flush=True)
    """
    out = tmp_path / "t.csv"
    result = invoke(*FAST, "--command", script(tmp_path, "greedy", body), "--out", str(out))
    assert result.exit_code == 0, result.output
    (row,) = read_table(out).rows
    assert (row["model"], row["status"], row["throughput"]) == ("greedy", "oom", 0.0)


def test_a_command_that_cannot_start_is_an_error(tmp_path):
    line = error_line(invoke(*FAST, "--command", "no-such-program-here --x", "--out", str(tmp_path / "t.csv")))
    assert "no-such-program-here: cannot start" in line


def test_commands_are_measured_alone(tmp_path):
    command = script(tmp_path, "solo", 'print(f"ROTA_STEP {i}", flush=True)')
    plan = invoke("--dry-run", "--device-types", "cpu", "--command", command, "--models", "A3C", "--pairs", "all")
    assert plan.exit_code == 0, plan.output
    assert "A3C + A3C" in plan.output and "solo +" not in plan.output and "+ solo" not in plan.output
    result = invoke("--dry-run", "--device-types", "cpu", "--command", command, "--pairs", "solo+solo")
    assert result.exit_code == 2 and "commands are measured alone" in result.output


def test_the_report_clock_times_bursty_reports_by_time_not_by_count():
    """Reports 1-3 arrive together at 10 s (warm-up), then bursts of 5 every 0.05 s: 100 steps/s."""
    from collections import deque
    from queue import Queue

    from profiler.command import ReportClock, _Reports

    lines: Queue = Queue()
    lines.put((10.0, "1"))
    lines.put((10.0, "2"))
    lines.put((10.0, "3"))
    for burst in range(1, 41):
        for k in range(5):
            lines.put((10.0 + 0.05 * burst, str(3 + 5 * (burst - 1) + k + 1)))
    lines.put((20.0, None))
    clock = ReportClock(_Reports("x", lines, deque()), launched_at=0.0, deadline=float("inf"), warmup=3, window_s=0.08)
    assert [clock.window(None, 1) for _ in range(3)] == [10.0, 0.0, 0.0]  # warm-up: one report each
    # however many steps measure() asks for, a window lasts window_s: it ends at the first report
    # 0.08 s on (the first of the second burst), and returns the time of the steps asked for at its rate
    assert clock.window(None, 1000) == pytest.approx(0.1 * 1000 / 6)
    # from then on a window runs from one burst's first report to the next-but-one's: 10 steps in 0.1 s
    assert clock.window(None, 1) == pytest.approx(0.1 / 10)
    assert clock.windows[-1] == (10, pytest.approx(0.1))
    assert sum(steps for steps, _ in clock.windows) == clock.last_n == 3 + 6 + 10
