"""`rota run ray` on a real local Ray cluster: Ctrl-C and a continued run; a raylet killed
mid-round, a crashing job and one that ignores SIGTERM.

The job on the lost node ends LOST (not its fault, no failure counted), its process is gone, the
node is reported lost and not planned on again, the crasher and the SIGTERM-ignorer fail after
--max-failures, and the healthy jobs finish with credited steps equal to what the trainer
checkpointed."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import DATA

from launchers.ray_cluster import FakeNode, running_cluster
from launchers.run_loop import (
    checkpoint_steps,
    fake_events,
    fake_jobs,
    marked_processes,
    start_run,
    state_jobs,
)
from launchers.slurm_rounds import wait_for

NODES = [FakeNode("v100-0", 4, "V100"), FakeNode("t4-0", 2, "T4")]  # the head stays; t4-0 is lost (last test)
CLUSTER = """worker_types:
  v100: {gpus: 4, gpus_per_node: 4, nodes: [v100-0]}
  t4: {gpus: 2, gpus_per_node: 2, nodes: [t4-0]}
"""


HEALTHY = ("one", "two", "three")


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(DATA.parent), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def _args(tmp_path, jobs, ray_cluster, *more: str) -> list[str]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    return [
        "--jobs", str(jobs), "--table", str(DATA / "throughputs.csv"), "--cluster", str(tmp_path / "cluster.yaml"),
        "--round-length", "30", "--grace", "6", "--address", ray_cluster.address, *more,
    ]  # fmt: skip


def test_ctrl_c_then_a_continued_run(ray_cluster, tmp_path):
    """Ctrl-C stops after the round (130); the same command continues, no round runs twice, and the
    credited steps are what the trainer checkpointed."""
    fake, jobs = fake_jobs(
        tmp_path,
        {"one": ("ResNet-18,64,1", 2500, "--rate-scale 2"), "two": ("LM,20,1", 2500, "--rate-scale 2")},
    )
    with start_run(tmp_path, "ray", _env(), *_args(tmp_path, jobs, ray_cluster)) as run:
        run.wait_event(lambda e: e["event"] == "job_start", 120, "a job's start")
        run.proc.send_signal(signal.SIGINT)
        status = run.finish(120)
    assert status == 128 + signal.SIGINT, run.output()
    with start_run(tmp_path, "ray", _env(), "--address", ray_cluster.address) as again:
        status = again.finish(300)
    assert status == 0, again.output()
    assert len([e for e in again.events() if e["event"] == "round_start" and e["round"] == 0]) == 1
    saved = state_jobs(again.state)
    for jid in ("one", "two"):
        assert saved[jid]["status"] == "finished"
        assert saved[jid]["progress"] == int(checkpoint_steps(fake, jid))
    wait_for(lambda: not marked_processes(str(fake)), 30, "the jobs' processes to end")


@pytest.fixture(scope="module")
def ray_cluster():
    yield from running_cluster(NODES, "the rota run ray tests")


def test_a_lost_raylet_a_crasher_and_a_sigterm_ignorer(ray_cluster, tmp_path):
    fake, jobs = fake_jobs(
        tmp_path,
        {
            "one": ("ResNet-18,64,1", 1500, "--rate-scale 2"),
            "two": ("LM,20,1", 1500, "--rate-scale 2"),
            "three": ("Recommendation,1024,1", 4000, "--rate-scale 2"),
            "crash": ("A3C,,1", 1000, "--fail"),
            "stubborn": ("Transformer,64,1", 100000, "--ignore-term"),
        },
    )
    with start_run(tmp_path, "ray", _env(), *_args(tmp_path, jobs, ray_cluster, "--max-failures", "2")) as run:
        start = run.wait_event(
            lambda e: e["event"] == "job_start" and "t4-0" in e["nodes"] and e["job_id"] in HEALTHY, 180, "a t4 job"
        )
        lost_job = start["job_id"]
        wait_for(
            lambda: any(e["event"] == "start" and e["job_id"] == lost_job for e in fake_events(fake)), 60, "it to start"
        )
        ray_cluster.kill_raylet("t4-0")
        status = run.finish(600)
    events = run.events()
    assert status == 1, run.output()
    ends = [e for e in events if e["event"] == "job_end" and e["job_id"] == lost_job and e["round"] == start["round"]]
    assert [e["state"] for e in ends] == ["lost"], ends
    assert not [e for e in events if e["event"] == "job_failed" and e["job_id"] == lost_job]  # a healthy job
    assert any(e["event"] == "node_lost" and e["node"] == "t4-0" for e in events)
    later = [e for e in events if e["event"] == "job_start" and e["round"] > start["round"]]
    assert later and not [e for e in later if "t4-0" in e["nodes"]]
    # the lost job ran once in its round, and no process of this test's jobs is left
    starts = [e for e in fake_events(fake) if e["event"] == "start" and e["job_id"] == lost_job]
    assert len([e for e in starts if e["round"] == str(start["round"])]) == 1
    wait_for(lambda: not marked_processes(str(fake)), 30, "the jobs' processes to end")
    saved = state_jobs(run.state)
    assert saved["crash"]["status"] == saved["stubborn"]["status"] == "failed"
    stubborn = [e["state"] for e in events if e["event"] == "job_end" and e["job_id"] == "stubborn"]
    # killed at each round's end until given up (a round lost with its node is not held against it)
    assert stubborn.count("killed") == 2 and set(stubborn) <= {"killed", "lost"}, stubborn
    logs = run.work / "launch" / "logs"  # one log per job across rounds
    assert sorted(p.name for p in logs.glob("*.log")) == sorted(f"{j}.log" for j in saved)
    rounds = {e["round"] for e in events if e["event"] == "job_start" and e["job_id"] == "three"}
    assert (logs / "three.log").read_text().count("fake_train start job=three") == len(rounds)
    for jid in HEALTHY:
        assert saved[jid]["status"] == "finished", saved[jid]
        assert saved[jid]["progress"] == int(checkpoint_steps(fake, jid))
