"""Helpers of the Slurm integration tests: hand-made schedules of fake_train jobs on the demo
cluster, running an export's driver, and reading back what the jobs logged."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from conftest import DATA

from planner.formats.schedule import SCHEDULE_FORMAT

FAKE_TRAIN = Path(__file__).with_name("fake_train.py")
CLUSTER = DATA / "cluster.yaml"


def fake_command(folder: Path, *flags: str) -> str:
    """The fake trainer as a job command, logging under `folder`."""
    args = " ".join(shlex.quote(f) for f in flags)
    program = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_TRAIN))}"
    return f"FAKE_TRAIN_DIR={shlex.quote(str(folder))} {program} {args}".rstrip()


@dataclass
class Placement:
    jobs: list[str]
    worker_type: str
    gpus: list[tuple[str, int]]
    steps: int = 100


def write_schedule(path: Path, round_s: float, placements: list[Placement], commands: dict[str, str]) -> Path:
    """A one-round rota.schedule/v1 on data/cluster.yaml (no table: pairs and rates are not checked)."""
    jobs = {}
    for p in placements:
        for jid in p.jobs:
            scale = len(p.gpus) if len(p.jobs) == 1 else 1
            jobs[jid] = {"total_steps": 100000, "arrival_s": 0, "scale_factor": scale, "command": commands[jid]}
    schedule = {
        "format": SCHEDULE_FORMAT,
        "policy": {"name": "hand-made", "options": {}},
        "round_s": round_s,
        "inputs": {"cluster": {"path": str(CLUSTER), "digest": None}},
        "rounds": [
            {
                "index": 0,
                "start_s": 0,
                "end_s": round_s,
                "assignments": [
                    {
                        "jobs": p.jobs,
                        "worker_type": p.worker_type,
                        "gpus": [{"node": n, "gpu": g} for n, g in p.gpus],
                        "planned_steps": {j: p.steps for j in p.jobs},
                    }
                    for p in placements
                ],
            }
        ],
        "jobs": jobs,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schedule), encoding="utf-8")
    return path


@dataclass
class DriverRun:
    returncode: int
    output: str
    seconds: float
    report: dict | None


def run_driver(export: Path, env: dict[str, str], *args: str, timeout_s: float = 240) -> DriverRun:
    """Run driver.sh to its end; its output, duration and state report."""
    plan = json.loads((export / "slurm_rounds.json").read_text())
    report = Path(env.get("STATE_FILE") or plan["state_file"])
    report = report if report.is_absolute() else export / report
    started = time.monotonic()
    done = subprocess.run(
        [str(export / "driver.sh"), *args], env=env, capture_output=True, text=True, timeout=timeout_s
    )
    seconds = time.monotonic() - started
    return DriverRun(
        done.returncode,
        done.stdout + done.stderr,
        seconds,
        json.loads(report.read_text()) if report.exists() else None,
    )


def events(folder: Path) -> list[dict]:
    path = folder / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_job(log: list[dict], round_index: int | None = None) -> dict[str, list[dict]]:
    """Events per job id (of one round), in the order written."""
    out: dict[str, list[dict]] = {}
    for e in log:
        if round_index is None or e["round"] == str(round_index):
            out.setdefault(e["job_id"], []).append(e)
    return out


def processes(job_events: list[dict]) -> dict[int, list[dict]]:
    """A job's events per process (pid), start event first."""
    out: dict[int, list[dict]] = {}
    for e in job_events:
        out.setdefault(e["pid"], []).append(e)
    return out


def expected_master_port(job_id: str) -> int:
    """The contract's port, computed here independently: 29500 + first 4 bytes of sha256 mod 1000."""
    return 29500 + int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:4], "big") % 1000


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def queue(env: dict[str, str]) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i %T"], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split("\n") if out.stdout.strip() else []


def job_state(env: dict[str, str], slurm_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "-o", "job", slurm_id], env=env, capture_output=True, text=True)
    fields = dict(t.split("=", 1) for t in out.stdout.split() if "=" in t)
    return fields.get("JobState", "UNKNOWN")


def environment(slurm_env: dict[str, str], **extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(DATA.parent), os.environ.get("PYTHONPATH")]))
    return {**slurm_env, **extra, "PYTHONPATH": path}
