"""Topology domains: the cluster spec's node entries {name, switch, nvlink_domain} (one-line errors
for malformed ones), the schedule's `switch` / `nvlink_domain` / `unplaced` fields as `rota plan`
writes and the validator checks them, and what the exports make of them (Slurm --switches=1,
Volcano networkTopology, Kueue topology annotations, Ray STRICT_PACK)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from test_kube_export import strict_problems
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.export import export_schedule, load_context
from planner.export.kubernetes import KUEUE_PODSET_GROUP, KUEUE_REQUIRED_TOPOLOGY, check_manifest
from planner.formats.cluster import NodeDomains, cluster_from_dict, read_cluster
from planner.formats.schedule import Schedule
from planner.formats.schedule_check import check_schedule

ROOT = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------- the cluster spec


def test_nodes_may_name_their_switch_and_nvlink_domain():
    spec = {"gpus": 24, "gpus_per_node": 8}
    spec["nodes"] = [{"name": "a100-0", "switch": "sw1", "nvlink_domain": "nvl0"}, {"name": "a100-1", "switch": 1}]
    spec["nodes"] += ["a100-2"]
    a100 = cluster_from_dict({"worker_types": {"a100": spec}}).worker_types["a100"]
    assert a100.nodes == ("a100-0", "a100-1", "a100-2")  # still the names
    assert a100.domains == {"a100-0": NodeDomains("sw1", "nvl0"), "a100-1": NodeDomains("1", None)}
    assert a100.has_switches
    assert a100.shared_domains(["a100-0"]) == {"switch": "sw1", "nvlink_domain": "nvl0"}
    assert a100.shared_domains(["a100-0", "a100-1"]) == {}  # sw1 and 1 differ
    assert a100.shared_domains(["a100-1", "a100-2"]) == {}  # a100-2 declares none
    plain = cluster_from_dict({"worker_types": {"v100": 8}}).worker_types["v100"]
    assert plain.domains == {} and not plain.has_switches


def test_the_lab_topology_example_reads():
    cluster = read_cluster(ROOT / "data/examples/lab_topology.yaml")
    v100 = cluster.worker_types["v100"]
    assert v100.shared_domains(["v100-0", "v100-1"]) == {"switch": "leaf-a", "nvlink_domain": "nvl-a"}
    assert "p100-3" in cluster.worker_types["p100"].nodes and "p100-3" not in cluster.worker_types["p100"].domains


@pytest.mark.parametrize(
    ("entry", "field", "message"),
    [
        ({"name": "n0", "rack": "r1"}, "worker_types.a100.nodes[0].rack", "unknown key (expected name, nvlink_domain"),
        ({"switch": "sw1"}, "worker_types.a100.nodes[0].name", "is required"),
        ({"name": "n0", "switch": True}, "worker_types.a100.nodes[0].switch", "expected a name, got True"),
        ({"name": "n0", "switch": ["a"]}, "worker_types.a100.nodes[0].switch", "expected a name"),
        ({"name": "n0", "nvlink_domain": {"x": 1}}, "worker_types.a100.nodes[0].nvlink_domain", "expected a name"),
        ({"name": "n0", "switch": ""}, "worker_types.a100.nodes[0].switch", "is not a valid name"),
        ({"name": "n\n0"}, "worker_types.a100.nodes[0].name", "is not a valid name"),
        (["n0"], "worker_types.a100.nodes[0]", "expected a node name or a mapping"),
        ({"name": "n1"}, "worker_types.a100.nodes", "node name 'n1' also used by a100"),
    ],
)
def test_malformed_node_entries_are_one_line_errors(tmp_path, entry, field, message):
    path = tmp_path / "cluster.yaml"
    spec = {"gpus": 16, "gpus_per_node": 8, "nodes": [entry, "n1"]}
    path.write_text(yaml.safe_dump({"worker_types": {"a100": spec}}))
    with pytest.raises(InputError) as caught:
        read_cluster(path)
    text = str(caught.value)
    assert "\n" not in text and str(path) in text and f"field '{field}'" in text and message in text


# ----------------------------------------------------------------- plans and schedules

CLUSTER = """worker_types:
  a100:
    gpus: 10
    gpus_per_node: 2
    nodes:
      - {name: a0, switch: sw1, nvlink_domain: nvl0}
      - {name: a1, switch: sw1, nvlink_domain: nvl0}
      - {name: a2, switch: sw1}
      - {name: a3, switch: sw2}
      - a4
