"""The Ray plan pins bundles to the planned nodes, carries the placement timeout and the gang
contract's variables; the driver names groups it cannot place (the run itself: tests/launchers)."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import DATA

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
