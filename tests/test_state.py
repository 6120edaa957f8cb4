"""Next-round planning: state round trip, K single-round calls == one K-round plan,
reported progress (short, early finish, not finished, new, cancelled), bad files."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
import typer
from conftest import DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.cli import user_errors
from planner.cli.plan import plan_next_round_command
from planner.errors import InputError
from planner.formats.cluster import cluster_from_dict, read_cluster
from planner.formats.jobs import Job, read_jobs
from planner.formats.schedule_check import check_schedule
from planner.formats.state import StateDocument
from planner.formats.state import read_state as read_state_document
from planner.formats.table import JobType, ThroughputTable, read_table
from planner.modes.next_round import make_policy_from, next_round
from planner.modes.plan import build_schedule
from planner.modes.state import (
    STATE_FORMAT,
    JobProgress,
    Progress,
    decode,
    encode,
    engine_snapshot,
    read_progress,
    read_state,
    restore_engine,
    save_engine,
    state_document,
)
from planner.rounds.engine import Engine, EngineConfig

TABLE = read_table(DATA / "throughputs.csv")
CLUSTER = read_cluster(DATA / "cluster.yaml")
DEMO_JOBS = read_jobs(DATA / "jobs.csv", table=TABLE, cluster=CLUSTER)


def staggered(jobs):
    """Demo jobs, some arriving later (admissions between rounds)."""
    return [dataclasses.replace(j, arrival_s=[0.0, 0.0, 500.0, 2000.0][k % 4]) for k, j in enumerate(jobs)]


def full_plan(jobs, policy, table=TABLE, cluster=CLUSTER, config=None):
    engine = Engine(table, cluster, make_policy_from(policy, {}), config or EngineConfig(), jobs)
    result = engine.run()
    return build_schedule(result, inputs={}, policy=policy, options={}, config=engine.config).to_json()


def faithful(schedule, done):
    """What a launcher reports after running `schedule`'s rounds as planned."""
    reports = {}
    for r in schedule["rounds"]:
        for a in r["assignments"]:
            for jid, n in a["planned_steps"].items():
                done[jid] += n
                total = schedule["jobs"][jid]["total_steps"]
                reports[jid] = JobProgress(done[jid], done[jid] >= total - 1e-9)
    rnd = schedule["rounds"][-1]
    return Progress(time_s=rnd["end_s"], round=rnd["index"], jobs=reports)


def run_single_rounds(jobs, policy, k, table=TABLE, cluster=CLUSTER, config=None, per_call=1):
    state, progress, got = None, None, []
    done = {j.job_id: j.steps_done for j in jobs}
    for _ in range(k):
        step = next_round(
            table,
            cluster,
            state=state,
            jobs=jobs if state is None else None,
            policy=policy,
            progress=progress,
            rounds=per_call,
            config=config,
        )
        assert (
            check_schedule(
                step.schedule.to_json(), cluster, table=table, job_types={j.job_id: j.job_type for j in jobs}
            )
            == []
        )
        state = json.loads(json.dumps(step.state))  # through the file format
        if not step.schedule.rounds:
            break
        got += step.schedule.rounds
        progress = faithful(step.schedule.to_json(), done)
    return got, state


def canonical(rounds):
    return json.dumps(rounds, sort_keys=True)


# ----------------------------------------------------------------- state document


SMALL = cluster_from_dict(
    {
        "worker_types": {
            "a100": {"gpus": 2, "gpus_per_node": 2},
            "v100": {"gpus": 2, "gpus_per_node": 1},
            "t4": {"gpus": 2, "gpus_per_node": 2},
        }
    }
)


def crowded(jobs):
    """More single-GPU jobs than the small cluster has GPUs (gandiva pairs them at random)."""
    single = [j for j in staggered(jobs) if j.scale_factor == 1]
    return [dataclasses.replace(j, job_id=f"{j.job_id}-{k}") for k in range(2) for j in single]


def through_json(engine, policy, cluster=CLUSTER):
    """The engine as the state file has it: snapshot -> document -> JSON text -> a new engine."""
    document = state_document(engine.snapshot(), policy_name=policy, policy_options={})
    data = json.loads(json.dumps(document.to_json()))
    snapshot = engine_snapshot(StateDocument.from_json(data), table=TABLE, cluster=cluster)
    return Engine.from_snapshot(snapshot, TABLE, cluster, make_policy_from(policy, {}))


