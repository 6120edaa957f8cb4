"""The one interface `rota run` drives every launcher through (one module per launcher).

Like the plug-ins of a scheduler framework, an adapter answers five questions and nothing else:

* `cluster_state(cluster)`: which nodes of the cluster spec the launcher can use now (Slurm node
  states and GRES, Ray's alive nodes, Kubernetes Ready/cordoned/tainted nodes);
* `prepare(context, out_dir, options)`: write the round's launcher files (the same exporter as
  `rota export`, so the two never drift apart);
* `launch(prepared, round_start)`: start the round's jobs; the round's clock runs from
  `round_start` (time.time() of the loop's round start, not of the jobs' placement);
* `wait(handle, until)`: keep the round's clock until `until` (wall time) or until every job has
  ended; True when nothing of the round runs any more;
* `collect(handle)`: what happened to each job (`RoundResult`);
* `cancel(handle)`: stop the round now (the second Ctrl-C): signal, then kill, every job started.

Adapters keep no state between rounds beyond their handle, so a new `rota run` on the same
state file can take over from a killed one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from planner.export.common import ExportContext
from planner.formats.cluster import Cluster


@dataclass(frozen=True)
class NodeState:
    """One node of the cluster spec as the launcher sees it."""

    name: str
    usable: bool
    reason: str = ""  # why it is not usable: "drained", "down", "not ready", "unknown to the launcher", ...
    gpus: int | None = None  # GPUs the launcher offers on it now (None: as the cluster spec says)


@dataclass(frozen=True)
class ClusterState:
    nodes: dict[str, NodeState]  # by node name; every node of the spec has an entry

    def unusable(self) -> dict[str, str]:
        """node -> reason, for the nodes that cannot be planned on now."""
        return {n: s.reason or "unusable" for n, s in self.nodes.items() if not s.usable}


class JobState(StrEnum):
    COMPLETED = "completed"  # every process exited 0
    FAILED = "failed"  # a process exited non-zero
    KILLED = "killed"  # still running at the round's end (ignored SIGTERM): killed
    LOST = "lost"  # its node or the launcher lost it mid-round
    NOT_RUN = "not_run"  # never started (not placed, or cancelled before it began)
    CANCELLED = "cancelled"  # stopped by someone else (scancel, kubectl delete) or by the operator


# Outcomes that are the job's own fault and count towards --max-failures.
FAULTS = frozenset({JobState.FAILED, JobState.KILLED})


@dataclass(frozen=True)
class JobResult:
    job_id: str
    state: JobState
    exit_code: int | None = None
    detail: str = ""  # launcher-specific: Slurm state and job id, Ray task error, pod phase


@dataclass
class RoundResult:
    index: int
    started_at: float  # wall clock (time.time())
    ended_at: float
    jobs: dict[str, JobResult] = field(default_factory=dict)
    error: str | None = None  # the round as a whole failed (submission refused, ...)


class Launcher(Protocol):
    name: str

    def cluster_state(self, cluster: Cluster) -> ClusterState: ...

    def prepare(self, context: ExportContext, out_dir: Path, options: dict[str, Any]) -> Any: ...

    def launch(self, prepared: Any, round_start: float) -> Any: ...

    def wait(self, handle: Any, until: float) -> bool: ...

    def collect(self, handle: Any) -> RoundResult: ...

    def cancel(self, handle: Any) -> None: ...
