"""`rota capacity --ray`: the simulations as Ray tasks on a local CPU-only Ray cluster give the
same answer as the process pool (a simulation is deterministic), configuration for configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launchers.ray_cluster import FakeNode, running_cluster

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "data" / "examples" / "lab"
NODES = [FakeNode("head-0", 0, "CPU")]


@pytest.fixture(scope="module")
def ray_cluster():
    yield from running_cluster(NODES, "the capacity-on-Ray test")


def _capacity(tmp_path: Path, out: str, *extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "planner.cli", "capacity", "--jobs", str(LAB / "jobs.csv")]
    command += ["--table", str(ROOT / "data" / "gavel" / "simulation_throughputs.csv")]
    command += ["--cluster", str(LAB / "cluster.yaml")]
    command += ["--catalogue", str(ROOT / "data" / "examples" / "capacity" / "lab_catalogue.yaml")]
    command += ["--budget", "100000", "--round-length", "1800", "--top", "4", "--out", str(tmp_path / out), "--json"]
    done = subprocess.run([*command, *extra], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_the_simulations_run_as_ray_tasks_with_the_pool_s_answer(ray_cluster, tmp_path):
    on_ray = _capacity(tmp_path, "ray", "--ray", ray_cluster.address)
    pooled = _capacity(tmp_path, "pool", "--workers", "2")
    simulated = [c for c in on_ray["configurations"] if c["simulation"]]
    assert len(simulated) == 5  # the top 4 and the current cluster
    assert [c["simulation"] for c in on_ray["configurations"]] == [c["simulation"] for c in pooled["configurations"]]
    assert on_ray["recommendation"] == pooled["recommendation"]


def test_a_ray_address_nobody_answers_is_one_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "planner.cli", "capacity", "--jobs", str(LAB / "jobs.csv")]
    command += ["--table", str(ROOT / "data" / "gavel" / "simulation_throughputs.csv")]
    command += ["--cluster", str(LAB / "cluster.yaml"), "--ray", "127.0.0.1:1"]
    command += ["--catalogue", str(ROOT / "data" / "examples" / "capacity" / "lab_catalogue.yaml")]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "cannot connect to the Ray cluster at '127.0.0.1:1'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
