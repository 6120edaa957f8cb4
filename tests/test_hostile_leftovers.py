"""Two shapes of the hostile-input classes that the input layer does not see: a timing option
that is not a finite number of seconds (it crashed the profiler's estimate), and a first
plan-next call that cannot start (it left a lock file beside a state that does not exist)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-1", "0", "1e9"])
def test_profile_timing_options_must_be_finite_seconds(tmp_path, value):
    pytest.importorskip("torch", reason="rota profile needs the profiler extra")
    args = ["profile", "--dry-run", "--device-types", "cpu", "--scale", "tiny", "--models", "LM"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "t.csv"), "--budget", value])
    assert result.exit_code == 2, result.output
    assert "--budget" in result.output and "Traceback" not in result.output


def test_a_first_plan_next_that_cannot_start_leaves_no_lock_file(tmp_path):
    state = tmp_path / "state.json"
    result = CliRunner().invoke(app, ["plan-next", "--state", str(state), "--out", str(tmp_path / "r.json")])
    assert result.exit_code == 2 and "no state yet" in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_resumed_by_a_new_process_updates_its_own_sweep_json(tmp_path):
    """sweep.json is read (the setup must match) and rewritten by the next run: updated in place,
    not refused as an output that would overwrite an input."""
    table = DATA / "gavel" / "simulation_throughputs.json"
    base = [sys.executable, "-m", "planner.cli", "sweep", "-t", str(table), "-c", "v100=4,k80=4", "--rates", "0.05"]
    base += ["--window", "5:8", "--out", str(tmp_path / "out"), "--no-plots"]
    for policies in ("fifo_perf", "fifo_perf", "fifo_perf,isolated"):
        done = subprocess.run([*base, "-p", policies], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["status"] == "complete"
