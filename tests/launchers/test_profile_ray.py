"""`rota profile-jobs ray` on a local CPU-only Ray cluster (tests/launchers/ray_cluster.py): each
worker type is profiled by a task on its own node, the driver saves the shards it gets back and
merges them into one table; a job no node can take stops the driver before anything runs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.launchers.ray_cluster import FakeNode, LocalRayCluster, running_cluster

ROOT = Path(__file__).resolve().parents[2]
NODES = [FakeNode("head-0", 0, "CPU"), FakeNode("v100-0", 2, "V100"), FakeNode("v100-1", 2, "V100")]
PROFILE_OPTIONS = ["--models", "LM", "--batch-sizes", "5", "--pairs", "none", "--scale-factors", "1"]
PROFILE_OPTIONS += ["--scale", "tiny", "--budget", "0.5", "--no-restart-cost"]


@pytest.fixture(scope="module")
def ray_cluster():
    yield from running_cluster(NODES, "the Ray profiling tests")


def _write_jobs(tmp_path: Path, cluster_yaml: str, *options: str, profile=PROFILE_OPTIONS) -> Path:
    (tmp_path / "cluster.yaml").write_text(cluster_yaml)
    out = tmp_path / "prof"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "planner.cli", "profile-jobs", "ray", "--cluster", "cluster.yaml"]
    command += ["--out-dir", "prof", "--rota", f"{sys.executable} -m planner.cli", *options, "--", *profile]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _drive(out: Path, cluster: LocalRayCluster) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, str(out / "ray_profile.py"), "--address", cluster.address],
        cwd=out.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )


def test_each_worker_type_is_profiled_on_its_node_and_merged(ray_cluster, tmp_path):
    from planner.formats.table import read_table

    out = _write_jobs(
        tmp_path,
        "worker_types:\n  cpu: {gpus: 1, nodes: [head-0]}\n  v100: {gpus: 2, nodes: [v100-0]}\n",
        "--device-types",
        "v100=cpu",  # this machine's CPU, recorded as the cluster's v100
    )
    done = _drive(out, ray_cluster)
    logs = "\n".join(p.read_text() for p in sorted(out.glob("logs/*")))
    assert done.returncode == 0, done.stdout + done.stderr + logs
    state = json.loads((out / "ray_profile_state.json").read_text())
    assert state["cpu"]["returncode"] == 0 and "node:head-0" in state["cpu"]["node_resources"]
    assert state["v100"]["returncode"] == 0 and "node:v100-0" in state["v100"]["node_resources"]
    assert read_table(out / "shards" / "v100.csv").worker_types == ["v100"]
    table = read_table(out / "throughputs.csv")
    assert table.worker_types == ["cpu", "v100"] and len(table) == 2
    for row in table.rows:
        assert (row["model"], row["batch_size"], row["status"], row["source"]) == ("LM", 5, "ok", "measured")
        assert row["throughput"] > 0 and row["host"] and row["torch_version"] and row["measured_at"]


def test_a_job_no_node_can_take_stops_the_driver_first(ray_cluster, tmp_path):
    out = _write_jobs(tmp_path, "worker_types:\n  k80: {gpus: 4, nodes: [k80-0]}\n  v100: {gpus: 4, nodes: [v100-0]}\n")
    done = _drive(out, ray_cluster)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "k80: no Ray node has the resource node:k80-0" in done.stderr
    assert "v100: node v100-0 has fewer than 4 GPUs" in done.stderr
    assert not (out / "shards").exists()


def test_a_job_that_cannot_start_fails_with_its_reason_in_its_log(ray_cluster, tmp_path):
    out = _write_jobs(tmp_path, "worker_types:\n  cpu: {gpus: 1, nodes: [head-0]}\n", "--rota", "/no/such/rota")
    done = _drive(out, ray_cluster)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "profiling failed for cpu" in done.stderr
    assert "cannot run '/no/such/rota' on this node" in (out / "logs" / "cpu.log").read_text()
    assert json.loads((out / "ray_profile_state.json").read_text())["cpu"]["returncode"] == 127
    assert not (out / "throughputs.csv").exists()


GANG_RANK = ROOT / "tests" / "gang_rank.py"  # a torch-free rank that records its variables and node


def test_a_command_gang_beyond_one_node_runs_across_the_type_s_nodes(ray_cluster, tmp_path):
    from planner.formats.table import read_table

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    command = f"gang={shlex.join([sys.executable, str(GANG_RANK), str(ranks), '-1'])}"
    profile = ["--command", command, "--scale-factors", "1,2,4", "--cpu-workers", "2", "--pairs", "none"]
    profile += ["--budget", "0.5", "--window-s", "0.05", "--warmup-steps", "2"]
    cluster = "worker_types:\n  v100: {gpus: 4, gpus_per_node: 2, nodes: [v100-0, v100-1]}\n"
    out = _write_jobs(tmp_path, cluster, "--device-types", "v100=cpu", profile=profile)
    (job,) = json.loads((out / "ray_profile_jobs.json").read_text())["jobs"]
    assert job["nodes"] == ["v100-0", "v100-1"] and "--across-nodes" in job["command"]
    done = _drive(out, ray_cluster)
    logs = "\n".join(p.read_text() for p in sorted(out.glob("logs/*")))
    assert done.returncode == 0, done.stdout + done.stderr + logs
    assert "v100: profiling on nodes v100-0,v100-1" in done.stdout
    rows = {row["scale_factor"]: row for row in read_table(out / "throughputs.csv").rows}
    assert sorted(rows) == [1, 2, 4] and {r["status"] for r in rows.values()} == {"ok"}, logs
    four = [json.loads((ranks / f"w4-rank{r}.json").read_text()) for r in range(4)]
    # ranks 0 and 1 on the job's first node, 2 and 3 started as Ray tasks on the second
    assert [e["ROTA_TEST_NODE"] for e in four] == ["v100-0", "v100-0", "v100-1", "v100-1"]
    assert [(e["RANK"], e["LOCAL_RANK"], e["GROUP_RANK"]) for e in four] == [
        ("0", "0", "0"),
        ("1", "1", "0"),
        ("2", "0", "1"),
        ("3", "1", "1"),
    ]
    assert {(e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) for e in four} == {("4", "2")}
    # one rendezvous: the first node's address as Ray knows it (NodeManagerAddress), one port
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in four}) == 1 and four[0]["MASTER_ADDR"]
    two = [json.loads((ranks / f"w2-rank{r}.json").read_text()) for r in range(2)]
    assert {(e["ROTA_TEST_NODE"], e["MASTER_ADDR"]) for e in two} == {("v100-0", "127.0.0.1")}  # within a node
    # every rank stops with its measurement, the Ray tasks' ones included (their command lines name `ranks`);
    # a cancelled task stops its command just after the driver has moved on, so wait for it
    deadline = time.monotonic() + 60
    while _running_with(str(ranks)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _running_with(str(ranks)) == []


def _running_with(word: str) -> list[int]:
    """Processes whose command line holds `word` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.name.isdigit() and word.encode() in argv:
            found.append(int(entry.name))
    return found
