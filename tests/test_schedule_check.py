"""The schedule validator: schedules the writers produce pass, and each rule catches
its own deliberately broken schedule."""

from __future__ import annotations

import copy
import json

import pytest
import typer
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import user_errors
from planner.cli.schedule import schedule_validate_command
from planner.formats.cluster import cluster_from_dict, read_cluster
from planner.formats.jobs import read_jobs
from planner.formats.schedule_check import KINDS, check_schedule
from planner.formats.table import JobType, ThroughputTable, read_table
from planner.modes.next_round import make_policy_from, next_round
from planner.modes.plan import build_schedule
from planner.rounds.engine import EngineConfig, run_engine

# fast: 2 nodes x 2 GPUs, slow: 1 node x 2 GPUs; 'b' cannot run on slow; a+b co-locate on fast only.
CLUSTER = cluster_from_dict({"worker_types": {"fast": {"gpus": 4, "gpus_per_node": 2}, "slow": 2}})
TABLE = ThroughputTable.from_records(
    [
        {"worker_type": "fast", "model": "a", "scale_factor": 1, "throughput": 2.0},
        {"worker_type": "slow", "model": "a", "scale_factor": 1, "throughput": 1.0},
        {"worker_type": "fast", "model": "b", "scale_factor": 1, "throughput": 2.0},
        {"worker_type": "slow", "model": "b", "scale_factor": 1, "throughput": 0.0, "status": "oom"},
        {"worker_type": "fast", "model": "g", "scale_factor": 2, "throughput": 3.0},
        {"worker_type": "slow", "model": "g", "scale_factor": 2, "throughput": 1.5},
        {"worker_type": "fast", "model": "a", "scale_factor": 1, "partner_model": "b", "throughput": 1.5},
        {"worker_type": "fast", "model": "b", "scale_factor": 1, "partner_model": "a", "throughput": 1.2},
    ]
)
TYPES = {"a1": JobType("a", None), "a2": JobType("a", None), "b1": JobType("b", None), "g1": JobType("g", None, 2)}


def gpus(*slots):
    return [{"node": n, "gpu": g} for n, g in slots]


def assignment(jobs, w, slots, steps):
    nodes = list(dict.fromkeys(n for n, _ in slots))
    return {
        "jobs": jobs,
        "worker_type": w,
        "node": "+".join(nodes),
        "gpus": gpus(*slots),
        "planned_steps": dict(zip(jobs, steps)),
    }


def good() -> dict:
    return {
        "format": "rota.schedule/v1",
        "round_s": 100.0,
        "jobs": {
            "a1": {"arrival_s": 0.0, "total_steps": 500, "steps_done_at_start": 0, "scale_factor": 1},
            "a2": {"arrival_s": 0.0, "total_steps": 100.5, "steps_done_at_start": 85, "scale_factor": 1},
            "b1": {"arrival_s": 0.0, "total_steps": 500, "steps_done_at_start": 0, "scale_factor": 1},
            "g1": {"arrival_s": 50.0, "total_steps": 900, "steps_done_at_start": 0, "scale_factor": 2},
        },
        "rounds": [
            {
                "index": 4,
                "start_s": 0.0,
                "end_s": 100.0,
                "assignments": [
                    assignment(["a1"], "fast", [("fast-0", 0)], [200]),
                    assignment(["a2", "b1"], "fast", [("fast-0", 1)], [10, 120]),
                    assignment(["g1"], "slow", [("slow-0", 0), ("slow-0", 1)], [150]) | {},
                ],
            },
            {
                "index": 5,
                "start_s": 100.0,
                "end_s": 200.0,
                "assignments": [
                    assignment(["a1"], "slow", [("slow-0", 1)], [100]),
                    assignment(["g1"], "fast", [("fast-0", 1), ("fast-1", 0)], [300]),
                    assignment(["b1"], "fast", [("fast-1", 1)], [200]),
                ],
            },
        ],
    }


def kinds(schedule) -> set[str]:
    return {v.kind for v in check_schedule(schedule, CLUSTER, table=TABLE, job_types=TYPES)}


def test_good_schedule_has_no_violations():
    s = good()
    s["rounds"][0]["assignments"][2]["planned_steps"] = {"g1": 150}
    s["jobs"]["g1"]["arrival_s"] = 0.0
    assert check_schedule(s, CLUSTER, table=TABLE, job_types=TYPES) == []


def _ok():
    s = good()
    s["jobs"]["g1"]["arrival_s"] = 0.0
    return s


def _set(path, value):
    def mutate(s):
        target = s
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _put(r, k, jobs, w, slots, steps):
    def mutate(s):
        s["rounds"][r]["assignments"][k] = assignment(jobs, w, slots, steps)

    return mutate


