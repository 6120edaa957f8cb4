"""The Ray plan pins bundles to the planned nodes, carries the placement timeout and the gang
contract's variables; the driver names groups it cannot place (the run itself: tests/launchers)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from conftest import DATA, ROOT

from planner.errors import InputError
from planner.export import export_schedule, load_context
from planner.export.ray_driver import missing_resources
from planner.formats.cluster import read_cluster
from planner.formats.jobs import read_jobs
from planner.formats.schedule import write_schedule
from planner.formats.table import read_table
from planner.modes.next_round import make_policy_from
from planner.modes.plan import build_schedule
from planner.rounds.engine import EngineConfig, run_engine

INPUTS = {"table": DATA / "throughputs.csv", "jobs": DATA / "jobs.csv", "cluster": DATA / "cluster.yaml"}


@pytest.fixture(scope="module")
def schedule(tmp_path_factory):
    table = read_table(INPUTS["table"])
    cluster = read_cluster(INPUTS["cluster"])
    jobs = read_jobs(INPUTS["jobs"], table=table, cluster=cluster)
    result = run_engine(jobs, table, cluster, make_policy_from("max_min_fairness_perf", {}))
    doc = build_schedule(
        result, inputs=INPUTS, policy="max_min_fairness_perf", options={}, config=EngineConfig(), rounds=3
    )
    path = tmp_path_factory.mktemp("ray") / "schedule.json"
    write_schedule(doc, path)
    return path


def plan_of(schedule, tmp_path, **options) -> dict:
    export_schedule("ray", load_context(schedule), tmp_path, **options)
    return json.loads((tmp_path / "ray_plan.json").read_text())


def groups(plan: dict) -> list[dict]:
    return [g for r in plan["rounds"] for g in r["groups"]]


def test_bundles_are_pinned_to_the_planned_nodes_by_default(schedule, tmp_path):
    plan = plan_of(schedule, tmp_path)
    for g in groups(plan):
        assert len(g["bundles"]) == len(g["nodes"])
        for node, bundle in zip(g["nodes"], g["bundles"]):
            assert bundle[f"node:{node}"] > 0
            assert [k for k in bundle if k.startswith("node:")] == [f"node:{node}"]
    custom = plan_of(schedule, tmp_path / "custom", node_resource="host-")
    assert all(f"host-{n}" in b for g in groups(custom) for n, b in zip(g["nodes"], g["bundles"]))
    free = plan_of(schedule, tmp_path / "free", pin_nodes=False)
    assert not any(k.startswith("node:") for g in groups(free) for b in g["bundles"] for k in b)


def test_placement_timeout(schedule, tmp_path):
    assert plan_of(schedule, tmp_path)["placement_timeout_s"] == 120
    assert plan_of(schedule, tmp_path / "b", placement_timeout_s=7.5)["placement_timeout_s"] == 7.5
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(InputError, match="placement-timeout"):
            plan_of(schedule, tmp_path / "c", placement_timeout_s=bad)


def test_every_job_gets_the_gang_variables(schedule, tmp_path):
    plan = plan_of(schedule, tmp_path)
    sizes = set()
    for g in groups(plan):
        for job in g["jobs"]:
            port = 29500 + int.from_bytes(hashlib.sha256(job["job_id"].encode()).digest()[:4], "big") % 1000
            assert job["env"]["ROTA_MASTER_PORT"] == str(port)
            assert job["env"]["ROTA_NUM_NODES"] == str(len(g["nodes"]))
            sizes.add(len(g["nodes"]))
    assert sizes == {1, 2}, "one-node jobs and a two-node gang"


def test_driver_names_groups_the_cluster_cannot_hold():
    group = {
        "name": "rota-r0000-a",
        "worker_type": "t4",
        "nodes": ["t4-0", "t4-9"],
        "jobs": [{"job_id": "a"}],
        "bundles": [{"GPU": 2, "node:t4-0": 0.001}, {"GPU": 2, "node:t4-9": 0.001}],
    }
    totals = {"GPU": 8.0, "node:t4-0": 1.0}
    (problem,) = missing_resources([group], totals)
    assert problem.startswith("rota-r0000-a (jobs a; t4 on t4-0, t4-9)") and problem.endswith("no node:t4-9")
    assert missing_resources([group], {**totals, "node:t4-9": 1.0}) == []


def test_round_report_gives_each_job_its_state_from_every_node():
    from planner.export.ray_driver import round_report

    rnd = {
        "index": 4,
        "groups": [
            {"name": "g-pair", "bundles": [{}], "jobs": [{"job_id": "a"}, {"job_id": "b"}]},
            {"name": "g-gang", "bundles": [{}, {}], "jobs": [{"job_id": "c"}]},
            {"name": "g-late", "bundles": [{}], "jobs": [{"job_id": "d"}]},
        ],
    }
    # a exited 0, b was SIGKILLed at the round's end, c failed on its second node, d never ran
    codes = {"g-pair/0": [0, -9], "g-gang/0": [0], "g-gang/1": [1]}
    report = round_report(rnd, codes, started_at=100.0)
    assert report["index"] == 4 and report["started_at"] == 100.0 and report["error"] is None
    assert [(j["job_id"], j["group"], j["state"], j["exit_codes"]) for j in report["jobs"]] == [
        ("a", "g-pair", "COMPLETED", [0]),
        ("b", "g-pair", "KILLED", [-9]),
        ("c", "g-gang", "FAILED", [0, 1]),
        ("d", "g-late", "NOT_RUN", []),
    ]


def test_round_report_lost_cancelled_and_not_run_bundles():
    from planner.export.ray_driver import round_report

    rnd = {
        "index": 2,
        "groups": [
            {"name": "g-gang", "bundles": [{}, {}], "jobs": [{"job_id": "a"}]},
            {"name": "g-cut", "bundles": [{}], "jobs": [{"job_id": "b"}]},
            {"name": "g-big", "bundles": [{}], "jobs": [{"job_id": "c"}]},
        ],
    }
    # a: rank 0 ended when its gang's node 1 was lost; b cancelled; c not placed
    outcomes = {
        "g-gang/1": ("LOST", "node t4-1 died"),
        "g-cut/0": ("CANCELLED", "cancelled by the operator"),
        "g-big/0": ("NOT_RUN", "not placed within 3 s"),
    }
    report = round_report(rnd, {"g-gang/0": [-15]}, 1.0, outcomes=outcomes, gpus={"g-gang/0": "t4-0:1"})
    assert [(j["job_id"], j["state"], j["exit_codes"], j.get("detail")) for j in report["jobs"]] == [
        ("a", "LOST", [-15], "node t4-1 died"),
        ("b", "CANCELLED", [], "cancelled by the operator"),
        ("c", "NOT_RUN", [], "not placed within 3 s"),
    ]
    assert report["jobs"][0]["gpus"] == ["t4-0:1", None]


def test_the_ray_adapter_reads_node_states_and_round_reports(tmp_path):
    """Ray is not imported: node states come from ray.nodes() entries, results from the driver's report."""
    from planner.launch.adapter import JobState, NodeState
    from planner.launch.ray import node_states, round_result

    (tmp_path / "c.yaml").write_text(
        "worker_types:\n  t4: {gpus: 8, gpus_per_node: 2, nodes: [t4-0, t4-1, t4-2, t4-3]}\n"
    )
    cluster = read_cluster(tmp_path / "c.yaml")
    nodes = [
        {"NodeID": "n0", "Alive": True, "NodeName": "10.0.0.1", "Resources": {"node:t4-0": 1.0, "GPU": 2.0}},
        {"NodeID": "n1", "Alive": True, "NodeName": "10.0.0.2", "Resources": {"node:t4-1": 1.0, "CPU": 4.0}},
        {"NodeID": "n2", "Alive": False, "NodeName": "10.0.0.3", "Resources": {}},  # t4-2, seen before
    ]
    seen = {"t4-2": {"n2"}}
    state = node_states(nodes, cluster, "node:", seen)
    assert state.nodes["t4-0"] == NodeState("t4-0", usable=True, gpus=2)
    assert state.unusable() == {"t4-1": "advertises no GPUs", "t4-2": "lost", "t4-3": "unknown to the launcher"}
    assert seen["t4-0"] == {"n0"}
    # a dead node named like the spec's node is known without having been seen
    named = node_states([{"NodeID": "x", "Alive": False, "NodeName": "t4-3", "Resources": {}}], cluster, "node:")
    assert named.nodes["t4-3"].reason == "lost"

    report = {
        "index": 5,
        "started_at": 10.0,
        "ended_at": 40.0,
        "error": None,
        "jobs": [
            {"job_id": "a", "group": "g1", "state": "COMPLETED", "exit_codes": [0, 0], "gpus": ["t4-0:0", "t4-1:1"]},
            {"job_id": "b", "group": "g2", "state": "KILLED", "exit_codes": [-9]},
            {"job_id": "c", "group": "g3", "state": "LOST", "exit_codes": [], "detail": "node t4-2 died"},
            {"job_id": "d", "group": "g4", "state": "NOT_RUN", "exit_codes": [], "detail": "not placed within 3 s"},
        ],
    }
    result = round_result(report, None)
    assert (result.index, result.started_at, result.ended_at, result.error) == (5, 10.0, 40.0, None)
    assert {j: (r.state, r.exit_code) for j, r in result.jobs.items()} == {
        "a": (JobState.COMPLETED, 0),
        "b": (JobState.KILLED, -9),
        "c": (JobState.LOST, None),
        "d": (JobState.NOT_RUN, None),
    }
    assert result.jobs["a"].detail == "g1: GPUs t4-0:0,t4-1:1" and "node t4-2 died" in result.jobs["c"].detail
    # the adapter and the driver import ray only when they talk to it
    code = "import sys, planner.launch.ray, planner.export.ray_driver; print('ray' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stdout + done.stderr
