"""Faults on a real local Ray cluster of its own (a raylet is killed here, so not the shared one).

A raylet SIGKILLed mid-round must not hang the round, orphan the job or run it twice: the round ends
by its deadline, the job on the lost node is LOST, its processes are gone within seconds (found by a
marker in their environment, /proc/*/environ), and it started exactly once; the job on the other node
keeps the round's clock and completes. The watchdog itself is also checked without Ray: a process
whose parent (the Ray worker) is SIGKILLed is killed within seconds.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from planner.export.ray_driver import END_SLACK_S, ORPHAN_GRACE_S, RoundRun
from planner.formats.cluster import Cluster, read_cluster
from planner.launch.adapter import NodeState
from planner.launch.ray import RayLauncher
from tests.launchers.ray_cluster import FakeNode, processes_with_env, running_cluster

ROOT = Path(__file__).resolve().parents[2]
FAKE_TRAIN = Path(__file__).with_name("fake_train.py")
NODES = [FakeNode("v100-0", 2, "V100"), FakeNode("t4-0", 2, "T4")]  # the head stays; t4-0 is lost
ROUND_S, GRACE_S = 30, 6
CLOCK_SLACK_S = 5  # a loaded 2-core machine: signals within this of their time
GONE_WITHIN_S = ORPHAN_GRACE_S + 4  # the worker notices its raylet died (~1 s), then SIGTERM, SIGKILL


@pytest.fixture(scope="module")
def ray_cluster():
    yield from running_cluster(NODES, "the Ray fault tests")


@pytest.fixture(scope="module")
def ray_client(ray_cluster):
    import ray

    ray.init(address=ray_cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def read_cluster_text(text: str, folder: Path) -> Cluster:
    (folder / "cluster.yaml").write_text(text)
    return read_cluster(folder / "cluster.yaml")


def events(work: Path) -> list[dict]:
    path = work / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def group(name: str, worker_type: str, node: str, acc: str, job_id: str, work: Path, marker: str) -> dict:
    command = (
        f"FAKE_TRAIN_DIR={shlex.quote(str(work))} exec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_TRAIN))}"
    )
    env = {
        "ROTA_JOB_ID": job_id,
        "ROTA_ROUND": "0",
        "ROTA_ROUND_S": str(ROUND_S),
        "ROTA_GRACE_S": str(GRACE_S),
        "ROTA_PLANNED_STEPS": "300",
        "ROTA_TOTAL_STEPS": "100000",
        "ROTA_WORKER_TYPE": worker_type,
        "ROTA_PLANNED_GPUS": f"{node}:0",
        "ROTA_GPUS": f"{node}:0",
        "ROTA_NUM_NODES": "1",
        "ROTA_MASTER_PORT": "29600",
        "ROTA_TEST_MARKER": marker,
    }
    return {
        "name": name,
        "worker_type": worker_type,
        "accelerator_type": acc,
        "strategy": "STRICT_PACK",
        "nodes": [node],
        "bundles": [{"GPU": 1, "CPU": 1, f"accelerator_type:{acc}": 0.001, f"node:{node}": 0.001}],
        "jobs": [{"job_id": job_id, "command": command, "env": env, "planned_steps": 300}],
    }


def test_watchdog_kills_the_jobs_of_a_dead_worker(tmp_path):
    """No Ray: a stand-in for the Ray worker runs a job that ignores SIGTERM under the watchdog and
    is SIGKILLed; the job is gone ORPHAN_GRACE_S later, long before its round's end."""
    marker = uuid.uuid4().hex
    job = {"command": 'trap "" TERM; sleep 120', "env": {"ROTA_TEST_MARKER": marker}}
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from planner.export.ray_driver import run_commands; "
        f"run_commands([{job!r}], 100, 10)"
    )
    worker = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.time() + 20
        while not processes_with_env("ROTA_TEST_MARKER", marker) and time.time() < deadline:
            time.sleep(0.1)
        assert processes_with_env("ROTA_TEST_MARKER", marker), "the job started"
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    killed = time.time()
    while processes_with_env("ROTA_TEST_MARKER", marker) and time.time() < killed + 30:
        time.sleep(0.1)
    gone = time.time() - killed
    assert not processes_with_env("ROTA_TEST_MARKER", marker)
    assert gone <= GONE_WITHIN_S, f"the orphaned job lived {gone:.1f} s after its worker died"


