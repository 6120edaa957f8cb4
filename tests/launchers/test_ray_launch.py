"""rota's Ray export run for real on a local CPU-only Ray cluster (tests/launchers/ray_cluster.py).

The job command is tests/launchers/fake_train.py, which logs where, when and with what it ran. Checked:
every job runs on its planned nodes and worker type, once per node with the gang variables and ROTA_GPUS
naming the GPUs Ray gave it, sees SIGTERM at the round's start (the driver's, not the job's) plus
round_s - grace_s, checkpoints and resumes, and the progress it reports is what the next planning call
reads back; a group that cannot be placed is NOT_RUN and named, the others run. The same through the
`rota run` adapter (planner/launch/ray.py), whose clock starts at the loop's round start, and its cancel.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.export import load_context
from planner.formats.cluster import read_cluster
from planner.launch.adapter import JobState, NodeState
from planner.launch.ray import RayLauncher
from tests.launchers.ray_cluster import FakeNode, LocalRayCluster, processes_with_env, running_cluster

ROOT = Path(__file__).resolve().parents[2]
FAKE_TRAIN = Path(__file__).with_name("fake_train.py")
TABLE = ROOT / "data" / "throughputs.csv"
ROUND_S = 24
GRACE_S = 6
CLOCK_SLACK_S = 5  # a loaded 2-core machine: a signal within this of its time

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


@pytest.fixture(scope="module")
def ray_client(ray_cluster):
    """This process as a Ray driver of the module's cluster (the adapter tests), gone before it stops."""
    import ray

    ray.init(address=ray_cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


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


def check_gpus(env: dict[str, str], node: str, planned: str) -> None:
    """ROTA_GPUS: the GPUs Ray gave this process's task (CUDA_VISIBLE_DEVICES), on its planned node;
    ROTA_PLANNED_GPUS: the plan's."""
    got = ",".join(f"{node}:{g}" for g in env["CUDA_VISIBLE_DEVICES"].split(","))
    assert env["ROTA_GPUS"] == got, (env["ROTA_JOB_ID"], env["ROTA_GPUS"], got)
    assert env["ROTA_PLANNED_GPUS"] == planned


def check_sigterm(jid: str, signal_time: float, round_start: float, plan: dict) -> None:
    """SIGTERM at the round's start + round_s - grace_s (the round's clock, not the job's)."""
    late = signal_time - (round_start + plan["round_s"] - plan["grace_s"])
    assert abs(late) <= CLOCK_SLACK_S, f"{jid}: SIGTERM {late:+.1f} s off the round's clock"


def round_started(launch: Path, index: int) -> float:
    """When the driver started round `index` (its state report)."""
    (ran,) = [r for r in json.loads((launch / "ray_state.json").read_text())["rounds"] if r["index"] == index]
    return ran["started_at"]


def check_round(
    rnd: dict, plan: dict, log: list[dict], progress_dir: Path | None, round_start: float
) -> dict[str, float]:
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
                check_gpus(env, ran_on, job["env"]["ROTA_PLANNED_GPUS"])
                assert env["ROTA_NUM_NODES"] == str(n) and env["ROTA_MASTER_PORT"] == str(expected_port(jid))
                signals = [e for e in mine if e["event"] == "signal" and e["pid"] == s["pid"]]
                assert signals and signals[0]["signal"] == "SIGTERM", (jid, signals)
                check_sigterm(jid, signals[0]["time"], round_start, plan)
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
    reported = check_round(rnd, plan, events(inputs["work"]), None, round_started(d / "launch", 1))
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
    assert "round 0: not completed: solo-b FAILED (see " in run.stderr
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
        reported = check_round(rnd, plan, log, progress, round_started(d / f"launch-{k}", k))
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


def plan_rounds(inputs: dict[str, Path], rounds: int) -> None:
    rota("plan", "--table", TABLE, "--jobs", inputs["jobs"], "--cluster", inputs["cluster"], "--rounds", str(rounds),
         "--round-length", str(ROUND_S), "--out", "schedule.json", cwd=inputs["dir"])  # fmt: skip


def spoil(rnd: dict) -> tuple[dict, dict]:
    """Two one-node groups of `rnd` made unplaceable: the first asks for 3 GPUs of a 2-GPU node (a
    resource the cluster has: only the placement timeout ends its wait), the second for a node no
    raylet advertises (refused at once). Returns them."""
    single = [g for g in rnd["groups"] if len(g["nodes"]) == 1]
    assert len(single) >= 2 and len(rnd["groups"]) >= 3, "two one-node groups and others besides them"
    waits, unknown = single[0], single[1]
    waits["bundles"][0]["GPU"] = 3
    unknown["bundles"][0]["node:t4-9"] = unknown["bundles"][0].pop(f"node:{unknown['nodes'][0]}")
    return waits, unknown


def test_an_unplaceable_group_costs_only_its_own_jobs(ray_cluster, inputs):
    d = inputs["dir"]
    plan_rounds(inputs, 1)
    rota("export", "ray", "schedule.json", "--out", "launch", "--grace", str(GRACE_S), cwd=d)
    plan_path = d / "launch" / "ray_plan.json"
    plan = json.loads(plan_path.read_text())
    (rnd,) = plan["rounds"]
    waits, unknown = spoil(rnd)
    plan_path.write_text(json.dumps(plan))
    run = drive(plan_path, ray_cluster, "--placement-timeout", "3", timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "not placed within 3 s" in run.stderr and waits["name"] in run.stderr, run.stderr
    assert "node:t4-9" in run.stderr and unknown["name"] in run.stderr, run.stderr
    report = json.loads((d / "launch" / "ray_state.json").read_text())
    (ran,) = report["rounds"]
    assert report["exit_status"] == 2 and waits["name"] in ran["error"] and unknown["name"] in ran["error"]
    not_run = {j["job_id"] for g in (waits, unknown) for j in g["jobs"]}
    states = {j["job_id"]: j["state"] for j in ran["jobs"]}
    assert {jid for jid, state in states.items() if state == "NOT_RUN"} == not_run, states
    assert {state for jid, state in states.items() if jid not in not_run} == {"COMPLETED"}, states
    started = {e["job_id"] for e in events(inputs["work"]) if e["event"] == "start"}
    assert started == set(states) - not_run, "the other groups ran, the two did not"


def test_the_adapter_runs_a_round_on_the_loops_clock(ray_cluster, ray_client, inputs, monkeypatch):
    """rota run's path: cluster_state, prepare (the exporter's plan), launch with the loop's round start
    (8 s before the launch: the round's clock counts from it), wait, collect; one group waits for 3
    GPUs of a 2-GPU node, one for a node that does not exist: NOT_RUN, the others COMPLETED."""
    d = inputs["dir"]
    monkeypatch.chdir(d)  # rota run's jobs run where rota runs: their logs/ goes there
    plan_rounds(inputs, 2)
    spec = read_cluster(inputs["cluster"])
    launcher = RayLauncher(ray_cluster.address, placement_timeout_s=3, grace_s=GRACE_S)
    state = launcher.cluster_state(spec)
    assert state.nodes == {n.name: NodeState(n.name, usable=True, gpus=n.gpus) for n in NODES}
    prepared = launcher.prepare(load_context(d / "schedule.json"), d / "launch", {"round": 1})
    assert (d / "launch" / "ray_driver.py").exists() and prepared.round["index"] == 1
    waits, unknown = spoil(prepared.round)
    round_start = time.time() - 8
    handle = launcher.launch(prepared, round_start)
    while not launcher.wait(handle, time.time() + 1):
        assert time.time() < round_start + ROUND_S + 30, "the round ends by its deadline"
    result = launcher.collect(handle)
    assert result.index == 1 and result.error is None and result.started_at == round_start
    not_run = {j["job_id"] for g in (waits, unknown) for j in g["jobs"]}
    assert {jid: r.state for jid, r in result.jobs.items() if jid in not_run} == dict.fromkeys(
        not_run, JobState.NOT_RUN
    )
    ran = {jid: r for jid, r in result.jobs.items() if jid not in not_run}
    assert ran and all(r.state == JobState.COMPLETED and r.exit_code == 0 for r in ran.values()), result.jobs
    assert "not placed within 3 s" in result.jobs[waits["jobs"][0]["job_id"]].detail
    assert "node:t4-9" in result.jobs[unknown["jobs"][0]["job_id"]].detail
    log = events(inputs["work"])
    assert {e["job_id"] for e in log if e["event"] == "start"} == set(ran)
    by_job = {j["job_id"]: (g, j) for g in prepared.round["groups"] for j in g["jobs"]}
    for e in log:
        group, job = by_job[e["job_id"]]
        if e["event"] == "start":
            rank = int(e["env"]["ROTA_NODE_RANK"])
            check_gpus(e["env"], group["nodes"][rank], job["env"]["ROTA_PLANNED_GPUS"])
        elif e["event"] == "signal":
            assert e["signal"] == "SIGTERM"
            check_sigterm(e["job_id"], e["time"], round_start, prepared.plan)
    assert len([e for e in log if e["event"] == "signal"]) == len([e for e in log if e["event"] == "start"])


def test_the_adapter_cancels_a_round(ray_cluster, ray_client, inputs, monkeypatch):
    """cancel(): every started job's processes are gone within seconds, its state CANCELLED."""
    d, work = inputs["dir"], inputs["work"]
    monkeypatch.chdir(d)  # the jobs' logs/ goes where rota runs
    plan_rounds(inputs, 1)
    launcher = RayLauncher(ray_cluster.address, grace_s=GRACE_S)
    prepared = launcher.prepare(load_context(d / "schedule.json"), d / "launch", {})
    jobs = {j["job_id"] for g in prepared.round["groups"] for j in g["jobs"]}
    handle = launcher.launch(prepared, time.time())
    while {e["job_id"] for e in events(work) if e["event"] == "start"} != jobs:
        assert not launcher.wait(handle, time.time() + 0.5), "still running"
    assert processes_with_env("FAKE_TRAIN_DIR", str(work))
    cancelled = time.time()
    launcher.cancel(handle)
    while processes_with_env("FAKE_TRAIN_DIR", str(work)) and time.time() < cancelled + 30:
        time.sleep(0.2)
    gone = time.time() - cancelled
    assert gone <= 8, f"the jobs lived {gone:.1f} s after cancel"
    result = launcher.collect(handle)
    assert {r.state for r in result.jobs.values()} == {JobState.CANCELLED}, result.jobs
