"""The cluster the run loop may plan on (pure): the spec less the nodes the launcher cannot use."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from planner.formats.cluster import Cluster
from planner.launch.adapter import ClusterState, NodeState


def usable_cluster(cluster: Cluster, state: ClusterState) -> Cluster:
    """`cluster` with only the usable nodes of each worker type (a type whose nodes are all
    unusable keeps its name with 0 GPUs, so the planner's state still lines up). A node the
    launcher offers fewer GPUs on than the spec (a GPU drained) is left out too: the spec's
    worker types have one GPU count per node."""
    types = {}
    for name, spec in cluster.worker_types.items():
        nodes = tuple(n for n in spec.nodes if _usable(state.nodes.get(n), spec.gpus_per_node))
        types[name] = dataclasses.replace(spec, nodes=nodes, gpus=len(nodes) * spec.gpus_per_node)
    return dataclasses.replace(cluster, worker_types=types)  # the same path and tenants


def _usable(node: NodeState | None, gpus_per_node: int) -> bool:
    return node is not None and node.usable and (node.gpus is None or node.gpus >= gpus_per_node)


def unusable_nodes(cluster: Cluster, state: ClusterState) -> dict[str, str]:
    """node -> why, for every node of the spec the usable cluster leaves out."""
    out = {}
    for spec in cluster.worker_types.values():
        for n in spec.nodes:
            node = state.nodes.get(n)
            if node is None:
                out[n] = "unknown to the launcher"
            elif not node.usable:
                out[n] = node.reason or "unusable"
            elif node.gpus is not None and node.gpus < spec.gpus_per_node:
                out[n] = f"{node.gpus} of {spec.gpus_per_node} GPUs usable"
    return out


@dataclass(frozen=True)
class NodeChanges:
    lost: dict[str, str]  # node -> why, unusable now but not before
    back: list[str]  # usable again

    def __bool__(self) -> bool:
        return bool(self.lost or self.back)

    def summary(self) -> str:
        parts = [f"{n} unusable ({why})" for n, why in self.lost.items()] + [f"{n} back" for n in self.back]
        return "nodes changed: " + ", ".join(parts)


def node_changes(before: Mapping[str, str], now: Mapping[str, str]) -> NodeChanges:
    return NodeChanges({n: why for n, why in now.items() if n not in before}, [n for n in before if n not in now])