"""
TABLE = "worker_type,model,batch_size,scale_factor,throughput\n" + "".join(
    f"a100,m,,{s},{r}\n" for s, r in ((1, 1.0), (4, 3.5), (6, 5.0))
)
JOBS = "job_id,model,scale_factor,total_steps,command\n" + "".join(
    f"{j},m,{s},{n},python train.py --job {j}\n"
    for j, s, n in (("big6", 6, 9000), ("pair4", 4, 6000), ("solo", 1, 900))
)


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> Path:
    """A plan on five 2-GPU nodes: a 6-GPU gang (three nodes of sw1), a 4-GPU gang that finds no
    second switch with two nodes while the 6-GPU one runs, and a single-GPU job."""
    folder = tmp_path_factory.mktemp("topology")
    for name, text in (("cluster.yaml", CLUSTER), ("table.csv", TABLE), ("jobs.csv", JOBS)):
        (folder / name).write_text(text)
    out = folder / "schedule.json"
    args = ["plan", "-t", str(folder / "table.csv"), "-j", str(folder / "jobs.csv"), "-c", str(folder / "cluster.yaml")]
    result = CliRunner().invoke(app, [*args, "-o", str(out), "--round-length", "60"])
    assert result.exit_code == 0, result.output
    return out


def assignments(schedule: Path) -> list[dict]:
    return [a for r in json.loads(schedule.read_text())["rounds"] for a in r["assignments"]]


def test_plans_keep_gangs_in_one_switch_and_say_which(planned):
    cluster = read_cluster(planned.parent / "cluster.yaml")
    spec = cluster.worker_types["a100"]
    seen = set()
    for a in assignments(planned):
        nodes = list(dict.fromkeys(g["node"] for g in a["gpus"]))
        assert len(nodes) == -(-len(a["gpus"]) // 2)  # the fewest 2-GPU nodes
        if len(nodes) > 1:
            assert {k: a[k] for k in ("switch", "nvlink_domain") if k in a} == spec.shared_domains(nodes)
            assert "switch" in a  # a gang over nodes of no common switch would need a spread row
            seen.add((a["jobs"][0], a["switch"], a.get("nvlink_domain")))
        else:
            assert "switch" not in a and "nvlink_domain" not in a
    assert ("big6", "sw1", None) in seen and ("pair4", "sw1", "nvl0") in seen  # NVLink domain first


def test_a_gang_with_no_room_is_listed_with_its_reason(planned):
    data = json.loads(planned.read_text())
    waiting = [(r["index"], u) for r in data["rounds"] for u in r.get("unplaced", [])]
    assert waiting, "pair4 waits while big6 holds sw1"
    for index, u in waiting:
        assert u["jobs"] == ["pair4"] and u["gpus"] == 4 and "switch or NVLink domain" in u["reason"]
        running = {j for a in data["rounds"][index]["assignments"] for j in a["jobs"]}
        assert "pair4" not in running
    assert check_schedule(data, read_cluster(planned.parent / "cluster.yaml")) == []
    Schedule.from_json(data)  # the document keeps its rounds as they are


def test_the_validator_checks_declared_domains(planned):
    data = json.loads(planned.read_text())
    cluster = read_cluster(planned.parent / "cluster.yaml")
    gang = next(a for r in data["rounds"] for a in r["assignments"] if a["jobs"] == ["pair4"])
    gang["switch"] = "sw2"
    gang["nvlink_domain"] = "nvl9"
    found = [v for v in check_schedule(data, cluster) if v.kind == "topology"]
    assert len(found) == 4 and "pair4 says switch 'sw2' but a0 is on 'sw1'" in str(found[0])
    broken = copy.deepcopy(data)
    broken["rounds"][0]["unplaced"] = [{"jobs": [], "worker_type": "a100", "gpus": 4, "reason": "x"}]
    assert [v.kind for v in check_schedule(broken, cluster)] == ["structure"]
    gang["switch"] = 7
    with pytest.raises(InputError, match="'switch' must be a non-empty string"):
        Schedule.from_json(data, "s.json")


# ----------------------------------------------------------------- exports


def _by_jobs(folder: Path, suffix: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted(folder.glob(f"round-*/*{suffix}")):
        out.setdefault(path.name.removesuffix(suffix), []).append(path.read_text())
    return out


def test_slurm_asks_for_one_switch_for_a_gang_over_nodes_of_one_switch(planned, tmp_path):
    export_schedule("slurm", load_context(planned), tmp_path)
    scripts = _by_jobs(tmp_path, ".sbatch")
    assert scripts["big6"] and all("#SBATCH --switches=1\n" in s for s in scripts["big6"] + scripts["pair4"])
    assert all("--switches" not in s and "#SBATCH --nodes=1\n" in s for s in scripts["solo"])


def test_slurm_without_a_shared_switch_asks_for_none(planned, tmp_path):
    data = json.loads(planned.read_text())
    for r in data["rounds"]:
        for a in r["assignments"]:
            a.pop("switch", None)
    bare = planned.parent / "no-switch.json"
    bare.write_text(json.dumps(data))
    export_schedule("slurm", load_context(bare), tmp_path)
    assert not any("--switches" in s for scripts in _by_jobs(tmp_path, ".sbatch").values() for s in scripts)


def _manifests(folder: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("round-*/*.yaml")):
        doc = yaml.safe_load(path.read_text())
        out.setdefault(doc["metadata"]["annotations"]["rota/jobs"], []).append(doc)
    return out


def _pods(doc: dict) -> list[dict]:
    if doc["kind"] == "JobSet":
        return [rj["template"]["spec"]["template"] for rj in doc["spec"]["replicatedJobs"]]
    if doc["apiVersion"].startswith("batch.volcano.sh"):
        return [t["template"] for t in doc["spec"]["tasks"]]
    return [doc["spec"]["template"]]


def test_volcano_keeps_a_switch_gang_in_one_leaf_hypernode(planned, tmp_path):
    export_schedule("kubernetes", load_context(planned), tmp_path, gang="volcano")
    docs = _manifests(tmp_path)
    for doc in docs["big6"] + docs["pair4"]:
        assert doc["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
        assert doc["metadata"]["annotations"]["rota/switch"] == "sw1"
        assert check_manifest(doc) == [] and strict_problems(doc) == []
    assert any(d["metadata"]["annotations"].get("rota/nvlink-domain") == "nvl0" for d in docs["pair4"])
    assert all("networkTopology" not in d["spec"] for d in docs["solo"])


def test_kueue_asks_for_the_switch_label_and_groups_a_two_node_gang(planned, tmp_path):
    export_schedule("kubernetes", load_context(planned), tmp_path, gang="kueue", topology_label="example.com/leaf")
    docs = _manifests(tmp_path)
    for doc in docs["big6"]:  # three PodSets: Kueue groups only two, so each asks alone
        assert doc["kind"] == "JobSet" and check_manifest(doc) == [] and strict_problems(doc) == []
        assert [p["metadata"]["annotations"] for p in _pods(doc)] == [{KUEUE_REQUIRED_TOPOLOGY: "example.com/leaf"}] * 3
    for doc in docs["pair4"]:
        name = doc["metadata"]["name"]
        hints = {KUEUE_REQUIRED_TOPOLOGY: "example.com/leaf", KUEUE_PODSET_GROUP: name}
        assert [p["metadata"]["annotations"] for p in _pods(doc)] == [hints, hints] and strict_problems(doc) == []
    assert all("annotations" not in p["metadata"] for d in docs["solo"] for p in _pods(d))


def test_topology_hints_can_be_left_out_and_the_label_is_checked(planned, tmp_path):
    for gang in ("volcano", "kueue"):
        export_schedule("kubernetes", load_context(planned), tmp_path / gang, gang=gang, topology_label="")
        for doc in (d for docs in _manifests(tmp_path / gang).values() for d in docs):
            assert "networkTopology" not in doc["spec"]
            assert all(KUEUE_REQUIRED_TOPOLOGY not in p["metadata"].get("annotations", {}) for p in _pods(doc))
    with pytest.raises(InputError, match="field '--topology-label'.*not a valid label key"):
        export_schedule("kubernetes", load_context(planned), tmp_path / "bad", topology_label="no spaces/ok")


def test_check_manifest_knows_volcanos_network_topology():
    doc = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "x"},
        "spec": {"minAvailable": 1, "tasks": [{"name": "t", "replicas": 1, "template": {"spec": {"containers": []}}}]},
    }
    doc["spec"]["networkTopology"] = {"mode": "firm", "highestTierAllowed": 0, "tier": 1}
    problems = [p for p in check_manifest(doc) if p.startswith("spec.networkTopology")]
    assert problems == [
        "spec.networkTopology.tier: unknown field",
        "spec.networkTopology.mode: must be hard or soft, got 'firm'",
        "spec.networkTopology.highestTierAllowed: expected an integer >= 1, got 0",
    ]
    doc["spec"]["networkTopology"] = {"mode": "soft"}
    assert not [p for p in check_manifest(doc) if p.startswith("spec.networkTopology")]


def test_ray_packs_a_one_node_gang_and_spreads_a_multi_node_one(planned, tmp_path):
    export_schedule("ray", load_context(planned), tmp_path)
    plan = json.loads((tmp_path / "ray_plan.json").read_text())
    groups = [g for r in plan["rounds"] for g in r["groups"]]
    assert groups
    for g in groups:
        assert g["strategy"] == ("STRICT_PACK" if len(g["nodes"]) == 1 else "STRICT_SPREAD")
    assert {len(g["nodes"]) for g in groups} >= {1, 2, 3}
