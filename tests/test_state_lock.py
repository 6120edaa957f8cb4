"""Two `rota plan-next` calls on one state file, as real processes: the state is locked
across read-plan-write, so neither update is lost; a call that cannot get the lock in
--lock-timeout seconds fails with one line naming the state; and a call asked to plan
from a state version that was already consumed returns that round instead of planning
another (a launcher's retry). A first process pauses mid-write (holding the lock) through
the test hook; nothing here depends on timing."""

from __future__ import annotations

import json
import os
import signal

import pytest
from conftest import DATA
from paused_process import PAUSED, Running, debris, rota
from typer.testing import CliRunner

from planner.cli import app

INPUTS = ["-t", str(DATA / "throughputs.csv"), "-c", str(DATA / "cluster.yaml")]
WAITING = "waiting for "


@pytest.fixture
def started(tmp_path):
    """A state after one call (version 1, round 0 planned)."""
    state = tmp_path / "state.json"
    result = CliRunner().invoke(
        app,
        ["plan-next", "--state", str(state), "--out", str(tmp_path / "r0.json"), *INPUTS, "-j", str(DATA / "jobs.csv")],
    )
    assert result.exit_code == 0, result.output
    return state


def saved(state):
    data = json.loads(state.read_text())
    return data["version"], data["rounds_done"]


def test_two_concurrent_calls_both_count(tmp_path, started):
    go = tmp_path / "go"
    first = Running(rota("plan-next", "--state", str(started), "--out", str(tmp_path / "a.json")), tmp_path, go)
    first.wait_for_line(PAUSED)  # it holds the lock, its state not yet written
    second = Running(rota("plan-next", "--state", str(started), "--out", str(tmp_path / "b.json")), tmp_path)
    assert str(started) + ".lock" in second.wait_for_line(WAITING)
    go.touch()
    for call in (first, second):
        code, _, err = call.finish()
        assert code == 0, err
    assert saved(started) == (3, 3)
    rounds = {name: json.loads((tmp_path / name).read_text())["rounds"][0]["index"] for name in ("a.json", "b.json")}
    assert rounds == {"a.json": 1, "b.json": 2}


def test_a_call_that_cannot_get_the_lock_fails_naming_the_state(tmp_path, started):
    before = started.read_bytes()
    first = Running(
        rota("plan-next", "--state", str(started), "--out", str(tmp_path / "a.json")), tmp_path, tmp_path / "go"
    )
    first.wait_for_line(PAUSED)
    second = Running(
        rota("plan-next", "--state", str(started), "--out", str(tmp_path / "b.json"), "--lock-timeout", "0.5"), tmp_path
    )
    code, _, err = second.finish()
    assert code == 2, err
    error = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and str(started) in error[0] and "--lock-timeout" in error[0], err
    assert not (tmp_path / "b.json").exists()
    os.kill(first.proc.pid, signal.SIGTERM)  # the holder dies: no debris, the old state
    code, _, err = first.finish()
    assert code == -signal.SIGTERM, err
    assert started.read_bytes() == before and debris(tmp_path) == []
    # the kernel released its lock: the next call goes through at once
    result = CliRunner().invoke(
        app, ["plan-next", "--state", str(started), "--out", str(tmp_path / "c.json"), "--lock-timeout", "0"]
    )
    assert result.exit_code == 0, result.output


def test_concurrent_retries_of_one_version_plan_one_round(tmp_path, started):
    go, out = tmp_path / "go", tmp_path / "round.json"
    args = ("plan-next", "--state", str(started), "--out", str(out), "--state-version", "1")
    first = Running(rota(*args), tmp_path, go)
    first.wait_for_line(PAUSED)
    second = Running(rota(*args, "--json"), tmp_path)
    second.wait_for_line(WAITING)
    go.touch()
    code, _, err = first.finish()
    assert code == 0, err
    code, stdout, err = second.finish()
    assert code == 0, err
    assert saved(started) == (2, 2)  # one round planned, not two
    summary = json.loads(stdout)
    assert summary["rounds"] == [1] and summary["state_version"] == 2
    assert "planned already" in summary["notes"][0]


def test_state_version_retry_returns_the_same_round(tmp_path, started):
    runner = CliRunner()
    out = tmp_path / "round.json"
    args = ["plan-next", "--state", str(started), "--out", str(out), "--state-version", "1"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    planned, state_after = out.read_bytes(), started.read_bytes()
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "state version 1 was planned already (round 1" in again.output
    assert out.read_bytes() == planned and started.read_bytes() == state_after
    # a version the state has not reached, or one two calls back: refused
    for asked in ("5", "0"):
        refused = runner.invoke(app, [*args[:-1], asked])
        assert refused.exit_code == 2 and "field 'version'" in refused.output, refused.output
    # the round file was replaced by something else: the pair is refused, not returned
    out.write_text(json.dumps({**json.loads(planned), "next_round": {"plan_id": "other"}}))
    mismatch = runner.invoke(app, args)
    assert mismatch.exit_code == 2 and "the pair does not match" in mismatch.output, mismatch.output
    out.unlink()
    gone = runner.invoke(app, args)
    assert gone.exit_code == 2 and "is gone" in gone.output, gone.output
    assert started.read_bytes() == state_after


def test_state_version_zero_starts_a_plan(tmp_path):
    state = tmp_path / "state.json"
    args = [
        "plan-next",
        "--state",
        str(state),
        "--out",
        str(tmp_path / "r.json"),
        *INPUTS,
        "-j",
        str(DATA / "jobs.csv"),
    ]
    assert CliRunner().invoke(app, [*args, "--state-version", "0"]).exit_code == 0
    assert saved(state) == (1, 1)
