"""Exports: each format's files are checked structurally, parsed back into rounds
that equal the schedule's and pass the validator; the launch wrapper and the
Ray runner keep the checkpoint contract (SIGTERM, then the round ends)."""

from __future__ import annotations

import ast
import copy
import csv
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
import yaml
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import user_errors
from planner.cli.export import export_command
from planner.errors import InputError
from planner.export import export_schedule, load_context
from planner.export.common import launch_script
from planner.export.kubernetes import check_manifest
from planner.export.ray_driver import run_commands
from planner.export.slurm import time_limit
from planner.formats.cluster import read_cluster
from planner.formats.jobs import read_jobs
from planner.formats.schedule import write_schedule
from planner.formats.schedule_check import check_schedule
from planner.formats.table import read_table
from planner.modes.next_round import make_policy_from, next_round
from planner.modes.plan import build_schedule
from planner.rounds.engine import EngineConfig, run_engine

TABLE = read_table(DATA / "throughputs.csv")
CLUSTER = read_cluster(DATA / "cluster.yaml")
JOBS = read_jobs(DATA / "jobs.csv", table=TABLE, cluster=CLUSTER)
INPUTS = {"table": DATA / "throughputs.csv", "jobs": DATA / "jobs.csv", "cluster": DATA / "cluster.yaml"}
COMMANDS = {j.job_id: j.command for j in JOBS}


@pytest.fixture(scope="module")
def packed_schedule(tmp_path_factory) -> Path:
    """Six rounds of packed LAS: co-located pairs and a 4-GPU gang over two t4 nodes."""
    result = run_engine(JOBS, TABLE, CLUSTER, make_policy_from("max_min_fairness_packed", {}))
    schedule = build_schedule(
        result, inputs=INPUTS, policy="max_min_fairness_packed", options={}, config=EngineConfig(), rounds=6
    )
    path = tmp_path_factory.mktemp("sched") / "schedule.json"
    write_schedule(schedule, path)
    return path


@pytest.fixture
def uneven_schedule(packed_schedule, tmp_path) -> Path:
    """One hand-made round: a 4-GPU gang split 2+1+1 over t4 nodes (Slurm: --gpus, its total)."""
    s = json.loads(packed_schedule.read_text())
    s["rounds"] = [
        {
            "index": 0,
            "start_s": 0.0,
            "end_s": 360.0,
            "assignments": [
                {
                    "jobs": ["resnet50-a"],
                    "worker_type": "t4",
                    "node": "t4-0+t4-1+t4-2",
                    "gpus": [
                        {"node": "t4-0", "gpu": 0},
                        {"node": "t4-0", "gpu": 1},
                        {"node": "t4-1", "gpu": 1},
                        {"node": "t4-2", "gpu": 0},
                    ],
                    "planned_steps": {"resnet50-a": 100},
                },
                {
                    "jobs": ["lm-a"],
                    "worker_type": "a100",
                    "node": "a100-node-0",
                    "gpus": [{"node": "a100-node-0", "gpu": 2}],
                    "planned_steps": {"lm-a": 50},
                },
            ],
        }
    ]
    path = tmp_path / "uneven.json"
    path.write_text(json.dumps(s))
    return path


def normalised(rounds) -> list:
    return [
        (
            r["index"],
            sorted(
                (
                    tuple(a["jobs"]),
                    a["worker_type"],
                    tuple(sorted((g["node"], g["gpu"]) for g in a["gpus"])),
                    tuple(sorted(a["planned_steps"].items())),
                )
                for a in r["assignments"]
            ),
        )
        for r in rounds
    ]


def assert_round_trip(schedule_path: Path, rebuilt_rounds: list) -> None:
    """The parsed-back rounds equal the schedule's and pass the validator."""
    schedule = json.loads(schedule_path.read_text())
    assert normalised(rebuilt_rounds) == normalised(schedule["rounds"])
    rebuilt = {**schedule, "rounds": rebuilt_rounds}
    types = {j.job_id: j.job_type for j in JOBS}
    assert check_schedule(rebuilt, CLUSTER, table=TABLE, job_types=types) == []


