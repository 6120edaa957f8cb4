"""rota's Ray export run for real on a local CPU-only Ray cluster (tests/launchers/ray_cluster.py).

The job command is tests/launchers/fake_train.py, which logs where, when and with what it ran. Checked:
every job runs on its planned nodes and worker type, once per node with the gang variables, sees SIGTERM
no earlier than the round's end minus the grace period (minus 2 s of slack), checkpoints and resumes,
and the progress it reports is what the next planning call reads back; a group that cannot be placed
fails the round with an error that names it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launchers.ray_cluster import FakeNode, LocalRayCluster, running_cluster

ROOT = Path(__file__).resolve().parents[2]
FAKE_TRAIN = Path(__file__).with_name("fake_train.py")
TABLE = ROOT / "data" / "throughputs.csv"
ROUND_S = 24
GRACE_S = 6
SLACK_S = 2  # a job's own start-up: it may hear the round's clock start a little before it did

# One raylet per node; v100-0 is also the head.
NODES = [FakeNode("v100-0", 2, "V100"), FakeNode("t4-0", 2, "T4"), FakeNode("t4-1", 2, "T4"), FakeNode("t4-2", 2, "T4")]
NODE_TYPE = {"v100-0": "v100", "t4-0": "t4", "t4-1": "t4", "t4-2": "t4"}
CLUSTER_YAML = """worker_types:
  v100: {gpus: 2, gpus_per_node: 2, nodes: [v100-0]}
  t4: {gpus: 6, gpus_per_node: 2, nodes: [t4-0, t4-1, t4-2]}
"""
# A 4-GPU gang over two t4 nodes and five single-GPU jobs: 9 GPUs asked of 8, so jobs rotate between
# rounds and types (max-min fairness), and some run on t4-2 while t4-0 / t4-1 stand free.
JOBS = [
    ("gang-a", "ResNet-50", "32", 4),
    ("solo-b", "ResNet-18", "64", 1),
    ("solo-c", "Transformer", "64", 1),
    ("solo-d", "A3C", "", 1),
    ("solo-e", "LM", "20", 1),
    ("solo-f", "ResNet-18", "128", 1),
]


@pytest.fixture(scope="module")
def ray_cluster():
    yield from running_cluster(NODES, "the Ray launcher tests")


@pytest.fixture
def inputs(tmp_path) -> dict[str, Path]:
    work = tmp_path / "fake"
    work.mkdir()
    command = (
        f"FAKE_TRAIN_DIR={shlex.quote(str(work))} exec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_TRAIN))}"
    )
    lines = ["job_id,model,batch_size,scale_factor,duration_s,command"]
    lines += [f'{jid},{model},{bs},{scale},3600,"{command}"' for jid, model, bs, scale in JOBS]
    (tmp_path / "jobs.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "cluster.yaml").write_text(CLUSTER_YAML)
    return {"jobs": tmp_path / "jobs.csv", "cluster": tmp_path / "cluster.yaml", "work": work, "dir": tmp_path}


def rota(*args: str | Path, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    run = subprocess.run(
        [sys.executable, "-c", "from planner.cli import main; main()", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def drive(plan: Path, cluster: LocalRayCluster, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """The driver as a user runs it, from the folder that holds the launch folder."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run(
        [sys.executable, str(plan.with_name("ray_driver.py")), str(plan), "--address", cluster.address, *args],
        cwd=plan.parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def events(work: Path) -> list[dict]:
    path = work / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def expected_port(job_id: str) -> int:
    """The contract: 29500 + a stable hash of the job id, mod 1000."""
    return 29500 + int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:4], "big") % 1000


