"""Run one rank of a profiled gang on another node of a Ray cluster (`rota profile --across-nodes ray`).

    python -m profiler.ray_rank --address GCS --resource node:NAME --gpus G -- COMMAND ARGS...

A Ray task pinned to the node by its resource (holding G GPUs) runs the command
there, with the gang's variables of this process's environment (RANK, WORLD_SIZE,
MASTER_ADDR, ROTA_*, ...; see FORWARDED) on top of the node's own. This process
stands for the rank here: it exits with the command's exit status, printing the
last lines the command wrote on standard error; SIGTERM (the profiler stopping
the gang) cancels the task, which stops the command first. Exit 143 after a
stop, 127 when the task could not run.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
from collections import deque

FORWARDED = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMP_NUM_THREADS",
    "PYTHONUNBUFFERED",
    "CUDA_VISIBLE_DEVICES",
    "ROTA_DEVICE",
    "ROTA_BATCH_SIZE",
    "ROTA_SCALE",
    "ROTA_DIST_BACKEND",
)
STOP_GRACE_S = 5.0


def _die_with_parent() -> None:
    """In the command's process (Linux): SIGTERM when the task's worker dies, so no rank outlives its task."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_rank(argv: list[str], env: dict[str, str], cwd: str) -> dict:
    """What the task runs on its node: the command to its end (or the task's cancellation)."""
    tail: deque = deque(maxlen=5)
    process = subprocess.Popen(
        argv,
        env={**os.environ, **env},
        cwd=cwd if os.path.isdir(cwd) else None,
        stdout=subprocess.DEVNULL,  # a rank above 0: its reports are not timed
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_die_with_parent,  # noqa: PLW1509 - only sets a signal, no locks involved
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if line.strip():
                tail.append(line.rstrip()[:300])
        return {"returncode": process.wait(), "stderr": list(tail)}
    except KeyboardInterrupt:  # ray.cancel: stop the command, then let the task end
        process.terminate()
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    import ray

    env = {k: v for k, v in os.environ.items() if k in FORWARDED}
    ray.init(address=args.address, logging_level=logging.ERROR, log_to_driver=False)
    task = ray.remote(run_rank).options(num_cpus=0, num_gpus=args.gpus, resources={args.resource: 0.001}, max_retries=0)
    ref = task.remote(command, env, os.getcwd())
    stopped = []

    def stop(signum, frame):  # noqa: ARG001
        stopped.append(signum)
        ray.cancel(ref)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        result = ray.get(ref)
    except Exception as exc:  # cancelled, or the task or its node died
        if stopped:
            return 143
        print(f"ray_rank: the rank's task on {args.resource} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 127
    for line in result["stderr"]:
        print(line, file=sys.stderr)
    return result["returncode"] if result["returncode"] >= 0 else 128 - result["returncode"]


if __name__ == "__main__":
    sys.exit(main())