BROKEN = {
    "double_booked": _put(1, 2, ["b1"], "fast", [("fast-1", 0)], [200]),
    "unknown_gpu": _put(0, 0, ["a1"], "fast", [("fast-0", 7)], [200]),
    "job_twice": _put(1, 2, ["a1"], "fast", [("fast-1", 1)], [100]),
    "unknown_job": _put(0, 0, ["ghost"], "fast", [("fast-0", 0)], [200]),
    "arrival": _set(["jobs", "g1", "arrival_s"], 50.0),
    "gang_size": _put(1, 1, ["g1"], "fast", [("fast-0", 1)], [300]),
    "gang_type": _put(1, 1, ["g1"], "fast", [("fast-0", 1), ("slow-0", 0)], [300]),
    "pair": _put(1, 0, ["a1", "a2"], "slow", [("slow-0", 1)], [100, 5]),  # no a+a pair row
    "throughput": _put(1, 0, ["b1"], "slow", [("slow-0", 1)], [100]),  # b is oom on slow
    "steps": _set(["rounds", 0, "assignments", 1, "planned_steps"], {"a2": 17, "b1": 120}),  # 15.5 left
    "rounds": _set(["rounds", 1, "index"], 7),
    "structure": _set(["rounds", 0, "assignments", 0, "planned_steps"], {}),
    "topology": _set(["rounds", 1, "assignments", 1, "switch"], "sw1"),  # fast's nodes declare no switch
    "unplaced": _set(["rounds", 1, "unplaced"], [{"jobs": ["a1"], "worker_type": "fast", "gpus": 1, "reason": "r"}]),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_each_rule_catches_its_violation(kind):
    s = copy.deepcopy(_ok())
    BROKEN[kind](s)
    found = kinds(s)
    assert kind in found, found
    if kind != "throughput":  # moving b1 to slow also leaves it in two assignments
        assert found == {kind}, found


def test_every_rule_has_a_broken_case():
    assert set(BROKEN) == set(KINDS)


def test_more_violations():
    s = copy.deepcopy(_ok())
    s["rounds"][1]["start_s"] = 50.0  # overlaps round 4
    s["rounds"][0]["assignments"][0]["planned_steps"] = {"a1": 0}
    s["rounds"][0]["assignments"].append(assignment(["a2", "b1", "a1"], "fast", [("fast-1", 1)], [1, 1, 1]))
    s["rounds"][0]["assignments"][0]["worker_type"] = "tpu"
    messages = [str(v) for v in check_schedule(s, CLUSTER, table=TABLE, job_types=TYPES)]
    text = "\n".join(messages)
    assert "before round 4 ends" in text
    assert "planned steps 0 must be a positive number" in text
    assert "at most two can be co-located" in text
    assert "worker type 'tpu' is not in the cluster" in text
    assert all(m.startswith("round ") for m in messages)


def test_wrong_format_and_missing_fields():
    assert kinds({"format": "x", "rounds": []}) == {"structure"}
    s = _ok()
    del s["rounds"][0]["end_s"]
    assert "structure" in kinds(s)


# ----------------------------------------------------------------- the writers' schedules pass

DEMO_TABLE = read_table(DATA / "throughputs.csv")
DEMO_CLUSTER = read_cluster(DATA / "cluster.yaml")
DEMO_JOBS = read_jobs(DATA / "jobs.csv", table=DEMO_TABLE, cluster=DEMO_CLUSTER)
DEMO_TYPES = {j.job_id: j.job_type for j in DEMO_JOBS}


@pytest.mark.parametrize(
    "policy",
    [
        "max_min_fairness_perf",
        "max_min_fairness_packed",
        "fifo",
        "finish_time_fairness_perf",
        "min_total_duration_perf",
    ],
)
def test_plan_schedules_are_valid(policy):
    result = run_engine(DEMO_JOBS, DEMO_TABLE, DEMO_CLUSTER, make_policy_from(policy, {}))
    schedule = json.loads(
        json.dumps(build_schedule(result, inputs={}, policy=policy, options={}, config=EngineConfig()).to_json())
    )
    assert check_schedule(schedule, DEMO_CLUSTER, table=DEMO_TABLE, job_types=DEMO_TYPES) == []
    # and a next-round schedule starting mid-way
    step = next_round(DEMO_TABLE, DEMO_CLUSTER, jobs=DEMO_JOBS, policy=policy, rounds=3)
    step = next_round(DEMO_TABLE, DEMO_CLUSTER, state=step.state, rounds=3)
    assert step.schedule.rounds[0]["index"] == 3
    assert check_schedule(step.schedule.to_json(), DEMO_CLUSTER, table=DEMO_TABLE, job_types=DEMO_TYPES) == []


# ----------------------------------------------------------------- command


def _app():
    app = typer.Typer()
    app.command("validate")(user_errors(schedule_validate_command))

    @app.command("noop")
    def noop():
        pass

    return app


def test_validate_command(tmp_path):
    from planner.cli import app as main_app

    runner = CliRunner()
    path = tmp_path / "s.json"
    result = runner.invoke(
        main_app,
        [
            "plan",
            "--table",
            str(DATA / "throughputs.csv"),
            "--jobs",
            str(DATA / "jobs.csv"),
            "--cluster",
            str(DATA / "cluster.yaml"),
            "--policy",
            "max_min_fairness_packed",
            "--out",
            str(path),
        ],
    )
    assert result.exit_code == 0, result.output
    ok = runner.invoke(_app(), ["validate", str(path)])
    assert ok.exit_code == 0 and "ok" in ok.output, ok.output
    schedule = json.loads(path.read_text())
    first = schedule["rounds"][0]["assignments"]
    first[1]["gpus"] = first[0]["gpus"][: len(first[1]["gpus"])]  # double-book
    schedule["rounds"][2]["index"] = 9
    path.write_text(json.dumps(schedule))
    bad = runner.invoke(_app(), ["validate", str(path), "--json"])
    assert bad.exit_code == 1
    report = json.loads(bad.output)
    assert not report["valid"] and {"double_booked", "rounds"} <= {v["kind"] for v in report["violations"]}
    text = runner.invoke(_app(), ["validate", str(path)])
    assert text.exit_code == 1 and "double_booked" in text.output
    missing = runner.invoke(_app(), ["validate", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "nope.json: file not found" in missing.output