def check_round(rnd: dict, plan: dict, log: list[dict], progress_dir: Path | None) -> dict[str, float]:
    """Every job of the round ran where and how it was planned; returns the steps each one reported."""
    index = str(rnd["index"])
    reported = {}
    for group in rnd["groups"]:
        for job in group["jobs"]:
            jid = job["job_id"]
            mine = [e for e in log if e["job_id"] == jid and e["round"] == index]
            starts = [e for e in mine if e["event"] == "start"]
            n = len(group["nodes"])
            assert len(starts) == n, f"{jid}: {len(starts)} process(es) for {n} node(s)"
            ranks = sorted(int(s["env"]["ROTA_NODE_RANK"]) for s in starts)
            assert ranks == list(range(n)), (jid, ranks)
            masters = {s["env"]["ROTA_MASTER_ADDR"] for s in starts}
            assert len(masters) == 1 and masters != {""}, (jid, masters)
            for s in starts:
                env, rank = s["env"], int(s["env"]["ROTA_NODE_RANK"])
                ran_on = env["ROTA_TEST_NODE"]  # set on the raylet that ran it, not by rota
                assert ran_on == group["nodes"][rank], f"{jid} rank {rank} ran on {ran_on}, planned {group['nodes']}"
                assert NODE_TYPE[ran_on] == env["ROTA_WORKER_TYPE"] == group["worker_type"]
                assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == group["bundles"][rank]["GPU"]
                assert env["ROTA_NUM_NODES"] == str(n) and env["ROTA_MASTER_PORT"] == str(expected_port(jid))
                signals = [e for e in mine if e["event"] == "signal" and e["pid"] == s["pid"]]
                assert signals and signals[0]["signal"] == "SIGTERM", (jid, signals)
                earliest = s["time"] + plan["round_s"] - plan["grace_s"] - SLACK_S
                assert signals[0]["time"] >= earliest, f"{jid}: SIGTERM {earliest - signals[0]['time']:.1f} s early"
                (stop,) = [e for e in mine if e["event"] == "stop" and e["pid"] == s["pid"]]
                assert stop["reason"] == "SIGTERM"
            (rank0,) = [s for s in starts if s["env"]["ROTA_NODE_RANK"] == "0"]
            (stop0,) = [e for e in mine if e["event"] == "stop" and e["pid"] == rank0["pid"]]
            reported[jid] = stop0["total_done"]
            if progress_dir is not None:
                report = json.loads((progress_dir / f"{jid}.json").read_text())
                assert report == {"job_id": jid, "steps_done": int(stop0["total_done"]), "finished": False}
    return reported


def checkpoint(work: Path, job_id: str) -> float:
    path = work / "ckpt" / (hashlib.sha256(job_id.encode()).hexdigest()[:16] + ".json")
    return json.loads(path.read_text())["steps"]


def test_one_round_runs_as_planned(ray_cluster, inputs):
    """Round 1 of a plan (the gang and jobs on t4-2 with t4-0 / t4-1 free) run on a real Ray."""
    d = inputs["dir"]
    rota("plan", "--table", TABLE, "--jobs", inputs["jobs"], "--cluster", inputs["cluster"], "--rounds", "2",
         "--round-length", str(ROUND_S), "--out", "schedule.json", cwd=d)  # fmt: skip
    rota("export", "ray", "schedule.json", "--out", "launch", "--grace", str(GRACE_S), cwd=d)
    plan = json.loads((d / "launch" / "ray_plan.json").read_text())
    run = drive(d / "launch" / "ray_plan.json", ray_cluster, "--round", "1")
    assert run.returncode == 0, run.stdout + run.stderr
    (rnd,) = [r for r in plan["rounds"] if r["index"] == 1]
    assert any(len(g["nodes"]) == 2 for g in rnd["groups"]), "the round holds a two-node gang"
    reported = check_round(rnd, plan, events(inputs["work"]), None)
    assert set(reported) == {j["job_id"] for g in rnd["groups"] for j in g["jobs"]}
    for jid, steps in reported.items():
        assert checkpoint(inputs["work"], jid) == steps > 0
    # the state report: every job completed, with one exit code per node of its group
    report = json.loads((d / "launch" / "ray_state.json").read_text())
    assert report["format"] == "rota.ray-state/v1" and report["exit_status"] == 0
    (ran,) = report["rounds"]
    nodes = {j["job_id"]: len(g["nodes"]) for g in rnd["groups"] for j in g["jobs"]}
    assert ran["index"] == 1 and ran["error"] is None
    assert {j["job_id"]: (j["state"], j["exit_codes"]) for j in ran["jobs"]} == {
        jid: ("COMPLETED", [0] * n) for jid, n in nodes.items()
    }
    assert "round 1: " in run.stdout and "exit status 0" in run.stdout


def test_a_failed_job_makes_the_driver_exit_1_and_is_named_in_its_state_report(ray_cluster, inputs):
    d = inputs["dir"]
    jobs = inputs["jobs"].read_text().splitlines()
    jobs[2] = jobs[2].replace('fake_train.py"', 'fake_train.py --fail"')  # solo-b fails at once
    assert "--fail" in jobs[2] and jobs[2].startswith("solo-b,")
    inputs["jobs"].write_text("\n".join(jobs) + "\n")
    rota("plan", "--table", TABLE, "--jobs", inputs["jobs"], "--cluster", inputs["cluster"], "--rounds", "1",
         "--round-length", str(ROUND_S), "--out", "schedule.json", cwd=d)  # fmt: skip
    rota("export", "ray", "schedule.json", "--out", "launch", "--grace", str(GRACE_S), cwd=d)
    plan = json.loads((d / "launch" / "ray_plan.json").read_text())
    planned = {j["job_id"] for g in plan["rounds"][0]["groups"] for j in g["jobs"]}
    assert "solo-b" in planned, "the failing job runs in round 0"
    run = drive(d / "launch" / "ray_plan.json", ray_cluster)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "round 0: failed: solo-b (see " in run.stderr
    (ran,) = json.loads((d / "launch" / "ray_state.json").read_text())["rounds"]
    states = {j["job_id"]: (j["state"], j["exit_codes"]) for j in ran["jobs"]}
    assert states.pop("solo-b") == ("FAILED", [3])
    assert all(state == "COMPLETED" for state, _ in states.values()), states


