"""`rota profile --across-nodes slurm`: the nodes of the Slurm allocation the profiler runs in.

A gang larger than one node's devices runs its first node's ranks here, as
on one host, and each other rank through `srun` on its node (one task, in
the allocation's resources: `--overlap`, so the steps do not wait for each
other). Every node is taken to hold devices like this one (a multi-node
shape is whole nodes of one worker type). MASTER_ADDR is this node's address
as Slurm knows it (`NodeAddr`), which the other nodes can reach.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping

from planner.errors import InputError
from profiler.devices import Node

SCONTROL_TIMEOUT_S = 60.0
LAUNCHERS = ("slurm", "ray")


def srun_prefix(node: Node) -> list[str]:
    """How a rank starts on another node of the allocation (the environment goes with it)."""
    return [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node.name}",
        "--overlap",  # shares the allocation with the batch step and the other ranks
        "--cpu-bind=none",  # the rank's threads are the command's business, as on this node
        "--export=ALL",
        "--quiet",
    ]


def _scontrol(args: list[str], run: Callable[..., subprocess.CompletedProcess]) -> str:
    try:
        done = run(["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"cannot run scontrol {' '.join(args)}: {exc}", field="--across-nodes") from None
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise InputError(f"scontrol {' '.join(args)} failed: {detail}", field="--across-nodes")
    return done.stdout


def _address(name: str, run: Callable[..., subprocess.CompletedProcess]) -> str:
    for word in _scontrol(["show", "node", "-o", name], run).split():
        key, _, value = word.partition("=")
        if key == "NodeAddr" and value:
            return value
    return name  # no NodeAddr: the name is the address


def allocation_nodes(
    env: Mapping[str, str] = os.environ, run: Callable[..., subprocess.CompletedProcess] = subprocess.run
) -> tuple[Node, ...]:
    """The allocation's nodes, this one first; InputError outside an allocation."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise InputError(
            "not inside a Slurm allocation (no SLURM_JOB_NODELIST): run it in an sbatch script or under salloc",
            field="--across-nodes",
        )
    names = [n for n in _scontrol(["show", "hostnames", nodelist], run).split() if n]
    here = env.get("SLURMD_NODENAME") or names[0]
    if here not in names:
        raise InputError(f"this node {here!r} is not in the allocation {nodelist!r}", field="--across-nodes")
    ordered = [here, *(n for n in names if n != here)]
    return tuple(Node(name, _address(name, run)) for name in ordered)
