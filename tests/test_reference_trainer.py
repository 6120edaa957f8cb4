"""examples/train_reference.py keeps the checkpoint/resume contract (docs/launchers.md).

Each test runs the trainer as a subprocess, on the CPU, with a temporary checkpoint folder and
ROTA_* variables, as a launcher would. Timeouts are generous (importing torch alone takes seconds
on a loaded machine); nothing asserts how fast anything ran.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the reference trainer needs torch (the profiler extra)")

from planner.formats.progress import read_progress  # noqa: E402

TRAINER = Path(__file__).resolve().parents[1] / "examples" / "train_reference.py"
TIMEOUT_S = 300  # per run: far above what any run needs, so that only a hang fails


def trainer_env(tmp_path: Path, **rota: object) -> dict[str, str]:
    """The environment a launcher would give: this one's ROTA_* only, on the CPU, one thread."""
    inherited = ("ROTA_", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(ROTA_JOB_ID="job-1", ROTA_PROGRESS_FILE=str(tmp_path / "progress" / "job-1.json"))
    env.update({f"ROTA_{k.upper()}": str(v) for k, v in rota.items()})
    (tmp_path / "progress").mkdir(exist_ok=True)
    return env


def run(tmp_path: Path, *args: str, **rota: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(TRAINER), "--checkpoint-dir", str(tmp_path / "ckpt"), "--log-every", "0", *args]
    return subprocess.run(
        command, env=trainer_env(tmp_path, **rota), cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "progress" / "job-1.json").read_text())


def checkpoint(tmp_path: Path) -> dict:
    return torch.load(tmp_path / "ckpt" / "latest.pt", map_location="cpu")


def checksums(stdout: str, event: str) -> list[str]:
    return re.findall(rf"{event} .*?\(checksum (\S+)\)", stdout)


def test_stops_at_planned_steps_and_reports_them(tmp_path: Path) -> None:
    done = run(tmp_path, "--stop-at-planned", planned_steps=7, total_steps=100)
    assert done.returncode == 0, done.stderr
    got = report(tmp_path)
    assert got["job_id"] == "job-1" and got["steps_done"] == 7 and got["finished"] is False
    assert isinstance(got["steps_done"], int) and got["elapsed_s"] >= 0
    assert checkpoint(tmp_path)["step"] == 7
    assert "planned steps done" in done.stdout and "progress reported" in done.stdout
    assert "startup_s" in done.stdout  # printed: the progress format refuses unknown keys
    # The planner reads the folder as is.
    progress = read_progress(tmp_path / "progress")
    assert progress.jobs["job-1"].steps_done == 7 and progress.jobs["job-1"].elapsed_s is not None


def test_second_run_resumes_model_optimizer_and_steps(tmp_path: Path) -> None:
    first = run(tmp_path, "--stop-at-planned", planned_steps=5, total_steps=100)
    assert first.returncode == 0, first.stderr
    saved = checkpoint(tmp_path)
    assert checksums(first.stdout, "checkpoint written") == [saved["checksum"]]
    assert saved["optimizer"]["state"], "the optimizer state is checkpointed too"

    second = run(tmp_path, "--stop-at-planned", planned_steps=5, total_steps=100)
    assert second.returncode == 0, second.stderr
    assert "resumed from step 5" in second.stdout
    assert checksums(second.stdout, "resumed from step 5") == [saved["checksum"]]  # the same parameters
    assert report(tmp_path)["steps_done"] == 10 and checkpoint(tmp_path)["step"] == 10
    assert checkpoint(tmp_path)["checksum"] != saved["checksum"]  # and it trained on from there