def test_a_lost_raylet_ends_its_job_lost_and_the_round_on_time(ray_cluster, ray_client, tmp_path):
    work = tmp_path / "fake"
    work.mkdir()
    keep, lose = uuid.uuid4().hex, uuid.uuid4().hex
    rnd = {
        "index": 0,
        "start_s": 0,
        "end_s": ROUND_S,
        "groups": [
            group("rota-r0000-keep", "v100", "v100-0", "V100", "keep-a", work, keep),
            group("rota-r0000-lose", "t4", "t4-0", "T4", "lose-b", work, lose),
        ],
    }
    spec = read_cluster_text(
        "worker_types:\n  v100: {gpus: 2, nodes: [v100-0]}\n  t4: {gpus: 4, gpus_per_node: 2, nodes: [t4-0, t4-1]}\n",
        tmp_path,
    )
    launcher = RayLauncher(ray_cluster.address)
    state = launcher.cluster_state(spec)  # before: both raylets alive, t4-1 never started
    assert state.nodes["t4-0"] == NodeState("t4-0", usable=True, gpus=2)
    assert state.unusable() == {"t4-1": "unknown to the launcher"}
    plan = {"round_s": ROUND_S, "grace_s": GRACE_S, "placement_timeout_s": 60, "rounds": [rnd]}
    round_start = time.time()
    run = RoundRun(rnd, plan, round_start, cwd=str(tmp_path)).start()
    while not processes_with_env("ROTA_TEST_MARKER", lose) and time.time() < round_start + ROUND_S - GRACE_S:
        run.wait(time.time() + 0.2)
    assert processes_with_env("ROTA_TEST_MARKER", lose), "lose-b started"
    ray_cluster.kill_raylet("t4-0")
    killed = time.time()
    while processes_with_env("ROTA_TEST_MARKER", lose) and time.time() < killed + 30:
        run.wait(time.time() + 0.2)
    gone = time.time() - killed
    report = run.finish()
    ended = time.time()
    print(f"lost job's processes gone {gone:.1f} s after the raylet was killed; round ended "
          f"{ended - round_start:.1f} s after its start (round {ROUND_S} s)")  # fmt: skip
    assert not processes_with_env("ROTA_TEST_MARKER", lose)
    assert gone <= GONE_WITHIN_S, f"lose-b's processes lived {gone:.1f} s after its raylet died"
    assert ended <= round_start + ROUND_S + END_SLACK_S + CLOCK_SLACK_S, f"the round ran {ended - round_start:.0f} s"
    states = {j["job_id"]: j for j in report["jobs"]}
    assert states["lose-b"]["state"] == "LOST", states["lose-b"]
    print("lose-b:", states["lose-b"])
    assert states["keep-a"]["state"] == "COMPLETED" and states["keep-a"]["exit_codes"] == [0], states["keep-a"]
    time.sleep(3)  # a retry would have started by now
    log = events(work)
    assert len([e for e in log if e["job_id"] == "lose-b" and e["event"] == "start"]) == 1, "ran exactly once"
    (term,) = [e for e in log if e["job_id"] == "keep-a" and e["event"] == "signal"]
    expected = round_start + ROUND_S - GRACE_S
    assert term["signal"] == "SIGTERM" and abs(term["time"] - expected) <= CLOCK_SLACK_S, term["time"] - expected
    # the adapter sees the node gone (GCS marks it dead after its missed heartbeats, ~15 s)
    deadline = time.time() + 40
    while (state := launcher.cluster_state(spec)).nodes["t4-0"].reason != "lost":
        assert time.time() < deadline, state
        time.sleep(1)
    assert state.nodes["v100-0"] == NodeState("v100-0", usable=True, gpus=2)
    assert state.unusable() == {"t4-0": "lost", "t4-1": "unknown to the launcher"}
