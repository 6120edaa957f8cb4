"""Helpers of the `rota run` integration tests: a job list of fake_train jobs, `rota run` as a
subprocess whose event log the test follows, and the checks every scenario ends with (no
orphan process, credited steps equal to the steps the trainer checkpointed)."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from conftest import DATA

from launchers.ray_cluster import processes_with_env
from launchers.slurm_rounds import fake_command

ROTA = [sys.executable, "-m", "planner.cli"] if shutil.which("rota") is None else ["rota"]


def job_list(path: Path, fake: Path, jobs: dict[str, tuple[str, int, str]]) -> Path:
    """jobs: id -> (model spec 'Model,batch,scale', total_steps, fake_train flags)."""
    lines = ["job_id,model,batch_size,scale_factor,total_steps,command"]
    for jid, (model, steps, flags) in jobs.items():
        command = fake_command(fake, *flags.split()).replace('"', '""')
        lines.append(f'{jid},{model},{steps},"{command}"')
    path.write_text("\n".join(lines) + "\n")
    return path


def fake_jobs(tmp_path: Path, jobs: dict[str, tuple[str, int, str]]) -> tuple[Path, Path]:
    """(the fake trainer's folder, the job list of `jobs`) under `tmp_path`."""
    fake = tmp_path / "fake"
    fake.mkdir()
    return fake, job_list(tmp_path / "jobs.csv", fake, jobs)


@dataclass
class Run:
    proc: subprocess.Popen
    work: Path
    state: Path

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:  # a failed test leaves no run behind
            self.proc.kill()
            self.proc.wait(timeout=30)

    def events(self) -> list[dict]:
        path = self.work / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait_event(self, predicate, timeout_s: float, what: str) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for e in self.events():
                if predicate(e):
                    return e
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        raise AssertionError(f"no {what} event; rota run exit {self.proc.poll()}; output:\n{self.output()}")

    def finish(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGINT)
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=60)
            raise AssertionError(f"rota run did not finish in {timeout_s} s:\n{self.output()}") from None

    def output(self) -> str:
        log = self.work.parent / "run-output.txt"
        return log.read_text(errors="replace") if log.exists() else ""


def start_run(tmp_path: Path, launcher: str, env: dict[str, str], *args: str) -> Run:
    state = tmp_path / "state.json"
    work = tmp_path / "work"
    out = open(tmp_path / "run-output.txt", "ab")  # noqa: SIM115 (the child writes it)
    proc = subprocess.Popen(
        [*ROTA, "run", launcher, "--state", str(state), "--work-dir", str(work), "--no-live", *args],
        env=env,
        cwd=tmp_path,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    return Run(proc, work, state)


def common_args(jobs: Path, round_s: float, grace_s: float, *more: str) -> list[str]:
    return [
        "--jobs", str(jobs), "--table", str(DATA / "throughputs.csv"), "--cluster", str(DATA / "cluster.yaml"),
        "--round-length", str(round_s), "--grace", str(grace_s), *more,
    ]  # fmt: skip


def marked_processes(marker: str) -> list[int]:
    """Live processes whose environment holds FAKE_TRAIN_DIR=<marker> (the jobs of one test)."""
    return processes_with_env("FAKE_TRAIN_DIR", marker)


def checkpoint_steps(fake: Path, job_id: str) -> float:
    ckpt = fake / "ckpt" / (hashlib.sha256(job_id.encode()).hexdigest()[:16] + ".json")
    return json.loads(ckpt.read_text())["steps"] if ckpt.exists() else 0.0


def state_jobs(state: Path) -> dict[str, dict]:
    return {j["job_id"]: j for j in json.loads(state.read_text())["jobs"]}


def fake_events(fake: Path) -> list[dict]:
    path = fake / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
