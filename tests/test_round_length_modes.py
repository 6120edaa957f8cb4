"""--round-length auto in plan, plan --state / plan-next, rota run and compare: the length is
chosen from the jobs and their restart costs (planner/modes/round_length.py), said once, and
a next-round state keeps the number chosen."""

from __future__ import annotations

import json

from conftest import DATA
from test_restart_modes import LAB, LAB_JOBS, LAB_TABLE
from test_run_loop import _events, _loop
from typer.testing import CliRunner

from planner.cli import app
from planner.modes.compare import compare_policies
from planner.modes.next_round import next_round
from planner.modes.round_length import choose_round_length
from planner.policies import PolicyOptions
from planner.rounds.engine import EngineConfig
from planner.rounds.restart import charged_restarts

LAB_ARGS = ["--table", "data/gavel/simulation_throughputs.csv", "--cluster", "data/examples/lab/cluster.yaml"]
POLICY = "max_min_fairness_perf"


def _expected() -> float:
    """What auto picks for the lab list from scratch (120 s restarts from the cluster spec)."""
    restart = charged_restarts(LAB_TABLE, LAB, None, False, False)
    return choose_round_length(
        LAB_JOBS, LAB_TABLE, LAB, POLICY, restart, policy_options=PolicyOptions(), engine=EngineConfig()
    ).round_s


def test_plan_auto_plans_at_the_chosen_length_and_counts_the_horizon_in_it(tmp_path):
    chosen = _expected()
    assert chosen > 360, "120 s restarts: longer rounds than the default pay on this list"
    res = CliRunner().invoke(
        app,
        ["plan", *LAB_ARGS, "--jobs", "data/examples/lab/jobs.csv", "--out", str(tmp_path / "s.json")]
        + ["--round-length", "auto", "--horizon", "12h", "--json"],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["round_length"]["round_s"] == chosen
    schedule = json.loads((tmp_path / "s.json").read_text())
    assert schedule["round_s"] == chosen and schedule["policy"]["options"]["round_length"] == "auto"
    assert summary["rounds_written"] == -(-12 * 3600 // int(chosen)), "the horizon in rounds of the chosen length"


def test_next_round_auto_is_chosen_once_and_kept_in_the_state():
    first = next_round(LAB_TABLE, LAB, jobs=LAB_JOBS, policy=POLICY, round_auto=True)
    chosen = _expected()
    assert first.state["mechanism"]["round_s"] == chosen
    assert any(note.startswith(f"round length auto: {chosen:g} s") for note in first.notes)
    assert first.schedule.to_json()["round_s"] == chosen
    second = next_round(LAB_TABLE, LAB, state=first.state)
    assert second.state["mechanism"]["round_s"] == chosen
    assert not any("round length auto" in note for note in second.notes)


def test_auto_without_a_restart_cost_keeps_the_default_and_says_why():
    table_path, cluster_path = DATA / "throughputs.csv", DATA / "cluster.yaml"
    from planner.formats.cluster import read_cluster
    from planner.formats.jobs import read_jobs
    from planner.formats.table import read_table

    table, cluster = read_table(table_path), read_cluster(cluster_path)
    jobs = read_jobs(DATA / "jobs.csv", table=table, cluster=cluster)
    step = next_round(table, cluster, jobs=jobs, round_auto=True)
    assert step.state["mechanism"]["round_s"] == 360.0
    assert "round length auto: 360 s (no restart cost known)" in step.notes


def test_plan_next_command_takes_auto_and_refuses_other_words(tmp_path):
    runner = CliRunner()
    state = tmp_path / "state.json"
    args = ["plan-next", "--state", str(state), "--jobs", "data/examples/lab/jobs.csv", *LAB_ARGS]
    args += ["--out", str(tmp_path / "r.json")]
    res = runner.invoke(app, [*args, "--round-length", "fast"])
    assert res.exit_code == 2 and "--round-length" in res.output and "'auto'" in res.output
    assert not state.exists()
    res = runner.invoke(app, [*args, "--round-length", "auto", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(state.read_text())["mechanism"]["round_s"] == _expected()


def test_compare_auto_runs_each_policy_at_its_chosen_length():
    policies = ["max_min_fairness_perf", "fifo_perf"]
    auto = compare_policies(LAB_TABLE, LAB, LAB_JOBS, policies, round_auto=True)
    fixed = compare_policies(LAB_TABLE, LAB, LAB_JOBS, policies)
    assert [o.round_s for o in fixed.outcomes] == [360.0, 360.0]
    lab_aware = next(o for o in auto.outcomes if o.policy == "max_min_fairness_perf")
    assert lab_aware.round_s == _expected()
    assert lab_aware.goodput > next(o for o in fixed.outcomes if o.policy == "max_min_fairness_perf").goodput


def test_rota_run_chooses_at_its_first_round_only(tmp_path):
    loop, _ = _loop(tmp_path, {})
    loop.config.round_s, loop.config.round_auto, loop.config.restart_cost_s = None, True, 120.0
    assert loop.run().status == 0
    notes = [e["text"] for e in _events(tmp_path) if e["event"] == "note" and "round length auto" in e["text"]]
    assert len(notes) == 1, notes
    chosen = float(notes[0].split(": ")[1].split(" s")[0])
    assert json.loads((tmp_path / "state.json").read_text())["mechanism"]["round_s"] == chosen