def test_next_round_loop(ray_cluster, inputs):
    """plan-next -> export ray -> driver -> progress folder -> plan-next, three rounds."""
    d, work = inputs["dir"], inputs["work"]
    rota("plan-next", "--state", "state.json", "--jobs", inputs["jobs"], "--table", TABLE, "--cluster",
         inputs["cluster"], "--round-length", str(ROUND_S), "--out", "round.json", cwd=d)  # fmt: skip
    last_done: dict[str, float] = {}
    for k in range(3):
        progress = d / f"progress-{k}"
        progress.mkdir()
        # a relative --progress-dir: the jobs run in the driver's folder, not in Ray's
        rota("export", "ray", "round.json", "--out", f"launch-{k}", "--grace", str(GRACE_S),
             "--progress-dir", progress.name, cwd=d)  # fmt: skip
        plan = json.loads((d / f"launch-{k}" / "ray_plan.json").read_text())
        (rnd,) = plan["rounds"]
        assert rnd["index"] == k
        run = drive(d / f"launch-{k}" / "ray_plan.json", ray_cluster)
        assert run.returncode == 0, run.stdout + run.stderr
        log = events(work)
        reported = check_round(rnd, plan, log, progress)
        for jid in reported:  # each start resumed from the job's last checkpoint
            resumed = {
                e["resumed"] for e in log if e["event"] == "start" and e["job_id"] == jid and e["round"] == str(k)
            }
            assert resumed == {last_done.get(jid, 0.0)}, (jid, resumed, last_done.get(jid))
        last_done.update(reported)
        out = rota("plan-next", "--state", "state.json", "--progress", progress, "--out", "round.json", cwd=d)
        # the new state's progress: what each job reported plus what the new round plans for it
        state = json.loads((d / "state.json").read_text())
        progress_now = {j["job_id"]: j["progress"] for j in state["jobs"]}
        planned = {}
        for a in json.loads((d / "round.json").read_text())["rounds"][0]["assignments"]:
            planned.update(a["planned_steps"])
        for jid, done in reported.items():
            assert f"{jid}: {int(done)} steps done" in out
            assert progress_now[jid] == int(done) + planned.get(jid, 0), (jid, progress_now[jid], done)
    assert any(len(g["nodes"]) == 2 for k in range(3) for g in _groups(d / f"launch-{k}")), "a gang ran"


def _groups(launch: Path) -> list[dict]:
    return [g for r in json.loads((launch / "ray_plan.json").read_text())["rounds"] for g in r["groups"]]


def test_unplaceable_group_fails_the_round_by_name(ray_cluster, inputs):
    d = inputs["dir"]
    rota("plan", "--table", TABLE, "--jobs", inputs["jobs"], "--cluster", inputs["cluster"], "--rounds", "1",
         "--round-length", str(ROUND_S), "--out", "schedule.json", cwd=d)  # fmt: skip
    rota("export", "ray", "schedule.json", "--out", "launch", "--grace", str(GRACE_S), cwd=d)
    plan_path = d / "launch" / "ray_plan.json"
    plan = json.loads(plan_path.read_text())
    group = plan["rounds"][0]["groups"][0]
    jid = group["jobs"][0]["job_id"]
    # more GPUs on its node than the node has: known resources, so only the timeout ends the wait
    group["bundles"][0]["GPU"] = 3
    plan_path.write_text(json.dumps(plan))
    run = drive(plan_path, ray_cluster, "--placement-timeout", "3", timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "not placed within 3 s" in run.stderr and group["name"] in run.stderr and jid in run.stderr
    # a node no raylet advertises: refused at once, naming the resource
    group["bundles"][0]["GPU"] = 1
    group["bundles"][0]["node:t4-9"] = group["bundles"][0].pop(f"node:{group['nodes'][0]}")
    plan_path.write_text(json.dumps(plan))
    run = drive(plan_path, ray_cluster, timeout=120)
    assert run.returncode == 2 and "node:t4-9" in run.stderr and group["name"] in run.stderr, run.stderr
    assert events(inputs["work"]) == [], "nothing ran"
    report = json.loads((d / "launch" / "ray_state.json").read_text())
    assert report["exit_status"] == 2 and group["name"] in report["rounds"][-1]["error"]
    assert {j["state"] for j in report["rounds"][-1]["jobs"]} == {"NOT_RUN"}
