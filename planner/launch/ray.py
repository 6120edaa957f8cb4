"""`rota run ray`: the Ray adapter (planner/launch/adapter.py).

The round's files are `rota export ray`'s (ray_plan.json and ray_driver.py), and the round is run
by the driver's own code (planner/export/ray_driver.py: RoundRun), so `python ray_driver.py` and
`rota run ray` behave alike: groups placed independently, tasks never retried, the round's clock
counted from the loop's round start, a watchdog on each node that kills a job whose Ray worker
died, and a deadline on every wait.

Node states come from `ray.nodes()`: a node of the cluster spec is the Ray node that advertises
the custom resource the exporter pins its bundles with (`node:<name>` by default, see
`node_resource`); it is usable when alive and it offers GPUs. Ray is imported only inside the
methods, so the planner imports without it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.export import export_schedule
from planner.export.common import ExportContext
from planner.export.ray import DEFAULT_NODE_RESOURCE
from planner.export.ray_driver import RoundRun, connect_ray
from planner.formats.cluster import Cluster
from planner.launch.adapter import ClusterState, JobResult, JobState, NodeState, RoundResult

# The driver's job states (ray_driver.round_report) as the run loop's.
STATES = {
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "KILLED": JobState.KILLED,
    "LOST": JobState.LOST,
    "NOT_RUN": JobState.NOT_RUN,
    "CANCELLED": JobState.CANCELLED,
}


def node_states(
    ray_nodes: list[dict[str, Any]], cluster: Cluster, node_resource: str, seen: dict[str, set[str]] | None = None
) -> ClusterState:
    """Each node of the spec as Ray sees it (ray.nodes() entries): the alive Ray node advertising
    `<node_resource><name>`, usable when it offers GPUs. A dead Ray node advertises nothing any more:
    it is the spec's node when its NodeName is the node's name or its NodeID is one `seen` (name ->
    Ray node ids met before, updated here) knows; such a node is lost; no entry at all: unknown."""
    seen = {} if seen is None else seen
    out = {}
    for spec in cluster.worker_types.values():
        for name in spec.nodes:
            key = f"{node_resource}{name}"
            alive = [n for n in ray_nodes if n.get("Alive") and (n.get("Resources") or {}).get(key, 0) > 0]
            seen.setdefault(name, set()).update(n.get("NodeID", "") for n in alive)
            dead = [
                n
                for n in ray_nodes
                if not n.get("Alive") and (n.get("NodeName") == name or n.get("NodeID") in seen[name])
            ]
            if alive:
                gpus = int(sum(float((n.get("Resources") or {}).get("GPU", 0)) for n in alive))
                if gpus > 0:
                    out[name] = NodeState(name, usable=True, gpus=gpus)
                else:
                    out[name] = NodeState(name, usable=False, reason="advertises no GPUs", gpus=0)
            elif dead:
                out[name] = NodeState(name, usable=False, reason="lost", gpus=0)
            else:
                out[name] = NodeState(name, usable=False, reason="unknown to the launcher")
    return ClusterState(out)


@dataclass
class Prepared:
    plan: dict[str, Any]  # ray_plan.json as written
    round: dict[str, Any]  # the round to run (the plan's first, or options["round"])
    out_dir: Path


def round_result(report: dict[str, Any], whole_round_error: str | None) -> RoundResult:
    """The driver's round report as the run loop's RoundResult."""
    result = RoundResult(report["index"], report["started_at"], report["ended_at"], error=whole_round_error)
    for job in report["jobs"]:
        state = STATES.get(job["state"], JobState.LOST)
        codes = job["exit_codes"]
        code = next((c for c in codes if c != 0), 0) if codes and state != JobState.NOT_RUN else None
        detail = job.get("detail", "")
        if job.get("gpus"):
            detail = "; ".join(filter(None, [detail, "GPUs " + ",".join(filter(None, job["gpus"]))]))
        result.jobs[job["job_id"]] = JobResult(job["job_id"], state, code, f"{job['group']}: {detail}".rstrip(": "))
    return result


class RayLauncher:
    name = "ray"

    def __init__(
        self,
        address: str = "auto",
        placement_timeout_s: float | None = None,
        *,
        accelerator_type: list[str] | dict[str, str] | None = None,
        grace_s: float | None = None,
        node_resource: str | None = None,
        pin_nodes: bool = True,
        progress_dir: str | None = None,
        end_slack_s: float | None = None,
    ):
        self.address = address
        self.placement_timeout_s = placement_timeout_s
        self.end_slack_s = end_slack_s
        self.export_options: dict[str, Any] = {
            k: v
            for k, v in {
                "accelerator_type": accelerator_type,
                "grace_s": grace_s,
                "node_resource": node_resource,
                "pin_nodes": pin_nodes,
                "progress_dir": progress_dir,
                "placement_timeout_s": placement_timeout_s,
            }.items()
            if v is not None
        }
        self.node_resource = node_resource or DEFAULT_NODE_RESOURCE
        self.seen: dict[str, set[str]] = {}  # node name -> the Ray node ids it had (to know a dead one)

    def _connect(self) -> None:
        import ray

        if not ray.is_initialized():
            refused = connect_ray(self.address, logging_level=logging.ERROR, log_to_driver=False)
            if refused:  # a cluster with token authentication, and no token (or a wrong one) here
                raise InputError(refused, field="--address")

    def cluster_state(self, cluster: Cluster) -> ClusterState:
        import ray

        self._connect()
        return node_states(ray.nodes(), cluster, self.node_resource, self.seen)

    def prepare(self, context: ExportContext, out_dir: Path, options: dict[str, Any]) -> Prepared:
        options = {**self.export_options, **options}
        index = options.pop("round", None)
        export_schedule("ray", context, out_dir, **options)  # whole or not at all, as `rota export`
        plan = json.loads((out_dir / "ray_plan.json").read_text(encoding="utf-8"))
        rounds = [r for r in plan["rounds"] if index is None or r["index"] == index]
        if not rounds:
            raise ValueError(f"the plan has no round {index}")
        return Prepared(plan, rounds[0], out_dir)

    def launch(self, prepared: Prepared, round_start: float) -> RoundRun:
        """Create the round's placement groups (tasks start as each is placed, in `wait`)."""
        self._connect()
        extra = {} if self.end_slack_s is None else {"end_slack_s": self.end_slack_s}
        run = RoundRun(prepared.round, prepared.plan, round_start, self.placement_timeout_s, os.getcwd(), **extra)
        run.start()
        run.step()
        return run

    def wait(self, handle: RoundRun, until: float) -> bool:
        return handle.wait(until)

    def collect(self, handle: RoundRun) -> RoundResult:
        """What became of each job; waits (at most until the round's deadline) for what still runs."""
        report = handle.finish()
        for g in handle.groups:
            for name, node_id in zip(g.spec["nodes"], g.nodes):
                self.seen.setdefault(name, set()).add(node_id)
        placed = [g for g in handle.groups if g.error is None]
        whole = report["error"] if handle.groups and not placed else None
        return round_result(report, whole)

    def cancel(self, handle: RoundRun) -> None:
        handle.cancel("cancelled by the operator")
