"""The Kubernetes launcher: the adapter protocol (adapter.py) over kubectl.

Every call is `kubectl [--context C] [--kubeconfig F] [--namespace N] ...` through subprocess, with a
timeout. The parsing is in pure functions, tested on fixtures in the API's shape:

* `nodes_state(nodes_json, cluster, ...)`: `kubectl get nodes -o json` -> ClusterState. A node of the
  cluster spec is found by its `kubernetes.io/hostname` label, else its metadata.name; it is usable
  when Ready=True, not cordoned (spec.unschedulable), without a NoSchedule / NoExecute taint the pod
  template does not tolerate, and with allocatable GPUs (`gpu_resource`) > 0. A spec node the API
  does not list is unusable, "unknown to the launcher".
* `job_results(pods_json, expected, ...)`: `kubectl get pods -o json` -> {job_id: JobResult}, with the
  same rules as the export's driver (kubernetes_driver.py, whose functions these are): Succeeded ->
  COMPLETED; Failed with an exit code of its own -> FAILED; stopped at the round's deadline: exit 0
  -> COMPLETED (it checkpointed), killed by the signal -> KILLED; still running at the round's end
  -> KILLED; evicted / node lost -> LOST; never started -> NOT_RUN; deleted by someone else ->
  CANCELLED.

The round's clock: Kubernetes counts a pod's activeDeadlineSeconds from the pod's start, so `wait`
lowers it as each pod starts, to end the pod at round_start + round_s - grace_s (the manifest's
value is only a safety net). `collect` reads the pods once more and deletes the round's objects.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InputError
from planner.export import export_schedule
from planner.export.common import ExportContext
from planner.export.kubernetes import (
    DEFAULT_GPU_RESOURCE,
    ROUNDS_FILE,
    PodTemplate,
    node_index,
    quantity,
)
from planner.export.kubernetes_driver import ROUND_LABEL, Watch, deadline_patches
from planner.formats.cluster import Cluster
from planner.launch.adapter import ClusterState, JobResult, JobState, Launcher, NodeState, RoundResult

TIMEOUT_S = 60.0
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


class KubectlError(InputError):
    """kubectl failed, timed out or answered something that is not the expected JSON (one line)."""

    def __init__(self, message: str):
        super().__init__(message, field="kubectl")


# --------------------------------------------------------------------------- pure functions


def tolerates(tolerations: Sequence[dict], taint: dict) -> bool:
    """Whether one of the tolerations tolerates the taint (the API's rules: an empty key with Exists
    matches every key, an empty effect every effect; Equal compares the value)."""
    for tol in tolerations:
        if tol.get("effect") not in (None, "", taint.get("effect")):
            continue
        operator = tol.get("operator", "Equal")
        if not tol.get("key"):
            if operator == "Exists":
                return True
            continue
        if tol["key"] != taint.get("key"):
            continue
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _ready(node: dict) -> tuple[bool, str]:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            if cond.get("status") == "True":
                return True, ""
            return False, f"not ready ({cond.get('reason') or cond.get('status')})"
    return False, "not ready (no Ready condition)"


def node_state(name: str, node: dict | None, gpu_resource: str, tolerations: Sequence[dict] = ()) -> NodeState:
    """One spec node as the API shows it (None: the API does not list it)."""
    if node is None:
        return NodeState(name, False, "unknown to the launcher")
    ready, why = _ready(node)
    if not ready:
        return NodeState(name, False, why)
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return NodeState(name, False, "cordoned")
    for taint in spec.get("taints") or []:
        if isinstance(taint, dict) and taint.get("effect") in BLOCKING_EFFECTS and not tolerates(tolerations, taint):
            value = f"={taint['value']}" if taint.get("value") else ""
            return NodeState(name, False, f"tainted {taint.get('key')}{value}:{taint.get('effect')}")
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    gpus = quantity(allocatable.get(gpu_resource, 0))
    if not gpus:
        return NodeState(name, False, f"no allocatable {gpu_resource}", gpus=0)
    return NodeState(name, True, gpus=int(gpus))


def nodes_state(
    nodes_json: Any, cluster: Cluster, *, gpu_resource: str = DEFAULT_GPU_RESOURCE, tolerations: Sequence[dict] = ()
) -> ClusterState:
    """Every node of the cluster spec as `kubectl get nodes -o json` shows it."""
    known = node_index(nodes_json)
    return ClusterState(
        {
            name: node_state(name, known.get(name), gpu_resource, tolerations)
            for wt in cluster.worker_types.values()
            for name in wt.nodes
        }
    )


def job_results(watch: Watch) -> dict[str, JobResult]:
    """Each job's result from the round's pods as watched (the round is over)."""
    return {
        job["job_id"]: JobResult(job["job_id"], JobState[job["state"]], job["exit_code"], job["detail"])
        for job in watch.jobs(round_over=True)
    }


def results_from_pods(pods_json: Any, expected: dict[str, tuple[list[str], int]]) -> dict[str, JobResult]:
    """{job_id: JobResult} from one `kubectl get pods -o json` taken at the round's end.
    `expected`: the round's objects (assignment name -> (job ids, number of pods))."""
    watch = Watch(expected)
    watch.update(pods_json)
    return job_results(watch)