def without_timings(state):
    if state["last_solve"]:
        state["last_solve"].update(build_s=0.0, solve_s=0.0)
    return state


ROUND_TRIPS = [
    pytest.param("max_min_fairness_perf", CLUSTER, EngineConfig(), id="las"),
    # the engine's own random stream (visiting order shuffled every round)
    pytest.param("max_min_fairness", CLUSTER, EngineConfig(visit_order="shuffle", seed=3), id="las-shuffled"),
    pytest.param("fifo", CLUSTER, EngineConfig(), id="fifo-random-stream"),
    pytest.param("fifo", CLUSTER, EngineConfig(gavel_compat=True, min_resolve_interval_s=1920.0), id="fifo-gavel"),
    pytest.param("finish_time_fairness_perf", CLUSTER, EngineConfig(), id="ftf-history"),
    pytest.param("max_min_fairness_packed", CLUSTER, EngineConfig(), id="las-packed"),
    pytest.param("gandiva", SMALL, EngineConfig(), id="gandiva-partners"),
]


@pytest.mark.parametrize("policy,cluster,config", ROUND_TRIPS)
@pytest.mark.parametrize("stop", [1, 5])
def test_snapshot_through_json_continues_like_an_uninterrupted_run(policy, cluster, config, stop):
    jobs = crowded(DEMO_JOBS) if cluster is SMALL else staggered(DEMO_JOBS)
    k = 8
    uninterrupted = Engine(TABLE, cluster, make_policy_from(policy, {}), dataclasses.replace(config), jobs)
    expected = [uninterrupted.step() for _ in range(stop + k)][stop:]
    engine = Engine(TABLE, cluster, make_policy_from(policy, {}), dataclasses.replace(config), jobs)
    for _ in range(stop):
        engine.step()
    restored = through_json(engine, policy, cluster)
    assert [restored.step() for _ in range(k)] == expected
    assert restored.outcomes == uninterrupted.outcomes
    after = [without_timings(save_engine(e, policy_name=policy, policy_options={})) for e in (restored, uninterrupted)]
    assert after[0] == after[1]


def test_snapshot_is_a_copy():
    engine = Engine(TABLE, CLUSTER, make_policy_from("fifo", {}), EngineConfig(), DEMO_JOBS)
    engine.step()
    snapshot = engine.snapshot()
    before = json.dumps(state_document(snapshot, policy_name="fifo", policy_options={}).to_json())
    for _ in range(3):
        engine.step()
    assert json.dumps(state_document(snapshot, policy_name="fifo", policy_options={}).to_json()) == before


@pytest.mark.parametrize("policy", ["finish_time_fairness_perf", "fifo", "max_min_fairness_packed"])
def test_state_round_trips(policy):
    engine = Engine(TABLE, CLUSTER, make_policy_from(policy, {}), EngineConfig(), staggered(DEMO_JOBS))
    for _ in range(6):
        engine.step()
    saved = json.loads(json.dumps(save_engine(engine, policy_name=policy, policy_options={})))
    assert saved["format"] == STATE_FORMAT and saved["rounds_done"] == 6
    assert StateDocument.from_json(saved).to_json() == saved  # the document reads and writes every key
    restored = restore_engine(saved, table=TABLE, cluster=CLUSTER, policy=make_policy_from(policy, {}))
    again = json.loads(json.dumps(save_engine(restored.engine, policy_name=policy, policy_options={})))
    assert again == saved
    if policy != "max_min_fairness_packed":  # stateless
        assert saved["policy"]["memory"], "the policy's memory (history / random stream) is saved"


