"""`rota run ray` on a real local Ray cluster: a raylet killed mid-round and a crashing job.

The job on the lost node ends LOST (not its fault, no failure counted), its process is gone, the
node is reported lost and not planned on again, the crasher fails after --max-failures, and the
healthy jobs finish with credited steps equal to what the trainer checkpointed."""

from __future__ import annotations

import os

import pytest
from conftest import DATA

from launchers.ray_cluster import FakeNode, running_cluster
from launchers.run_loop import checkpoint_steps, job_list, marked_processes, start_run, state_jobs
from launchers.slurm_rounds import wait_for

NODES = [FakeNode("v100-0", 2, "V100"), FakeNode("t4-0", 2, "T4")]  # the head stays; t4-0 is lost
CLUSTER = """worker_types:
  v100: {gpus: 2, gpus_per_node: 2, nodes: [v100-0]}
  t4: {gpus: 2, gpus_per_node: 2, nodes: [t4-0]}
"""


@pytest.fixture(scope="module")
def ray_cluster():
    yield from running_cluster(NODES, "the rota run ray tests")


def test_a_lost_raylet_and_a_crasher(ray_cluster, tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    jobs = job_list(
        tmp_path / "jobs.csv",
        fake,
        {
            "one": ("ResNet-18,64,1", 1500, "--rate-scale 2"),
            "two": ("LM,20,1", 1500, "--rate-scale 2"),
            "three": ("Recommendation,1024,1", 4000, "--rate-scale 2"),
            "crash": ("A3C,,1", 1000, "--fail"),
        },
    )
    path = os.pathsep.join(filter(None, [str(DATA.parent), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    run = start_run(
        tmp_path,
        "ray",
        env,
        "--jobs", str(jobs), "--table", str(DATA / "throughputs.csv"), "--cluster", str(tmp_path / "cluster.yaml"),
        "--round-length", "30", "--grace", "6", "--max-failures", "2", "--address", ray_cluster.address,
    )  # fmt: skip
    try:
        start = run.wait_event(
            lambda e: e["event"] == "job_start" and "t4-0" in e["nodes"] and e["job_id"] != "crash", 180, "a t4 job"
        )
        lost_job = start["job_id"]
        wait_for(
            lambda: any(e["event"] == "start" and e["job_id"] == lost_job for e in _fake_log(fake)), 60, "it to start"
        )
        ray_cluster.kill_raylet("t4-0")
        status = run.finish(600)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    events = run.events()
    assert status == 1, run.output()
    ends = [e for e in events if e["event"] == "job_end" and e["job_id"] == lost_job and e["round"] == start["round"]]
    assert [e["state"] for e in ends] == ["lost"], ends
    assert not [e for e in events if e["event"] == "job_failed" and e["job_id"] == lost_job]
    assert any(e["event"] == "node_lost" and e["node"] == "t4-0" for e in events)
    later = [e for e in events if e["event"] == "job_start" and e["round"] > start["round"]]
    assert later and not [e for e in later if "t4-0" in e["nodes"]]
    # the lost job ran once in its round, and no process of this test's jobs is left
    starts = [e for e in _fake_log(fake) if e["event"] == "start" and e["job_id"] == lost_job]
    assert len([e for e in starts if e["round"] == str(start["round"])]) == 1
    wait_for(lambda: not marked_processes(str(fake)), 30, "the jobs' processes to end")
    saved = state_jobs(run.state)
    assert saved["crash"]["status"] == "failed"
    logs = run.work / "launch" / "logs"  # one log per job across rounds
    assert sorted(p.name for p in logs.glob("*.log")) == sorted(f"{j}.log" for j in saved)
    rounds = {e["round"] for e in events if e["event"] == "job_start" and e["job_id"] == "three"}
    assert (logs / "three.log").read_text().count("fake_train start job=three") == len(rounds)
    for jid in ("one", "two", "three"):
        assert saved[jid]["status"] == "finished", saved[jid]
        assert saved[jid]["progress"] == int(checkpoint_steps(fake, jid))


def _fake_log(fake):
    import json

    path = fake / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