# --------------------------------------------------------------------------- the launcher


@dataclass
class Prepared:
    out_dir: Path
    round: dict  # the round of k8s_rounds.json: dir, index, objects
    round_s: float
    grace_s: float


@dataclass
class Handle:
    prepared: Prepared
    round_start: float
    watch: Watch
    applied: bool = False
    error: str | None = None
    ended_at: float | None = None
    cancelled: bool = False
    closed: bool = False  # the round's objects are deleted: the watch keeps its last view

    @property
    def deadline(self) -> float:
        return self.round_start + self.prepared.round_s - self.prepared.grace_s

    @property
    def end(self) -> float:
        return self.round_start + self.prepared.round_s

    @property
    def index(self) -> int:
        return int(self.prepared.round["index"])


@dataclass
class KubernetesLauncher:
    """`rota run` over kubectl. `kubectl`: the command (a list); `context`, `kubeconfig` and
    `namespace` are passed to every call; `pod_template` (read_pod_template) is added to every pod
    and its tolerations count when a node's taints are checked."""

    kubectl: Sequence[str] = ("kubectl",)
    context: str | None = None
    kubeconfig: str | None = None
    namespace: str | None = None
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    pod_template: PodTemplate | None = None
    timeout_s: float = TIMEOUT_S
    poll_s: float = 5.0
    settle_s: float = 30.0  # after the round's end: how long the kubelet may take to stop a pod
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    warnings: list[str] = field(default_factory=list)
    name: str = "kubernetes"

    def _command(self, args: Sequence[str]) -> list[str]:
        cmd = list(self.kubectl)
        if self.context:
            cmd += ["--context", self.context]
        if self.kubeconfig:
            cmd += ["--kubeconfig", self.kubeconfig]
        if self.namespace:
            cmd += ["--namespace", self.namespace]
        return cmd + list(args)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """One kubectl call (timeout_s); KubectlError when it fails and `check`."""
        cmd = self._command(args)
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            if check:
                raise KubectlError(f"kubectl {' '.join(args[:2])} timed out after {self.timeout_s:g} s") from None
            return subprocess.CompletedProcess(cmd, 124, "", "timed out")
        except OSError as exc:
            raise KubectlError(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
        if check and out.returncode != 0:
            detail = (out.stderr.strip().splitlines() or ["no message"])[-1]
            raise KubectlError(f"kubectl {' '.join(args[:2])} failed (exit {out.returncode}): {detail}")
        return out

    def _json(self, *args: str) -> Any:
        out = self.run(*args, "-o", "json")
        try:
            return json.loads(out.stdout)
        except ValueError:
            raise KubectlError(f"kubectl {' '.join(args[:2])} did not print JSON") from None

    # -- the protocol ---------------------------------------------------------------------------

    def cluster_state(self, cluster: Cluster) -> ClusterState:
        tolerations = self.pod_template.pod.get("tolerations", []) if self.pod_template else []
        return nodes_state(self._json("get", "nodes"), cluster, gpu_resource=self.gpu_resource, tolerations=tolerations)

    def prepare(self, context: ExportContext, out_dir: Path, options: dict[str, Any]) -> Prepared:
        """The round's manifests and driver files, by the exporter (`options`: its keyword options;
        `round`: the index of the schedule's round to run, default its first)."""
        options = dict(options)
        wanted = options.pop("round", None)
        options.setdefault("namespace", self.namespace)
        options.setdefault("gpu_resource", self.gpu_resource)
        options.setdefault("pod_template", self.pod_template)
        export_schedule("kubernetes", context, Path(out_dir), **options)  # whole or not at all, as `rota export`
        plan = json.loads((Path(out_dir) / ROUNDS_FILE).read_text(encoding="utf-8"))
        rounds = {r["index"]: r for r in plan["rounds"]}
        index = next(iter(rounds)) if wanted is None else int(wanted)
        if index not in rounds:
            raise KeyError(f"the schedule has no round {index}")
        return Prepared(Path(out_dir), rounds[index], float(plan["round_s"]), float(plan["grace_s"]))

    def launch(self, prepared: Prepared, round_start: float) -> Handle:
        expected = {o["name"]: (list(o["jobs"]), int(o["pods"])) for o in prepared.round["objects"]}
        handle = Handle(prepared, round_start, Watch(expected))
        if not expected:
            return handle
        out = self.run("apply", "-f", str(prepared.out_dir / prepared.round["dir"]), check=False)
        handle.applied = True
        if out.returncode != 0:
            detail = (out.stderr.strip().splitlines() or ["no message"])[-1]
            handle.error = f"kubectl apply failed (exit {out.returncode}): {detail}"
            self._delete(handle)
            handle.ended_at = self.clock()
        return handle

    def poll(self, handle: Handle) -> None:
        """List the round's pods once; lower the deadline of each pod that started."""
        try:
            doc = self._json("get", "pods", "-l", f"{ROUND_LABEL}={handle.index}")
        except KubectlError as exc:
            self.warnings.append(str(exc))
            return
        if handle.closed:
            return
        handle.watch.update(doc)
        if handle.cancelled:
            return
        for pod, seconds in deadline_patches(doc, handle.deadline):
            patch = json.dumps({"spec": {"activeDeadlineSeconds": seconds}})
            out = self.run("patch", "pod", pod, "--type=merge", "-p", patch, check=False)
            if out.returncode != 0:
                self.warnings.append(f"cannot lower the deadline of pod {pod}: {out.stderr.strip()[:200]}")

    def wait(self, handle: Handle, until: float) -> bool:
        if handle.error is not None or not handle.watch.expected:
            return True
        while not handle.closed:
            self.poll(handle)
            if handle.watch.all_ended():
                return True
            now = self.clock()
            # past the round's end: pods that never started are dropped; one still running gets settle_s
            if now >= handle.end and (not handle.watch.started_running() or now >= handle.end + self.settle_s):
                self._close(handle)
                return True
            if now >= until:
                return False
            self.sleep(max(0.0, min(self.poll_s, until - now)))
        return True

    def _close(self, handle: Handle) -> None:
        """The round is over: a last look at its pods, then its objects are deleted."""
        if handle.closed:
            return
        if handle.applied and handle.error is None and not handle.cancelled:
            self.poll(handle)
        handle.closed = True
        handle.ended_at = self.clock()
        if handle.error is None:
            self._delete(handle)

    def collect(self, handle: Handle) -> RoundResult:
        """Each job's result (the round is over; its objects are deleted)."""
        self._close(handle)
        jobs = job_results(handle.watch)
        ended = handle.ended_at if handle.ended_at is not None else self.clock()
        return RoundResult(handle.index, handle.round_start, ended, jobs, handle.error)

    def cancel(self, handle: Handle) -> None:
        """Delete the round's objects: SIGTERM to every pod, SIGKILL after its grace period."""
        handle.cancelled = True
        handle.watch.deleted_by_us = True
        if handle.error is None:
            handle.error = "cancelled"
        self._delete(handle)
        self.poll(handle)
        handle.closed = True
        handle.ended_at = self.clock()

    def _delete(self, handle: Handle) -> None:
        if not handle.applied:
            return
        folder = str(handle.prepared.out_dir / handle.prepared.round["dir"])
        out = self.run("delete", "-f", folder, "--ignore-not-found", "--wait=false", check=False)
        if out.returncode != 0:
            self.warnings.append(f"kubectl delete -f {folder} failed: {out.stderr.strip()[:200]}")


if TYPE_CHECKING:  # mypy: the class keeps the protocol
    _launcher: Launcher = KubernetesLauncher()
