"""`rota profile --across-nodes ray`: the nodes of a Ray profiling job, and how a rank starts on one.

`rota profile-jobs ray` gives a worker type whose largest `--command` gang
needs several nodes a job over that many of its nodes; its driver
(`ray_profile.py`) runs `rota profile --across-nodes ray` on the first with

    ROTA_RAY_NODES          name=address,... of the job's nodes, this one first
    ROTA_RAY_ADDRESS        the cluster's address (its GCS)
    ROTA_RAY_NODE_RESOURCE  the prefix of the resource each node advertises with its name

The first node's ranks start here, as on one host; each other rank through
`python -m profiler.ray_rank`, a Ray task pinned to its node by that resource
(see there). Set the three variables yourself to use it outside the driver.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from planner.errors import InputError
from profiler.devices import Node

NODES_VARIABLE = "ROTA_RAY_NODES"
ADDRESS_VARIABLE = "ROTA_RAY_ADDRESS"
RESOURCE_VARIABLE = "ROTA_RAY_NODE_RESOURCE"


def ray_nodes(env: Mapping[str, str] = os.environ) -> tuple[Node, ...]:
    """The job's nodes from ROTA_RAY_NODES, this one first; InputError when it is not set or malformed."""
    text = env.get(NODES_VARIABLE, "").strip()
    if not text or not env.get(ADDRESS_VARIABLE):
        raise InputError(
            f"not inside a multi-node profiling job of rota profile-jobs ray (no {NODES_VARIABLE} / "
            f"{ADDRESS_VARIABLE}; see docs/profiling.md)",
            field="--across-nodes",
        )
    nodes = []
    for item in text.split(","):
        name, sep, address = (part.strip() for part in item.partition("="))
        if not sep or not name or not address:
            raise InputError(f"{NODES_VARIABLE}: expected name=address,..., got {item!r}", field="--across-nodes")
        nodes.append(Node(name, address, "ray"))
    return tuple(nodes)


def ray_rank_prefix(node: Node, gpus: int, env: Mapping[str, str] = os.environ) -> list[str]:
    """How a rank starts on `node`: a Ray task there, holding `gpus` GPUs, that runs the command."""
    resource = f"{env.get(RESOURCE_VARIABLE, 'node:')}{node.name}"
    return [
        sys.executable,
        "-m",
        "profiler.ray_rank",
        "--address",
        env[ADDRESS_VARIABLE],
        "--resource",
        resource,
        "--gpus",
        str(gpus),
        "--",
    ]
