#!/usr/bin/env python3
"""A harmless training job that keeps rota's checkpoint/resume contract, for launcher tests.

It resumes from its checkpoint, "trains" at the planned rate (ROTA_PLANNED_STEPS over ROTA_ROUND_S),
stops after the planned steps or on SIGTERM/SIGUSR1/SIGINT, writes a checkpoint, reports its
progress in ROTA_PROGRESS_FILE (rank 0 only) and appends what happened to an event log, so a test
can check where and when it ran, which signal it saw and what it was told.

    FAKE_TRAIN_DIR   folder for checkpoints (ckpt/) and the event log (events.jsonl); required
    --ignore-term    ignore termination signals (a job that will be killed at the time limit)
    --fail           exit 3 at once without a checkpoint or progress report
    --rate-scale X   train X times the planned rate (default 1)
    --run-s S        train for S seconds whatever was planned (a job that overruns its round)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import sys
import time

ENV_PREFIXES = (
    "ROTA_",
    "SLURM_JOB_GPUS",
    "SLURM_JOB_NODELIST",
    "SLURMD_NODENAME",
    "SLURM_STEP_GPUS",
    "SLURM_GPUS",
    "SLURM_HET",
    "SLURM_PROCID",
    "SLURM_NODEID",
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "RAY_",
)


def _write_json(path: str, document: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
    os.replace(tmp, path)


def _event(folder: str, kind: str, **fields: object) -> None:
    record = {
        "event": kind,
        "time": time.time(),
        "job_id": os.environ.get("ROTA_JOB_ID"),
        "round": os.environ.get("ROTA_ROUND"),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        **fields,
    }
    print(f"fake_train {kind} job={record['job_id']} round={record['round']}", flush=True)  # the job's log
    # One short line per write with O_APPEND: concurrent jobs never interleave inside a line.
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(os.path.join(folder, "events.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--run-s", type=float, default=None)
    args = parser.parse_args()

    folder = os.environ["FAKE_TRAIN_DIR"]
    job_id = os.environ["ROTA_JOB_ID"]
    os.makedirs(os.path.join(folder, "ckpt"), exist_ok=True)
    rank = os.environ.get("ROTA_NODE_RANK", "0")
    ckpt = os.path.join(folder, "ckpt", hashlib.sha256(job_id.encode()).hexdigest()[:16] + ".json")
    planned = float(os.environ["ROTA_PLANNED_STEPS"])
    total = float(os.environ.get("ROTA_TOTAL_STEPS") or 0)
    rate = args.rate_scale * planned / float(os.environ["ROTA_ROUND_S"])
    resumed = 0.0
    if os.path.exists(ckpt):
        with open(ckpt, encoding="utf-8") as handle:
            resumed = float(json.load(handle)["steps"])

    stop: dict[str, str] = {}

    def on_signal(number: int, _frame: object) -> None:
        _event(folder, "signal", signal=signal.Signals(number).name)
        if not args.ignore_term:
            stop.setdefault("reason", signal.Signals(number).name)

    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, on_signal)

    env = {key: value for key, value in os.environ.items() if key.startswith(ENV_PREFIXES)}
    _event(folder, "start", resumed=resumed, env=env, argv=sys.argv[1:])
    if args.fail:
        _event(folder, "fail")
        return 3

    started = time.time()
    steps = 0.0
    remaining = max(0.0, total - resumed) if total else float("inf")

    def training() -> bool:
        if args.run_s is not None:
            return time.time() - started < args.run_s
        return steps < min(planned * args.rate_scale, remaining)

    while "reason" not in stop and training():
        time.sleep(0.2)
        steps = min((time.time() - started) * rate, remaining)
    done = resumed + steps
    if rank == "0":
        _write_json(ckpt, {"steps": done})
        progress = os.environ.get("ROTA_PROGRESS_FILE")
        if progress:
            finished = bool(total) and done >= total - 1e-9
            _write_json(progress, {"job_id": job_id, "steps_done": int(done), "finished": finished})
    _event(
        folder,
        "stop",
        reason=stop.get("reason", "planned steps done"),
        steps=steps,
        total_done=done,
        ran_s=time.time() - started,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