def wait_for(path: Path, pattern: str, process: subprocess.Popen, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not re.search(pattern, path.read_text() if path.exists() else ""):
        assert process.poll() is None, f"exited {process.returncode} before {pattern!r}: {path.read_text()}"
        assert time.monotonic() < deadline, f"no {pattern!r} within {timeout_s} s: {path.read_text()}"
        time.sleep(0.1)


def test_sigterm_checkpoints_once_and_exits_zero(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    command = [sys.executable, str(TRAINER), "--checkpoint-dir", str(tmp_path / "ckpt")]
    command += ["--step-time", "0.02", "--log-every", "5"]
    env = trainer_env(tmp_path, planned_steps=10, total_steps=1_000_000)  # no --stop-at-planned: runs on
    with open(log, "w") as out:
        process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(log, r"step \d+ loss", process)  # mid-training
            process.send_signal(signal.SIGTERM)
            process.send_signal(signal.SIGTERM)  # the signal may come twice: checkpoint once
            assert process.wait(timeout=60) == 0, log.read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    stdout = log.read_text()
    assert "signal received: SIGTERM" in stdout
    assert stdout.count("checkpoint written") == 1
    steps = checkpoint(tmp_path)["step"]
    assert steps >= 5
    assert report(tmp_path)["steps_done"] == steps and report(tmp_path)["finished"] is False


def test_total_steps_reached_reports_finished(tmp_path: Path) -> None:
    done = run(tmp_path, total_steps=6, planned_steps=100)
    assert done.returncode == 0, done.stderr
    assert report(tmp_path)["steps_done"] == 6 and report(tmp_path)["finished"] is True
    again = run(tmp_path, total_steps=6, planned_steps=100)  # a restart after the end trains no more
    assert again.returncode == 0, again.stderr
    assert report(tmp_path)["steps_done"] == 6 and report(tmp_path)["finished"] is True


@pytest.mark.parametrize("name", ["TOTAL_STEPS", "PLANNED_STEPS"])
def test_bad_env_value_is_a_one_line_error(tmp_path: Path, name: str) -> None:
    done = run(tmp_path, **{name.lower(): "abc"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"train_reference.py: error: ROTA_{name} must be a whole number of steps (0 to 18 digits), got 'abc'"
    ]
    assert not (tmp_path / "ckpt").exists()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_process_gloo_run_reports_once_from_rank_0(tmp_path: Path) -> None:
    # Slow-tolerant: two torch processes on what may be a loaded 2-core machine.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1"]
    command += ["--node_rank=0", "--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    command += [str(TRAINER), "--checkpoint-dir", str(tmp_path / "ckpt"), "--stop-at-planned", "--log-every", "0"]
    env = trainer_env(tmp_path, planned_steps=6, total_steps=100)
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=2 * TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "world 2" in done.stdout
    assert re.findall(r"\[job-1 rank (\d)\] progress reported", done.stdout) == ["0"]
    assert re.findall(r"\[job-1 rank (\d)\] checkpoint written", done.stdout) == ["0"]
    assert [p.name for p in (tmp_path / "progress").iterdir()] == ["job-1.json"]
    assert report(tmp_path)["steps_done"] == checkpoint(tmp_path)["step"] == 6


def test_torchrun_under_rota_wrapper_exits_zero_on_sigterm_with_done_file(tmp_path: Path) -> None:
    # torchrun itself exits 1 after SIGTERM even when every worker stopped cleanly, which would
    # fail the round; the README's `--done-file` command turns a clean stop back into exit 0.
    from planner.export.common import launch_script

    torchrun = f"{sys.executable} -m torch.distributed.run --nproc_per_node=2 --nnodes=1"
    torchrun += f" --master_addr=127.0.0.1 --master_port={free_port()}"
    trainer = f"{TRAINER} --checkpoint-dir {tmp_path / 'ckpt'} --step-time 0.02 --log-every 5"
    command = (
        f'f=$(mktemp -u) && {{ {torchrun} {trainer} --done-file "$f" || test -e "$f"; }}; s=$?; rm -f "$f"; exit $s'
    )
    env = trainer_env(tmp_path, planned_steps=10, total_steps=1_000_000)
    rota_env = {k: v for k, v in env.items() if k.startswith("ROTA_")}
    log = tmp_path / "job.log"
    (tmp_path / "wrapper.sh").write_text(launch_script([(command, rota_env)], logs=[str(log)]))
    process = subprocess.Popen(["sh", str(tmp_path / "wrapper.sh")], env=env, cwd=tmp_path, start_new_session=True)
    try:
        wait_for(log, r"rank 0\] step \d+ loss", process, timeout_s=2 * TIMEOUT_S)
        process.send_signal(signal.SIGTERM)  # as a launcher does ROTA_GRACE_S before the round ends
        assert process.wait(timeout=120) == 0, log.read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert report(tmp_path)["steps_done"] == checkpoint(tmp_path)["step"] >= 5