def _gpus(text: str) -> list[dict]:
    return [{"node": item.rsplit(":", 1)[0], "gpu": int(item.rsplit(":", 1)[1])} for item in text.split(",")]


def parse_launch(script: str) -> list[tuple[str, dict]]:
    """(command, env) of each process the launch wrapper starts."""
    out = []
    for line in script.splitlines():
        if line.startswith("( export "):
            tokens = shlex.split(line)
            env_tokens = tokens[2 : tokens.index("exec")]
            env = dict(t.rstrip(";").split("=", 1) for t in env_tokens)
            command = tokens[tokens.index("-c") + 1]
            assert command.startswith("trap : TERM; ")
            out.append((command[len("trap : TERM; ") :], env))
    return out


def assignment_from(processes) -> dict:
    env0 = processes[0][1]
    return {
        "jobs": [env["ROTA_JOB_ID"] for _, env in processes],
        "worker_type": env0["ROTA_WORKER_TYPE"],
        "gpus": _gpus(env0["ROTA_PLANNED_GPUS"]),
        "planned_steps": {env["ROTA_JOB_ID"]: int(env["ROTA_PLANNED_STEPS"]) for _, env in processes},
    }


def rounds_from(by_round: dict[int, list[dict]], schedule_path: Path) -> list[dict]:
    times = {r["index"]: r for r in json.loads(schedule_path.read_text())["rounds"]}
    return [
        {"index": i, "start_s": times[i]["start_s"], "end_s": times[i]["end_s"], "assignments": by_round[i]}
        for i in sorted(by_round)
    ]


# ----------------------------------------------------------------- Slurm


def sbatch_components(text: str) -> list[dict[str, str]]:
    components = [{}]
    for line in text.splitlines():
        if line == "#SBATCH hetjob":
            components.append({})
        elif line.startswith("#SBATCH --"):
            key, _, value = line[len("#SBATCH --") :].partition("=")
            components[-1][key] = value
    return components


def slurm_task(text: str) -> str:
    """The node task of a batch script: the shell word assigned to ROTA_TASK."""
    start = text.index("\nROTA_TASK=") + len("\nROTA_TASK=")
    lexer = shlex.shlex(text[start:], posix=True)
    lexer.whitespace_split = True
    return next(iter(lexer))


def test_slurm_scripts(packed_schedule, tmp_path):
    ctx = load_context(packed_schedule)
    files = export_schedule("slurm", ctx, tmp_path, partition="gpu", grace_s=90)
    schedule = json.loads(packed_schedule.read_text())
    assert (tmp_path / "driver.sh") in files and os.access(tmp_path / "driver.sh", os.X_OK)
    by_round: dict[int, list[dict]] = {}
    scripts = sorted(tmp_path.glob("round-*/*.sbatch"))
    assert len(scripts) == sum(len(r["assignments"]) for r in schedule["rounds"])
    for script in scripts:
        text = script.read_text()
        (component,) = sbatch_components(text)  # demo gangs split evenly: no heterogeneous jobs
        processes = parse_launch(slurm_task(text))
        a = assignment_from(processes)
        assert all("ROTA_GPUS" not in env for _, env in processes), "set from Slurm's allocation, not the plan"
        nodes = list(dict.fromkeys(g["node"] for g in a["gpus"]))
        per_node = len(a["gpus"]) // len(nodes)
        assert component["gres"] == f"gpu:{a['worker_type']}:{per_node}"
        assert component["nodelist"] == ",".join(nodes) and component["nodes"] == str(len(nodes))
        assert component["time"] == time_limit(schedule["round_s"]) == "00:07:00"
        assert component["signal"] == "B:USR1@90" and component["partition"] == "gpu"
        assert all(cmd == COMMANDS[env["ROTA_JOB_ID"]] for cmd, env in processes)
        by_round.setdefault(int(script.parent.name.split("-")[1]), []).append(a)
    assert_round_trip(packed_schedule, rounds_from(by_round, packed_schedule))
    assert any(len(a["jobs"]) == 2 for r in by_round.values() for a in r), "co-located pairs exported"
    for path in [tmp_path / "driver.sh", *scripts[:5]]:
        subprocess.run(["bash", "-n", str(path)], check=True)


