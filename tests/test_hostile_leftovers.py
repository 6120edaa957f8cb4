"""Two shapes of the hostile-input classes that the input layer does not see: a timing option
that is not a finite number of seconds (it crashed the profiler's estimate), and a first
plan-next call that cannot start (it left a lock file beside a state that does not exist)."""

from __future__ import annotations

import pytest
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
