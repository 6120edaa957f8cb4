"""`rota profile-jobs ray` on a local CPU-only Ray cluster (tests/launchers/ray_cluster.py): each
worker type is profiled by a task on its own node, the driver saves the shards it gets back and
merges them into one table; a job no node can take stops the driver before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launchers.ray_cluster import FakeNode, LocalRayCluster, running_cluster

ROOT = Path(__file__).resolve().parents[2]
NODES = [FakeNode("head-0", 0, "CPU"), FakeNode("v100-0", 2, "V100")]
PROFILE_OPTIONS = ["--models", "LM", "--batch-sizes", "5", "--pairs", "none", "--scale-factors", "1"]
PROFILE_OPTIONS += ["--scale", "tiny", "--budget", "0.5", "--no-restart-cost"]


@pytest.fixture(scope="module")
def ray_cluster():
    yield from running_cluster(NODES, "the Ray profiling tests")


def _write_jobs(tmp_path: Path, cluster_yaml: str, *options: str) -> Path:
    (tmp_path / "cluster.yaml").write_text(cluster_yaml)
    out = tmp_path / "prof"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "planner.cli", "profile-jobs", "ray", "--cluster", "cluster.yaml"]
    command += ["--out-dir", "prof", "--rota", f"{sys.executable} -m planner.cli", *options, "--", *PROFILE_OPTIONS]
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
