"""Paired outputs appear together or not at all: `rota plan --out --csv`, and plan-next's round
file, CSV and state. Every target is prepared before any is replaced, and the files carry ids
(the CSV's digest in the schedule; one plan id in the round file and the state) that let a
reader refuse a pair that does not belong together."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.formats.state import read_state
from planner.modes.next_round import replayed_round
from planner.modes.plan import CSV_DIGEST_KEY, check_csv_pair

runner = CliRunner()
INPUTS = ["-t", str(DATA / "throughputs.csv"), "-c", str(DATA / "cluster.yaml")]


def plan(tmp_path, *args):
    return runner.invoke(app, ["plan", *INPUTS, "-j", str(DATA / "jobs.csv"), *args])


def plan_next(*args):
    return runner.invoke(app, ["plan-next", *args])


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_plan_csv_that_cannot_be_written_writes_no_json(tmp_path):
    (tmp_path / "file").write_text("x")
    out, csv = tmp_path / "schedule.json", tmp_path / "file" / "schedule.csv"
    line = one_error_line(plan(tmp_path, "--rounds", "1", "--out", str(out), "--csv", str(csv)))
    assert str(csv) in line
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_plan_json_onto_a_folder_leaves_the_old_csv(tmp_path):
    (tmp_path / "schedule.json").mkdir()
    csv = tmp_path / "schedule.csv"
    csv.write_text("old")
    line = one_error_line(plan(tmp_path, "--rounds", "1", "--out", str(tmp_path / "schedule.json"), "--csv", str(csv)))
    assert "schedule.json" in line
    assert csv.read_text() == "old"


def test_the_schedule_records_its_csv_and_a_mismatch_is_refused(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, rounds in ((one, "1"), (two, "2")):
        result = plan(tmp_path, "--rounds", rounds, "--out", str(folder / "s.json"), "--csv", str(folder / "s.csv"))
        assert result.exit_code == 0, result.output
        check_csv_pair(folder / "s.json", folder / "s.csv")
    assert (
        json.loads((one / "s.json").read_text())[CSV_DIGEST_KEY]
        != json.loads((two / "s.json").read_text())[CSV_DIGEST_KEY]
    )
    # what a kill between the two renames would leave: a new CSV beside the old schedule
    (one / "s.csv").write_bytes((two / "s.csv").read_bytes())
    with pytest.raises(InputError, match="is not the CSV view of"):
        check_csv_pair(one / "s.json", one / "s.csv")
    plain = tmp_path / "plain.json"
    assert plan(tmp_path, "--rounds", "1", "--out", str(plain)).exit_code == 0
    assert CSV_DIGEST_KEY not in json.loads(plain.read_text())
    with pytest.raises(InputError, match="records no CSV view"):
        check_csv_pair(plain, one / "s.csv")


def test_plan_next_round_and_state_share_one_plan_id(tmp_path):
    state, out, csv = tmp_path / "state.json", tmp_path / "round.json", tmp_path / "round.csv"
    args = ["--state", str(state), "--out", str(out), "--csv", str(csv)]
    result = plan_next(*args, *INPUTS, "--jobs", str(DATA / "jobs.csv"))
    assert result.exit_code == 0, result.output
    saved, schedule = json.loads(state.read_text()), json.loads(out.read_text())
    assert saved["version"] == 1 and schedule["next_round"]["state_version"] == 1
    assert saved["last_plan"]["id"] == schedule["next_round"]["plan_id"]
    check_csv_pair(out, csv)
    document = read_state(state)
    assert replayed_round(document, state, 0, out, csv)["next_round"]["plan_id"] == saved["last_plan"]["id"]
    # another call's round file beside this state: the pair is refused
    other = tmp_path / "other"
    assert (
        plan_next(
            "--state",
            str(other / "s.json"),
            "--out",
            str(other / "r.json"),
            *INPUTS,
            "--jobs",
            str(DATA / "jobs.csv"),
            "--rounds",
            "2",
        ).exit_code
        == 0
    )
    with pytest.raises(InputError, match="the pair does not match"):
        replayed_round(document, state, 0, other / "r.json")


def test_plan_next_csv_that_cannot_be_written_keeps_the_state(tmp_path):
    state, out = tmp_path / "state.json", tmp_path / "round.json"
    first = plan_next("--state", str(state), "--out", str(out), *INPUTS, "--jobs", str(DATA / "jobs.csv"))
    assert first.exit_code == 0, first.output
    before_state, before_round = state.read_bytes(), out.read_bytes()
    (tmp_path / "file").write_text("x")
    line = one_error_line(
        plan_next("--state", str(state), "--out", str(out), "--csv", str(tmp_path / "file" / "r.csv"))
    )
    assert "r.csv" in line
    assert state.read_bytes() == before_state and out.read_bytes() == before_round
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
