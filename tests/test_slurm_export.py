"""The Slurm export without a Slurm: --time, the gang variables, a batch script run as a plain
shell script, and the driver's exit status and clean-up against stand-in sbatch/squeue/scancel/
scontrol. (tests/launchers/ runs the same files on a real Slurm.)"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from planner.export import export_schedule, load_context
from planner.export.common import GANG_VARIABLES, gang_env, master_port
from planner.export.slurm import time_limit
from planner.formats.schedule import SCHEDULE_FORMAT


@pytest.mark.parametrize(
    ("round_s", "limit"),
    [(24, "00:02:00"), (60, "00:02:00"), (61, "00:03:00"), (90, "00:03:00"), (360, "00:07:00"), (86400, "1-00:01:00")],
)
def test_time_limit_is_whole_minutes_with_one_to_spare(round_s, limit):
    assert time_limit(round_s) == limit


def test_master_port_is_29500_plus_a_hash_of_the_job_id():
    for job in ("a", "resnet50-a", "ünïcødé", "x" * 300):
        expected = 29500 + int(hashlib.sha256(job.encode()).hexdigest()[:8], 16) % 1000
        assert master_port(job) == expected
    assert GANG_VARIABLES == ("ROTA_NUM_NODES", "ROTA_NODE_RANK", "ROTA_MASTER_ADDR", "ROTA_MASTER_PORT")
    assert gang_env(num_nodes=2, node_rank=1, master_addr="h0", job_id="a") == {
        "ROTA_NUM_NODES": "2",
        "ROTA_NODE_RANK": "1",
        "ROTA_MASTER_ADDR": "h0",
        "ROTA_MASTER_PORT": str(master_port("a")),
    }


def _schedule(folder: Path, commands: dict[str, str]) -> Path:
    cluster = {"worker_types": {"t4": {"gpus": 4, "gpus_per_node": 2, "nodes": ["n0", "n1"]}}}
    (folder / "cluster.json").write_text(json.dumps(cluster))
    gpus = {"gang": [("n0", 0), ("n0", 1), ("n1", 1)], "solo": [("n1", 0)]}
    schedule = {
        "format": SCHEDULE_FORMAT,
        "policy": {"name": "fifo", "options": {}},
        "round_s": 90,
        "inputs": {"cluster": {"path": "cluster.json", "digest": None}},
        "rounds": [
            {
                "index": 0,
                "start_s": 0,
                "end_s": 90,
                "assignments": [
                    {
                        "jobs": [job],
                        "worker_type": "t4",
                        "gpus": [{"node": n, "gpu": g} for n, g in gpus[job]],
                        "planned_steps": {job: 10},
                    }
                    for job in commands
                ],
            }
        ],
        "jobs": {
            job: {"total_steps": 100, "arrival_s": 0, "scale_factor": len(gpus[job]), "command": command}
            for job, command in commands.items()
        },
    }
    path = folder / "schedule.json"
    path.write_text(json.dumps(schedule))
    return path


def test_batch_script_outside_slurm_runs_once_as_rank_0(tmp_path):
    """Run by hand (no SLURM_JOB_ID) a gang's script runs its command once, with the gang
    variables of a one-node run and the plan's GPUs; under Slurm srun runs it once per node."""
    dump = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))' > env.json"
    export_schedule("slurm", load_context(_schedule(tmp_path, {"gang": dump, "solo": "true"})), tmp_path / "out")
    script = (tmp_path / "out" / "round-0000" / "gang.sbatch").read_text()
    assert "hetjob" not in script and "#SBATCH --gpus=t4:3" in script
    assert 'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1' in script
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    subprocess.run(["bash", str(tmp_path / "out" / "round-0000" / "gang.sbatch")], cwd=tmp_path, env=env, check=True)
    seen = json.loads((tmp_path / "env.json").read_text())
    assert seen["ROTA_NUM_NODES"] == "2" and seen["ROTA_NODE_RANK"] == "0"
    assert seen["ROTA_MASTER_ADDR"] == socket.gethostname()
    assert seen["ROTA_MASTER_PORT"] == str(master_port("gang"))
    assert seen["ROTA_GPUS"] == seen["ROTA_PLANNED_GPUS"] == "n0:0,n0:1,n1:1"


def _stub_tools(folder: Path, *, fail_script: str = "", state: str = "COMPLETED", code: str = "0:0") -> dict:
    """sbatch/squeue/scancel/scontrol stand-ins that log their calls; every job leaves the queue at once."""
    folder.mkdir()
    calls = folder / "calls.txt"
    tools = {
        "sbatch": f'echo "sbatch $*" >> {calls}; case "$2" in *{fail_script or "NONE"}*) exit 1;; esac; '
        f'n=$(wc -l < {calls}); echo "$((100 + n))"',
        "squeue": f'echo "squeue $*" >> {calls}',
        "scancel": f'echo "scancel $*" >> {calls}',
        "scontrol": f'echo "JobId=$4 JobState={state} ExitCode={code}"',
    }
    for name, body in tools.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def _driver(tmp_path: Path, env: dict) -> tuple[int, dict, list[str]]:
    out = tmp_path / "out"
    export_schedule("slurm", load_context(_schedule(tmp_path, {"solo": "true", "gang": "true"})), out)
    done = subprocess.run([str(out / "driver.sh")], env=env, capture_output=True, text=True, timeout=60)
    report = json.loads((out / "logs" / "slurm-state.json").read_text())
    calls = (tmp_path / "bin" / "calls.txt").read_text().splitlines()
    return done.returncode, report, calls


def test_driver_exit_status_0_only_when_every_job_completed(tmp_path):
    status, report, calls = _driver(tmp_path, _stub_tools(tmp_path / "bin"))
    assert status == 0 and report["exit_status"] == 0
    jobs = report["rounds"][0]["jobs"]
    assert [(j["job_id"], j["state"], j["exit_code"]) for j in jobs] == [
        ("solo", "COMPLETED", 0),
        ("gang", "COMPLETED", 0),
    ]
    assert [c.split()[-1] for c in calls if c.startswith("sbatch")] == [
        "round-0000/solo.sbatch",
        "round-0000/gang.sbatch",  # the uneven gang goes last
    ]


def test_driver_exits_1_when_every_job_failed(tmp_path):
    status, report, _ = _driver(tmp_path, _stub_tools(tmp_path / "bin", state="FAILED", code="3:0"))
    assert status == 1 and report["exit_status"] == 1
    assert {j["state"] for j in report["rounds"][0]["jobs"]} == {"FAILED"}


def test_driver_cancels_what_it_submitted_when_sbatch_fails(tmp_path):
    status, report, calls = _driver(tmp_path, _stub_tools(tmp_path / "bin", fail_script="gang"))
    assert status == 2 and report["exit_status"] == 2
    assert "scancel 101" in calls  # the id sbatch gave the first script
    assert [j["job_id"] for j in report["rounds"][0]["jobs"]] == ["solo"]


def test_driver_refuses_a_round_it_does_not_have(tmp_path):
    out = tmp_path / "out"
    export_schedule("slurm", load_context(_schedule(tmp_path, {"solo": "true"})), out)
    env = _stub_tools(tmp_path / "bin")
    done = subprocess.run([str(out / "driver.sh"), "round-0009"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no such round: round-0009 (this export has round-0000)" in done.stderr
    assert not (tmp_path / "bin" / "calls.txt").exists(), "nothing submitted"
