"""Restart cost in every mode: next-round plans (plan-next, plan --state, rota run) keep
--restart-cost and --migration-aware in the state and tally restarts across calls exactly as
one batch plan does; compare and sweep take the options and show restarts and goodput; with
no cost known every plan says once how many restarts it assumed free."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from test_run_loop import _events, _loop
from test_state import canonical, faithful
from typer.testing import CliRunner

from planner.cli import app
from planner.formats.cluster import read_cluster
from planner.formats.jobs import read_jobs
from planner.formats.table import read_table
from planner.modes.compare import compare_policies
from planner.modes.next_round import make_policy_from, next_round
from planner.modes.plan import build_schedule
from planner.rounds.engine import Engine, EngineConfig
from planner.rounds.mechanism import Placement
from planner.rounds.restart import PlannedRestarts, charged_restarts, planned_restarts

LAB_TABLE = read_table(DATA / "gavel" / "simulation_throughputs.csv")
LAB = read_cluster(DATA / "examples" / "lab" / "cluster.yaml")  # restart_s: 120 on every type
LAB_JOBS = read_jobs(DATA / "examples" / "lab" / "jobs.csv", table=LAB_TABLE, cluster=LAB)
TABLE = read_table(DATA / "throughputs.csv")
CLUSTER = read_cluster(DATA / "cluster.yaml")
JOBS = read_jobs(DATA / "jobs.csv", table=TABLE, cluster=CLUSTER)
POLICY = "max_min_fairness_perf"


def _batch(k: int, *, cost: float | None, aware: bool, table=LAB_TABLE, cluster=LAB, jobs=LAB_JOBS):
    restart = charged_restarts(table, cluster, cost, aware, False)
    engine = Engine(
        table,
        cluster,
        make_policy_from(POLICY, {}),
        EngineConfig(max_rounds=k),
        jobs,
        restart=restart,
        migration_aware=aware,
    )
    result = engine.run()
    schedule = build_schedule(result, inputs={}, policy=POLICY, options={}, config=engine.config).to_json()
    return schedule["rounds"], engine.restart_tally


def _loop_of_calls(k: int, first: dict, table=LAB_TABLE, cluster=LAB, jobs=LAB_JOBS):
    """k next-round calls of one round each, every report faithful, through the state file."""
    state, progress, rounds, results = None, None, [], []
    done = {j.job_id: 0.0 for j in jobs}
    for call in range(k):
        step = next_round(
            table,
            cluster,
            state=state,
            jobs=jobs if state is None else None,
            policy=POLICY,
            progress=progress,
            **(first if call == 0 else {}),  # later calls give no option: the state's are kept
        )
        state = json.loads(json.dumps(step.state))
        results.append(step)
        if not step.schedule.rounds:
            break
        rounds += step.schedule.rounds
        progress = faithful(step.schedule.to_json(), done)
    return rounds, state, results


@pytest.mark.parametrize("aware", [False, True])
def test_next_round_calls_charge_and_count_restarts_like_one_batch_plan(aware):
    # The lab: 8-GPU nodes, 1-8-GPU jobs, 120 s per restart from the cluster's restart_s.
    k = 30
    batch_rounds, tally = _batch(k, cost=None, aware=aware)
    rounds, state, results = _loop_of_calls(k, {"migration_aware": aware})
    assert canonical([r.to_json() if hasattr(r, "to_json") else r for r in rounds]) == canonical(batch_rounds)
    books = state["restart"]
    assert books["migration_aware"] is aware and books["cost_s"] is None
    assert books["starts"] == tally.starts > 0
    assert books["lost_gpu_s"] == pytest.approx(tally.lost_gpu_s)
    assert all(r.restart_note is None for r in results), "a cost is known: no 'unknown' note"


def test_migration_aware_moves_jobs_less_in_the_round_loop_too():
    k = 30
    _, plain, _ = _loop_of_calls(k, {})
    _, aware, _ = _loop_of_calls(k, {"migration_aware": True})
    assert aware["restart"]["starts"] < plain["restart"]["starts"]


def test_the_state_keeps_the_options_and_notes_a_change():
    jobs = JOBS
    first = next_round(TABLE, CLUSTER, jobs=jobs, policy=POLICY, restart_cost_s=120.0, migration_aware=True)
    assert first.state["restart"]["cost_s"] == 120.0 and first.state["restart"]["migration_aware"] is True
    done = {j.job_id: 0.0 for j in jobs}
    second = next_round(TABLE, CLUSTER, state=first.state, progress=faithful(first.schedule.to_json(), done))
    assert second.state["restart"]["cost_s"] == 120.0 and second.state["restart"]["migration_aware"] is True
    assert second.state["restart"]["starts"] >= first.state["restart"]["starts"] > 0
    third = next_round(
        TABLE,
        CLUSTER,
        state=second.state,
        progress=faithful(second.schedule.to_json(), done),
        restart_cost_s=30.0,
        migration_aware=False,
    )
    assert "restart cost changed to 30 s" in third.notes
    assert "migration-aware rounds turned off" in third.notes
    assert third.state["restart"]["cost_s"] == 30.0 and third.state["restart"]["migration_aware"] is False


def test_with_no_cost_known_each_plan_says_how_many_restarts_it_assumed_free():
    step = next_round(TABLE, CLUSTER, jobs=JOBS, policy=POLICY)
    placed = sum(len(a["jobs"]) for a in step.schedule.to_json()["rounds"][0]["assignments"])
    assert step.restart_note is not None
    assert step.restart_note.startswith(f"restart cost unknown, assumed 0 s: {placed} (re)start(s) planned")
    assert "restart" not in step.state, "nothing to keep: the state's bytes stay as before"
    known = next_round(TABLE, CLUSTER, jobs=JOBS, policy=POLICY, restart_cost_s=0.0)
    assert known.restart_note is None and known.state["restart"]["cost_s"] == 0.0


def test_planned_restarts_counts_starts_and_moves_across_types():
    a = ("a",)
    v100 = Placement(a, "v100", (("n0", 0),))
    k80 = Placement(a, "k80", (("n1", 0),))
    b = Placement(("b",), "k80", (("n1", 1),))
    rounds = [[v100, b], [v100, b], [k80], [], [k80, b]]
    # a: starts in rounds 0, 2 (from v100 to k80: across), 4 (not held in round 3); b: rounds 0 and 4
    assert planned_restarts(rounds) == PlannedRestarts(starts=5, across_types=1)
    held = {"a": ("v100", frozenset({("n0", 0)}))}
    assert planned_restarts([[v100]], held) == PlannedRestarts(0, 0)
    assert planned_restarts([[k80]], held) == PlannedRestarts(1, 1)


def test_compare_takes_the_restart_options_and_shows_restarts_and_goodput():
    policies = ["max_min_fairness", "max_min_fairness_perf"]
    charged = compare_policies(TABLE, CLUSTER, JOBS, policies, restart_cost_s=120.0, migration_aware=True)
    assert charged.restart_note is None
    for o in charged.outcomes:
        assert o.restarts is not None and o.restarts > 0 and o.goodput is not None and 0 < o.goodput < 1
    free = compare_policies(TABLE, CLUSTER, JOBS, policies)
    assert free.restart_note is not None and free.restart_note.startswith("restart cost unknown, assumed 0 s")
    shown = next(o for o in free.outcomes if o.policy == free.recommended)
    assert f"{shown.restarts} (re)start(s) planned" in free.restart_note
    assert all(o.goodput == 1.0 for o in free.outcomes), "counted at 0 s: nothing lost"
    # Counting at 0 s changes no answer.
    plain = {o.policy: o.jct_mean_s for o in free.outcomes}
    assert plain == {
        o.policy: o.jct_mean_s for o in compare_policies(TABLE, CLUSTER, JOBS, policies, restart_cost_s=0.0).outcomes
    }
    assert free.to_json()["restart_note"] == free.restart_note


def test_compare_and_sweep_commands_print_the_columns(tmp_path):
    runner = CliRunner()
    inputs = ["--table", "data/throughputs.csv", "--cluster", "data/cluster.yaml"]
    res = runner.invoke(
        app,
        ["compare", *inputs, "--jobs", "data/jobs.csv", "--policies", "fifo,max_min_fairness_perf"]
        + ["--restart-cost", "120", "--migration-aware"],
    )
    assert res.exit_code == 0, res.output
    assert "starts" in res.output and "good" in res.output
    res = runner.invoke(
        app,
        ["sweep", *inputs, "--trace", "data/jobs.csv", "--policies", "max_min_fairness_perf", "--no-plots"]
        + ["--out", str(tmp_path / "sw"), "--restart-cost", "120", "--migration-aware", "--json"],
    )
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)["summary"][0]
    assert row["restarts"] > 0 and 0 < row["goodput"] < 1
    header = (tmp_path / "sw" / "summary.csv").read_text().splitlines()[0].split(",")
    assert {"restarts", "goodput"} <= set(header)
    setup = json.loads((tmp_path / "sw" / "sweep.json").read_text())["setup"]
    assert setup["restart_cost_s"] == 120.0 and setup["migration_aware"] is True
    res = runner.invoke(
        app,
        ["sweep", *inputs, "--trace", "data/jobs.csv", "--policies", "max_min_fairness_perf", "--no-plots"]
        + ["--out", str(tmp_path / "sw"), "--restart-cost", "60"],
    )
    assert res.exit_code == 2 and "restart_cost_s" in res.output, "another cost is another sweep"


def test_an_older_sweep_folder_without_the_restart_settings_resumes(tmp_path):
    runner = CliRunner()
    args = ["sweep", "--table", "data/throughputs.csv", "--cluster", "data/cluster.yaml", "--trace", "data/jobs.csv"]
    args += ["--policies", "fifo", "--no-plots", "--out", str(tmp_path / "sw"), "--json"]
    assert runner.invoke(app, args).exit_code == 0
    path = tmp_path / "sw" / "sweep.json"
    data = json.loads(path.read_text())
    for key in ("restart_cost_s", "migration_aware"):
        del data["setup"][key]  # as a sweep written before the options existed
    path.write_text(json.dumps(data))
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output


def test_plan_next_and_plan_state_take_the_options(tmp_path):
    runner = CliRunner()
    state = tmp_path / "state.json"
    first = ["plan-next", "--state", str(state), "--jobs", "data/jobs.csv", "--table", "data/throughputs.csv"]
    first += ["--cluster", "data/cluster.yaml", "--out", str(tmp_path / "r.json")]
    res = runner.invoke(app, [*first, "--restart-cost", "120", "--migration-aware", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["restarts"]["restart_cost_s"] == 120.0 and summary["restarts"]["migration_aware"] is True
    res = runner.invoke(app, ["plan", "--state", str(state), "--out", str(tmp_path / "r.json"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["restarts"]["restart_cost_s"] == 120.0, "kept in the state"
    res = runner.invoke(
        app, ["plan", "--state", str(state), "--out", str(tmp_path / "r.json"), "--restart-cost", "30", "--json"]
    )
    assert res.exit_code == 0, res.output
    assert "restart cost changed to 30 s" in json.loads(res.stdout)["notes"]
    assert json.loads(state.read_text())["restart"]["cost_s"] == 30.0


def test_rota_run_says_the_unknown_restart_cost_once_and_keeps_given_options(tmp_path):
    loop, _ = _loop(tmp_path, {})
    assert loop.run().status == 0
    notes = [e["text"] for e in _events(tmp_path) if e["event"] == "note" and "restart cost unknown" in e["text"]]
    assert len(notes) == 1, "once per run, not every round"
    other = tmp_path / "charged"
    other.mkdir()
    loop, _ = _loop(other, {})
    loop.config.restart_cost_s, loop.config.migration_aware = 60.0, True
    assert loop.run().status == 0
    books = json.loads((other / "state.json").read_text())["restart"]
    assert books["cost_s"] == 60.0 and books["migration_aware"] is True and books["starts"] > 0
    assert not any("restart cost unknown" in e.get("text", "") for e in _events(other))


def test_the_printed_legends_name_only_the_columns_shown(tmp_path):
    # With no restart cost known, compare counts starts but charges nothing: no goodput column,
    # so its legend must not explain one; plan-next prints no "restarts so far: 0" either.
    runner = CliRunner()
    inputs = ["--table", "data/throughputs.csv", "--cluster", "data/cluster.yaml", "--jobs", "data/jobs.csv"]
    policies = ["--policies", "fifo,max_min_fairness_perf"]
    free = runner.invoke(app, ["compare", *inputs, *policies])
    charged = runner.invoke(app, ["compare", *inputs, *policies, "--restart-cost", "60"])
    assert free.exit_code == 0 and charged.exit_code == 0, free.output + charged.output
    assert "starts:" in free.output and "good:" not in free.output
    assert "good: goodput" in charged.output
    state = tmp_path / "state.json"
    first = ["plan-next", "--state", str(state), *inputs, "--out", str(tmp_path / "r.json")]
    res = runner.invoke(app, first)
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["plan-next", "--state", str(state), "--out", str(tmp_path / "r1.json")])
    assert res.exit_code == 0 and "restarts so far" not in res.output, res.output
    res = runner.invoke(
        app, ["plan-next", "--state", str(state), "--out", str(tmp_path / "r2.json"), "--restart-cost", "60"]
    )
    assert res.exit_code == 0 and "restarts so far:" in res.output, res.output