def test_policy_memory_keeps_the_state_file_layout():
    """Private entries (random streams, FIFO's books) under `attributes`, the rest under `state`,
    as state files have always had them."""
    memory = {}
    for policy, jobs, cluster in (
        ("fifo", DEMO_JOBS, CLUSTER),
        ("gandiva", crowded(DEMO_JOBS), SMALL),
        ("finish_time_fairness_perf", DEMO_JOBS, CLUSTER),
        ("max_min_fairness_perf", DEMO_JOBS, CLUSTER),
    ):
        engine = Engine(TABLE, cluster, make_policy_from(policy, {}), EngineConfig(), jobs)
        engine.step()
        memory[policy] = save_engine(engine, policy_name=policy, policy_options={})["policy"]["memory"]
    assert list(memory["fifo"]) == ["attributes"]
    assert list(memory["fifo"]["attributes"]) == ["_previous", "_gavel", "_rank", "_rng"]
    assert list(memory["fifo"]["attributes"]["_rng"]) == ["__random__"]
    assert list(memory["gandiva"]) == ["state", "attributes"] and list(memory["gandiva"]["attributes"]) == ["_rng"]
    assert memory["gandiva"]["state"]["partner"], "the crowded cluster pairs jobs"
    assert list(memory["finish_time_fairness_perf"]) == ["state"]
    assert memory["max_min_fairness_perf"] == {}


def test_state_document_errors_name_the_file_and_field(tmp_path):
    _, state = first_round()
    cases = [
        (lambda s: s["jobs"][0].update(total_steps="many"), r"row 1: field 'jobs.total_steps'"),
        (lambda s: s["jobs"][1].pop("model"), r"row 2: field 'jobs.model': is required"),
        (lambda s: s["jobs"][0].update(status="lost"), r"row 1: field 'jobs.status': expected one of pending, active"),
        (lambda s: s["engine"].update(shuffle=[1, 2]), r"field 'engine.shuffle'"),
        (lambda s: s["engine"]["active"].append("ghost"), r"field 'engine': job 'ghost' is listed"),
        (lambda s: s["mechanism"]["job_time"][0][1].append(0.0), r"field 'mechanism.job_time': entry \["),
        (lambda s: s["last_solve"].update(x="none"), r"field 'last_solve.x'"),
        (lambda s: s["policy"].pop("name"), r"field 'policy.name': is required"),
    ]
    for edit, message in cases:
        broken = json.loads(json.dumps(state))
        edit(broken)
        path = tmp_path / "s.json"
        path.write_text(json.dumps(broken))
        with pytest.raises(InputError, match=r"s\.json: " + message):
            read_state_document(path)


def test_tagged_values_round_trip():
    rng = random.Random(3)
    rng.random()
    value = {"a": (1, 2.5, None), ("x", "y"): np.arange(3.0), "__odd": [rng, {"k": True}]}
    back = decode(json.loads(json.dumps(encode(value))))
    assert back["a"] == (1, 2.5, None) and np.array_equal(back[("x", "y")], np.arange(3.0))
    assert back["__odd"][0].random() == rng.random()


# ----------------------------------------------------------------- equivalence


@pytest.mark.parametrize(
    "policy", ["max_min_fairness_perf", "fifo", "finish_time_fairness_perf", "max_min_fairness_packed", "gandiva"]
)
def test_k_single_round_calls_equal_one_k_round_plan(policy):
    jobs = staggered(DEMO_JOBS)
    if policy == "gandiva":
        jobs = [j for j in jobs if j.scale_factor == 1]
    plan = full_plan(jobs, policy)
    got, state = run_single_rounds(jobs, policy, len(plan["rounds"]) + 1)
    assert canonical(got) == canonical(plan["rounds"])
    assert all(j["status"] == "finished" for j in state["jobs"])


def test_equivalence_with_shuffled_visiting_order_and_multi_round_calls():
    config = EngineConfig(visit_order="shuffle", seed=7)
    plan = full_plan(DEMO_JOBS, "max_min_fairness", config=config)
    got, _ = run_single_rounds(DEMO_JOBS, "max_min_fairness", 40, config=config, per_call=3)
    assert canonical(got) == canonical(plan["rounds"][: len(got)]) and len(got) == len(plan["rounds"])