@pytest.mark.parametrize("fmt", ["slurm", "kubernetes", "ray"])
@pytest.mark.parametrize(("mask", "plain", "script"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_exported_files_follow_the_umask(packed_schedule, tmp_path, fmt, mask, plain, script):
    """Job commands in manifests and batch scripts are readable by whom the umask allows, no more."""
    old = os.umask(mask)
    try:
        files = export_schedule(fmt, load_context(packed_schedule), tmp_path / "out")
    finally:
        os.umask(old)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in files}
    executable = {name for name, mode in modes.items() if mode & 0o100}
    assert executable, "each export has a driver to run"
    assert {modes[name] for name in executable} == {script}
    assert {mode for name, mode in modes.items() if name not in executable} == {plain}


def test_slurm_uneven_gang_asks_for_its_total(uneven_schedule, tmp_path):
    """Not a heterogeneous job (those start only in Slurm's backfill pass): the total, submitted last."""
    export_schedule("slurm", load_context(uneven_schedule), tmp_path)
    text = (tmp_path / "round-0000" / "resnet50-a.sbatch").read_text()
    (component,) = sbatch_components(text)
    assert (component["nodelist"], component["nodes"], component["gpus"]) == ("t4-0,t4-1,t4-2", "3", "t4:4")
    assert "gres" not in component and component["time"] == "00:07:00" and "job-name" in component
    plan = json.loads((tmp_path / "slurm_rounds.json").read_text())
    assert [s["script"] for s in plan["rounds"][0]["scripts"]][-1] == "round-0000/resnet50-a.sbatch"
    subprocess.run(["bash", "-n", str(tmp_path / "round-0000" / "resnet50-a.sbatch")], check=True)


def test_slurm_driver_submits_rounds_in_order(packed_schedule, tmp_path):
    out = tmp_path / "export"
    export_schedule("slurm", load_context(packed_schedule), out)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "submitted.txt"
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\necho "$2" >> {log}\necho $$\n')
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")  # every job already left the queue
    (bin_dir / "scancel").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho JobId=$4 JobState=COMPLETED ExitCode=0:0\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run([str(out / "driver.sh")], check=True, env=env, capture_output=True, timeout=60)
    submitted = log.read_text().split()
    rounds = [s.split("/")[0] for s in submitted]
    assert rounds == sorted(rounds) and len(set(rounds)) == 6
    subprocess.run([str(out / "driver.sh"), "round-0003"], check=True, env=env, capture_output=True, timeout=60)
    assert all(s.startswith("round-0003/") for s in log.read_text().split()[len(submitted) :])


# ----------------------------------------------------------------- the launch wrapper


@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
def test_launch_wrapper_forwards_sigterm_for_checkpoints(tmp_path, shell):
    job = (
        "import os, signal, sys, time, pathlib\n"
        "d = pathlib.Path(sys.argv[1])\n"
        "def stop(*_):\n"
        "    (d / (os.environ['ROTA_JOB_ID'] + '.ckpt')).write_text(os.environ['ROTA_PLANNED_STEPS'])\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "(d / (os.environ['ROTA_JOB_ID'] + '.started')).touch()\n"
        "time.sleep(30)\n"
    )
    (tmp_path / "job.py").write_text(job)
    command = f"{shlex.quote(sys.executable)} {tmp_path / 'job.py'} {tmp_path}"
    script = launch_script(
        [
            (command, {"ROTA_JOB_ID": "a", "ROTA_PLANNED_STEPS": "7"}),
            (command, {"ROTA_JOB_ID": "b", "ROTA_PLANNED_STEPS": "9"}),
        ]
    )
    # its own process group, as a batch script or a container's PID 1 has
    proc = subprocess.Popen([shell, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 20
    while not all((tmp_path / f"{j}.started").exists() for j in "ab"):
        assert time.monotonic() < deadline, "jobs did not start"
        time.sleep(0.05)
    proc.terminate()  # what Slurm's --signal / the kubelet send at the round's end
    assert proc.wait(timeout=20) == 0
    assert (tmp_path / "a.ckpt").read_text() == "7" and (tmp_path / "b.ckpt").read_text() == "9"


# A job that counts the SIGTERMs it gets: after the first it waits up to 3 s for another, then
# writes how many came. (Two that come within microseconds read as one: Python runs its handler
# once for both. Without the SLURM_STEP_ID rule most runs of the Slurm case count 2.)
COUNTING_JOB = """import os, pathlib, signal, sys, time
d = pathlib.Path(sys.argv[1])
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append(time.monotonic()))
(d / (os.environ["ROTA_JOB_ID"] + ".started")).touch()
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
while got and len(got) < 2 and time.monotonic() < got[0] + 3:
    time.sleep(0.05)
(d / (os.environ["ROTA_JOB_ID"] + ".signals")).write_text(str(len(got)))
"""


@pytest.mark.parametrize(
    ("slurm_step", "whole_group", "expected"),
    [
        (False, False, 1),  # a container's PID 1 or a batch shell: the wrapper alone is signalled
        (True, True, 1),  # a Slurm step: Slurm signals every process; the wrapper adds none
    ],
)
def test_launch_wrapper_sends_each_job_one_sigterm(tmp_path, slurm_step, whole_group, expected):
    (tmp_path / "job.py").write_text(COUNTING_JOB)
    command = f"{shlex.quote(sys.executable)} {tmp_path / 'job.py'} {tmp_path}"
    script = launch_script([(command, {"ROTA_JOB_ID": "a"}), (command, {"ROTA_JOB_ID": "b"})])
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    if slurm_step:
        env["SLURM_STEP_ID"] = "0"
    proc = subprocess.Popen(["/bin/sh", "-c", script], env=env, start_new_session=True)
    deadline = time.monotonic() + 20
    while not all((tmp_path / f"{j}.started").exists() for j in "ab"):
        assert time.monotonic() < deadline, "jobs did not start"
        time.sleep(0.05)
    if whole_group:
        os.killpg(proc.pid, signal.SIGTERM)  # what scancel --signal does to a step
    else:
        proc.terminate()
    assert proc.wait(timeout=30) == 0
    assert [(tmp_path / f"{j}.signals").read_text() for j in "ab"] == [str(expected)] * 2


# ----------------------------------------------------------------- Kubernetes


def load_manifests(folder: Path) -> list[tuple[Path, dict]]:
    out = []
    for path in sorted(folder.glob("round-*/*.yaml")):
        docs = list(yaml.safe_load_all(path.read_text()))
        assert len(docs) == 1
        out.append((path, docs[0]))
    return out


def pod_templates(doc: dict) -> list[dict]:
    if doc["kind"] == "JobSet":
        return [rj["template"]["spec"]["template"] for rj in doc["spec"]["replicatedJobs"]]
    if doc["apiVersion"].startswith("batch.volcano.sh"):
        return [t["template"] for t in doc["spec"]["tasks"]]
    return [doc["spec"]["template"]]


@pytest.mark.parametrize("gang", ["volcano", "kueue"])
def test_kubernetes_manifests(packed_schedule, tmp_path, gang):
    ctx = load_context(packed_schedule)
    export_schedule(
        "kubernetes",
        ctx,
        tmp_path,
        gang=gang,
        queue="team-a",
        namespace="ml",
        label_key="example.com/gpu",
        gpu_product=["v100=Tesla-V100-SXM2-16GB"],
    )
    by_round: dict[int, list[dict]] = {}
    kinds = set()
    for path, doc in load_manifests(tmp_path):
        assert check_manifest(doc) == [], (path, check_manifest(doc))
        kinds.add((doc["apiVersion"], doc["kind"]))
        meta = doc["metadata"]
        assert meta["namespace"] == "ml" and path.stem == meta["name"]
        pods = pod_templates(doc)
        if gang == "volcano":
            assert doc["spec"]["minAvailable"] == len(pods) and doc["spec"]["queue"] == "team-a"
            assert doc["spec"]["schedulerName"] == "volcano"
        else:
            assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" and doc["spec"]["suspend"] is True
        ann = meta["annotations"]
        a = {
            "jobs": ann["rota/jobs"].split(","),
            "worker_type": ann["rota/worker-type"],
            "gpus": _gpus(ann["rota/gpus"]),
            "planned_steps": json.loads(ann["rota/planned-steps"]),
        }
        nodes = list(dict.fromkeys(g["node"] for g in a["gpus"]))
        assert len(pods) == len(nodes)
        for pod, node in zip(pods, nodes):
            spec = pod["spec"]
            product = "Tesla-V100-SXM2-16GB" if a["worker_type"] == "v100" else a["worker_type"]
            assert spec["nodeSelector"] == {"example.com/gpu": product, "kubernetes.io/hostname": node}
            (container,) = spec["containers"]
            assert container["resources"]["limits"]["nvidia.com/gpu"] == sum(g["node"] == node for g in a["gpus"])
            assert spec["activeDeadlineSeconds"] + spec["terminationGracePeriodSeconds"] == 360
            processes = parse_launch(container["command"][2])
            assert [env["ROTA_JOB_ID"] for _, env in processes] == a["jobs"]
            assert all(cmd == COMMANDS[env["ROTA_JOB_ID"]] for cmd, env in processes)
        by_round.setdefault(int(meta["labels"]["rota/round"]), []).append(a)
    assert_round_trip(packed_schedule, rounds_from(by_round, packed_schedule))
    if gang == "kueue":  # the 4-GPU gang on two t4 nodes is a JobSet, the rest batch/v1 Jobs
        assert kinds == {("batch/v1", "Job"), ("jobset.x-k8s.io/v1alpha2", "JobSet")}
    subprocess.run(["bash", "-n", str(tmp_path / "driver.sh")], check=True)


def test_kubernetes_uneven_gang_and_unpinned(uneven_schedule, tmp_path):
    export_schedule("kubernetes", load_context(uneven_schedule), tmp_path, pin_nodes=False)
    docs = {doc["metadata"]["annotations"]["rota/jobs"]: doc for _, doc in load_manifests(tmp_path)}
    tasks = docs["resnet50-a"]["spec"]["tasks"]
    assert [t["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for t in tasks] == [2, 1, 1]
    assert all("kubernetes.io/hostname" not in t["template"]["spec"]["nodeSelector"] for t in tasks)


def test_manifest_checker_catches_mistakes(packed_schedule, tmp_path):
    export_schedule("kubernetes", load_context(packed_schedule), tmp_path, gang="kueue")
    _, doc = load_manifests(tmp_path)[0]
    assert check_manifest(doc) == []
    cases = {
        "unknown field": lambda d: d["spec"].update(paralelism=1),
        "is not valid": lambda d: d["metadata"].update(name="Bad_Name"),
        "required field missing": lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("image"),
        "must be one of": lambda d: d["spec"]["template"]["spec"].update(restartPolicy="Always"),
        "invalid quantity": lambda d: d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(
            {"nvidia.com/gpu": "two"}
        ),
        "invalid label value": lambda d: d["metadata"]["labels"].update(x="not ok!"),
        "expected an integer": lambda d: d["spec"].update(backoffLimit="0"),
        "unsupported apiVersion": lambda d: d.update(apiVersion="batch/v2"),
    }
    for expected, mutate in cases.items():
        broken = copy.deepcopy(doc)
        mutate(broken)
        problems = check_manifest(broken)
        assert any(expected in p for p in problems), (expected, problems)
    volcano = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "x"},
        "spec": {"minAvailable": 3, "tasks": [{"name": "t", "replicas": 1, "template": doc["spec"]["template"]}]},
    }
    assert any("more than the 1 pods" in p for p in check_manifest(volcano))


# ----------------------------------------------------------------- Ray


def test_ray_plan(packed_schedule, tmp_path):
    export_schedule("ray", load_context(packed_schedule), tmp_path, accelerator_type=["t4=T4", "a100=A100-80G"])
    plan = json.loads((tmp_path / "ray_plan.json").read_text())
    assert plan["format"] == "rota.ray-plan/v1" and plan["round_s"] == 360 and plan["grace_s"] == 60
    by_round: dict[int, list[dict]] = {}
    for rnd in plan["rounds"]:
        for g in rnd["groups"]:
            acc = {"t4": "T4", "a100": "A100-80G", "v100": "V100"}[g["worker_type"]]
            assert g["accelerator_type"] == acc
            assert all(b[f"accelerator_type:{acc}"] > 0 for b in g["bundles"])
            assert g["strategy"] == ("STRICT_PACK" if len(g["bundles"]) == 1 else "STRICT_SPREAD")
            env0 = g["jobs"][0]["env"]
            assert sum(b["GPU"] for b in g["bundles"]) == int(env0["ROTA_NUM_GPUS"])
            assert all(j["command"] == COMMANDS[j["job_id"]] for j in g["jobs"])
            by_round.setdefault(rnd["index"], []).append(
                {
                    "jobs": [j["job_id"] for j in g["jobs"]],
                    "worker_type": g["worker_type"],
                    "gpus": _gpus(env0["ROTA_GPUS"]),
                    "planned_steps": {j["job_id"]: j["planned_steps"] for j in g["jobs"]},
                }
            )
    assert any(len(g["bundles"]) == 2 for r in plan["rounds"] for g in r["groups"]), "a two-node gang"
    assert_round_trip(packed_schedule, rounds_from(by_round, packed_schedule))
    ast.parse((tmp_path / "ray_driver.py").read_text())


def test_ray_runner_preempts_at_round_end(tmp_path):
    job = (
        "import signal, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path(sys.argv[1]).write_text('ckpt'), sys.exit(0)))\n"
        "time.sleep(30)\n"
    )
    (tmp_path / "job.py").write_text(job)
    ignore_term = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"
    stubborn = f"{shlex.quote(sys.executable)} -c {shlex.quote(ignore_term)}"
    commands = [
        {"command": f"{shlex.quote(sys.executable)} {tmp_path / 'job.py'} {tmp_path / 'ckpt'}", "env": {}},
        {"command": stubborn, "env": {}},
        {"command": "exit 3", "env": {}},
    ]
    started = time.monotonic()
    codes = run_commands(commands, round_s=1.2, grace_s=0.6, poll_s=0.05)
    assert time.monotonic() - started < 6
    assert codes[0] == 0 and (tmp_path / "ckpt").read_text() == "ckpt"  # checkpointed on SIGTERM
    assert codes[1] != 0 and codes[2] == 3  # killed at the end; own failure


# ----------------------------------------------------------------- CSV


def test_flat_csv(packed_schedule, tmp_path):
    export_schedule("csv", load_context(packed_schedule), tmp_path)
    rows = list(csv.DictReader((tmp_path / "schedule.csv").open()))
    grouped: dict[tuple[int, str], dict] = {}
    for row in rows:
        assert row["command"] == COMMANDS[row["job_id"]] and row["round_s"] == "360"
        key = (int(row["round"]), row["job_id"])
        a = grouped.setdefault(
            key,
            {
                "jobs": sorted([row["job_id"], *filter(None, row["co_located_with"].split(";"))]),
                "worker_type": row["worker_type"],
                "gpus": [],
                "planned_steps": {},
            },
        )
        a["gpus"].append({"node": row["node"], "gpu": int(row["gpu"])})
        a["planned_steps"][row["job_id"]] = int(row["planned_steps"])
    merged: dict[tuple[int, tuple], dict] = {}
    for (r, _), a in grouped.items():  # members of a pair: one assignment
        m = merged.setdefault((r, tuple(a["jobs"])), {**a, "planned_steps": {}})
        m["planned_steps"].update(a["planned_steps"])
    by_round: dict[int, list[dict]] = {}
    for (r, _), a in merged.items():
        by_round.setdefault(r, []).append(a)
    schedule = json.loads(packed_schedule.read_text())
    for rnd in schedule["rounds"]:  # pairs are listed in placement order in the schedule
        for a in rnd["assignments"]:
            a["jobs"] = sorted(a["jobs"])
    p = tmp_path / "sorted.json"
    p.write_text(json.dumps(schedule))
    assert_round_trip(p, rounds_from(by_round, p))


# ----------------------------------------------------------------- commands and errors


def test_commands_from_next_round_schedule_without_job_list(tmp_path):
    step = next_round(
        TABLE,
        CLUSTER,
        jobs=JOBS,
        rounds=2,
        inputs={"table": DATA / "throughputs.csv", "cluster": DATA / "cluster.yaml"},
    )
    path = tmp_path / "next.json"
    write_schedule(step.schedule, path)
    ctx = load_context(path)
    assert ctx.commands == {j: COMMANDS[j] for j in ctx.commands} and ctx.commands
    export_schedule("csv", ctx, tmp_path / "csv")
    assert (tmp_path / "csv" / "schedule.csv").exists()


def test_missing_command_column(packed_schedule, tmp_path):
    jobs = tmp_path / "jobs.csv"
    text = (DATA / "jobs.csv").read_text().splitlines()
    jobs.write_text("\n".join(line.rsplit(",", 1)[0] for line in text) + "\n")  # drop the command column
    # a schedule that carries no commands either (rota plan copies them from the job list)
    schedule = json.loads(packed_schedule.read_text())
    for info in schedule["jobs"].values():
        info.pop("command", None)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(schedule))
    with pytest.raises(InputError, match=r"jobs.csv: row \d+: field 'command': no command for job"):
        load_context(bare, jobs=jobs)
    ctx = load_context(bare, jobs=jobs, default_command="python train.py")
    assert set(ctx.commands.values()) == {"python train.py"}


def _app():
    app = typer.Typer()
    app.command("export")(user_errors(export_command))

    @app.command("noop")
    def noop():
        pass

    return app


@pytest.mark.parametrize("fmt", ["slurm", "k8s", "ray", "csv"])
def test_export_command(packed_schedule, tmp_path, fmt):
    result = CliRunner().invoke(_app(), ["export", fmt, str(packed_schedule), "--out", str(tmp_path / fmt), "--json"])
    assert result.exit_code == 0, result.output
    files = json.loads(result.output)["files"]
    assert files and all(Path(f).exists() for f in files)


def test_export_refuses_invalid_schedule_and_unknown_format(packed_schedule, tmp_path):
    s = json.loads(packed_schedule.read_text())
    s["rounds"][0]["assignments"][0]["gpus"] = s["rounds"][0]["assignments"][1]["gpus"]
    s["rounds"][0]["assignments"][0]["node"] = s["rounds"][0]["assignments"][1]["node"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(s))
    runner = CliRunner()
    result = runner.invoke(_app(), ["export", "slurm", str(bad), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "invalid schedule" in result.output
    assert not (tmp_path / "x").exists()
    result = runner.invoke(_app(), ["export", "lsf", str(packed_schedule), "--out", str(tmp_path / "y")])
    assert result.exit_code == 2 and "unknown export format 'lsf'" in result.output


@pytest.mark.parametrize("fmt", ["slurm", "k8s", "ray"])
@pytest.mark.parametrize("grace", ["-5", "0", "nan", "inf"])
def test_export_refuses_a_grace_that_is_not_a_positive_number(packed_schedule, tmp_path, fmt, grace):
    out = tmp_path / "out"
    result = CliRunner().invoke(_app(), ["export", fmt, str(packed_schedule), "--out", str(out), "--grace", grace])
    assert result.exit_code == 2, result.output
    assert "field '--grace': expected a positive number of seconds" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_export_cuts_a_grace_longer_than_half_the_round_and_says_so(packed_schedule, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(_app(), ["export", "slurm", str(packed_schedule), "--out", str(out), "--grace", "1000"])
    assert result.exit_code == 0, result.output
    assert "warning: --grace 1000 s is more than half the 360 s round: 180 s used" in result.output
    script = next(out.glob("round-*/*.sbatch")).read_text()
    assert "--signal=B:USR1@180" in script and "ROTA_GRACE_S=180" in script


@pytest.mark.parametrize(
    ("fmt", "option", "value", "message"),
    [
        ("k8s", "--gpu-resource", "x y", "field '--gpu-resource': 'x y' is not a valid resource name"),
        ("k8s", "--image", "img\nfoo: bar", "field '--image': 'img\\nfoo: bar' is not an image reference"),
        ("k8s", "--image", "", "field '--image': '' is not an image reference"),
    ],
)
def test_export_names_the_option_a_bad_value_came_from(packed_schedule, tmp_path, fmt, option, value, message):
    out = tmp_path / "out"
    result = CliRunner().invoke(_app(), ["export", fmt, str(packed_schedule), "--out", str(out), option, value])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["slurm", "csv"])
def test_export_into_an_existing_file_is_refused_and_the_file_kept(packed_schedule, tmp_path, fmt):
    target = tmp_path / "schedule-copy.json"
    target.write_text("keep me")
    result = CliRunner().invoke(_app(), ["export", fmt, str(packed_schedule), "--out", str(target)])
    assert result.exit_code == 2 and "exists and is not a folder" in result.output, result.output
    assert target.read_text() == "keep me"


def test_export_of_a_schedule_running_a_job_no_list_knows_says_so(packed_schedule, tmp_path):
    schedule = json.loads(packed_schedule.read_text())
    schedule["rounds"][0]["assignments"][0]["jobs"] = ["../../x"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(schedule))
    result = CliRunner().invoke(_app(), ["export", "slurm", str(bad), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "field 'job_id': the schedule runs job '../../x', which is not in the job list" in result.output
    assert not (tmp_path / "out").exists()


def test_export_over_an_earlier_one_names_the_round_folders_it_left(packed_schedule, tmp_path):
    out = tmp_path / "out"
    export_schedule("slurm", load_context(packed_schedule), out)
    stale = out / "round-9999"
    stale.mkdir()
    (stale / "old.sbatch").write_text("#!/bin/sh\n")
    context = load_context(packed_schedule)
    export_schedule("slurm", context, out)
    assert (stale / "old.sbatch").exists(), "files rota did not just write are never deleted"
    assert [n for n in context.notes if "1 round folder(s) from an earlier export remain" in n and "round-9999" in n]
    fresh = load_context(packed_schedule)
    export_schedule("slurm", fresh, tmp_path / "empty")
    assert not [n for n in fresh.notes if "earlier export" in n]


def test_export_names_stray_files_left_inside_its_round_folders(packed_schedule, tmp_path):
    """Kubernetes's driver applies whole round folders: an old manifest there would run again."""
    out = tmp_path / "out"
    export_schedule("kubernetes", load_context(packed_schedule), out)
    stray = out / "round-0000" / "rota-r0000-old-job.yaml"
    stray.write_text("kind: Job\n")
    result = CliRunner().invoke(_app(), ["export", "k8s", str(packed_schedule), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    warnings = json.loads(result.output)["warnings"]
    assert [w for w in warnings if "1 file(s) from an earlier export" in w and "rota-r0000-old-job.yaml" in w]
    assert stray.exists()