@st.composite
def scenarios(draw):
    types = {}
    for t in range(draw(st.integers(1, 3))):
        per_node = draw(st.sampled_from([1, 2, 4]))
        types[f"t{t}"] = {"gpus": per_node * draw(st.integers(1, 2)), "gpus_per_node": per_node}
    records = [
        {"worker_type": w, "model": f"m{k}", "scale_factor": s, "throughput": draw(st.floats(0.05, 5.0))}
        for k in range(2)
        for s in (1, 2)
        for w in types
    ]
    table = ThroughputTable.from_records(records)
    cluster = cluster_from_dict({"worker_types": types})
    jobs = []
    for i in range(draw(st.integers(1, 6))):
        jt = JobType(f"m{draw(st.integers(0, 1))}", None, draw(st.sampled_from([1, 2])))
        if any(cluster.capacity(w) >= jt.scale_factor for w in types):
            jobs.append(
                Job(
                    f"j{i}",
                    jt,
                    total_steps=draw(st.floats(1.0, 2000.0)),
                    arrival_s=draw(st.sampled_from([0.0, 0.0, 300.0, 1500.0])),
                )
            )
    return table, cluster, jobs


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(["max_min_fairness_perf", "fifo", "finish_time_fairness_perf"]))
def test_equivalence_property(scenario, policy):
    table, cluster, jobs = scenario
    if not jobs:
        return
    plan = full_plan(jobs, policy, table, cluster)
    got, _ = run_single_rounds(jobs, policy, len(plan["rounds"]) + 1, table, cluster)
    assert canonical(got) == canonical(plan["rounds"])


# ----------------------------------------------------------------- progress


def first_round(policy="max_min_fairness_perf", jobs=DEMO_JOBS):
    step = next_round(TABLE, CLUSTER, jobs=jobs, policy=policy)
    return step, json.loads(json.dumps(step.state))


def test_short_progress_leaves_more_steps():
    step, state = first_round()
    a = step.schedule.rounds[0]["assignments"][0]
    jid = a["jobs"][0]
    nxt = next_round(TABLE, CLUSTER, state=state, progress=Progress(jobs={jid: JobProgress(steps_done=5)}))
    assert nxt.schedule.jobs[jid]["steps_done_at_start"] == 5
    assert any("5 steps done" in n for n in nxt.notes)


def test_early_finish_removes_job_and_resolves():
    step, state = first_round()
    jid = step.schedule.rounds[0]["assignments"][0]["jobs"][0]
    nxt = next_round(TABLE, CLUSTER, state=state, progress=Progress(jobs={jid: JobProgress(finished=True)}))
    assert jid not in nxt.schedule.jobs
    assert all(jid not in a["jobs"] for r in nxt.schedule.rounds for a in r["assignments"])
    assert nxt.schedule.solver["resolves"][0]["n_jobs"] == len(DEMO_JOBS) - 1


def test_job_expected_to_finish_but_not_done_runs_again():
    short = [dataclasses.replace(DEMO_JOBS[0], total_steps=10.0), *DEMO_JOBS[1:]]
    step, state = first_round(jobs=short)
    assert step.schedule.jobs[short[0].job_id]["expected_finish_s"] is not None
    nxt = next_round(TABLE, CLUSTER, state=state, progress=Progress(jobs={short[0].job_id: JobProgress(steps_done=4)}))
    planned = {j: n for a in nxt.schedule.rounds[0]["assignments"] for j, n in a["planned_steps"].items()}
    assert short[0].job_id in nxt.schedule.jobs
    assert planned.get(short[0].job_id) in (None, 6)  # at most the 6 steps it has left


def test_new_and_cancelled_jobs():
    step, state = first_round()
    now = step.schedule.rounds[0]["end_s"]
    victim = DEMO_JOBS[1].job_id
    progress = Progress(
        new_jobs=[
            {"job_id": "late", "model": "ResNet-18", "batch_size": 64, "total_steps": 500, "command": "python late.py"}
        ],
        cancelled=[victim],
    )
    nxt = next_round(TABLE, CLUSTER, state=state, progress=progress)
    assert nxt.schedule.jobs["late"]["arrival_s"] == now  # cannot arrive in the past
    assert victim not in nxt.schedule.jobs
    statuses = {j["job_id"]: j["status"] for j in nxt.state["jobs"]}
    assert statuses[victim] == "cancelled"
    with pytest.raises(InputError, match="already known"):
        next_round(TABLE, CLUSTER, state=nxt.state, progress=Progress(new_jobs=progress.new_jobs))


def test_progress_errors_are_one_line():
    step, state = first_round()
    with pytest.raises(InputError, match="unknown job 'nope'"):
        next_round(TABLE, CLUSTER, state=state, progress=Progress(jobs={"nope": JobProgress(1)}))
    with pytest.raises(InputError, match="was this progress applied already"):
        next_round(TABLE, CLUSTER, state=state, progress=Progress(round=5))
    with pytest.raises(InputError, match="before the end of the last planned round"):
        next_round(TABLE, CLUSTER, state=state, progress=Progress(time_s=1.0))


def test_progress_files(tmp_path):
    (tmp_path / "p.csv").write_text("job_id,steps_done,finished\na,10,\nb,20,true\n")
    p = read_progress(tmp_path / "p.csv")
    assert p.jobs["a"].steps_done == 10 and not p.jobs["a"].finished and p.jobs["b"].finished
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "x.json").write_text('{"steps_done": 3}')
    assert read_progress(folder).jobs["x"].steps_done == 3
    (tmp_path / "bad.json").write_text('{"jobs": [{"job_id": "a", "steps": 1}]}')
    with pytest.raises(InputError, match="bad.json: row 1: field 'steps'"):
        read_progress(tmp_path / "bad.json")


def test_bad_state_files(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"format": "other"}')
    with pytest.raises(InputError, match="s.json: field 'format'"):
        read_state(path)
    _, state = first_round()
    del state["mechanism"]["deficit"]
    path.write_text(json.dumps(state))
    with pytest.raises(InputError, match="field 'mechanism.deficit'"):
        read_state(path)
    _, state = first_round()
    two = cluster_from_dict({"worker_types": {"a100": 4, "v100": 8}})
    with pytest.raises(InputError, match="worker types"):
        next_round(TABLE, two, state=state)


# ----------------------------------------------------------------- command


def _app():
    app = typer.Typer()
    app.command("plan-next")(user_errors(plan_next_round_command))

    @app.command("noop")
    def noop():  # a second command keeps typer's sub-command parsing
        pass

    return app


def test_plan_next_command_matches_plan(tmp_path):
    from planner.cli import app as main_app

    runner = CliRunner()
    inputs = ["--table", str(DATA / "throughputs.csv"), "--cluster", str(DATA / "cluster.yaml")]
    k = 4
    result = runner.invoke(
        main_app,
        ["plan", *inputs, "--jobs", str(DATA / "jobs.csv"), "--rounds", str(k), "--out", str(tmp_path / "plan.json")],
    )
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "plan.json").read_text())
    app, state, got = _app(), tmp_path / "state.json", []
    done = {j.job_id: j.steps_done for j in DEMO_JOBS}
    for call in range(k):
        args = ["plan-next", "--state", str(state), "--out", str(tmp_path / f"r{call}.json"), "--json"]
        if call == 0:
            args += [*inputs, "--jobs", str(DATA / "jobs.csv")]
        else:
            args += ["--progress", str(tmp_path / "progress.json")]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        summary = json.loads(result.output)
        assert summary["rounds"] == [call]
        schedule = json.loads((tmp_path / f"r{call}.json").read_text())
        got += schedule["rounds"]
        p = faithful(schedule, done)
        (tmp_path / "progress.json").write_text(
            json.dumps(
                {
                    "format": "rota.progress/v1",
                    "round": p.round,
                    "time_s": p.time_s,
                    "jobs": [
                        {"job_id": j, "steps_done": v.steps_done, "finished": v.finished} for j, v in p.jobs.items()
                    ],
                }
            )
        )
    assert canonical(got) == canonical(plan["rounds"])
    assert json.loads(state.read_text())["rounds_done"] == k
    # the same progress twice is refused
    args = [
        "plan-next",
        "--state",
        str(state),
        "--progress",
        str(tmp_path / "progress.json"),
        "--out",
        str(tmp_path / "x.json"),
    ]
    assert runner.invoke(app, args).exit_code == 0
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "applied already" in again.output


def test_plan_next_without_state_needs_inputs(tmp_path):
    result = CliRunner().invoke(_app(), ["plan-next", "--state", str(tmp_path / "none.json")])
    assert result.exit_code == 2 and "give --jobs, --table and --cluster" in result.output
