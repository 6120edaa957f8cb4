"""`rota run slurm`: the Slurm adapter (planner/launch/adapter.py).

The round's files are `rota export slurm`'s, and the round is run by the same driver code
(planner/export/slurm_driver.py), so a loop of one's own and `rota run` behave alike. Node
states come from `scontrol show node -o`: a node is usable when Slurm would start a job on it
now (not drained or draining, down, failed, in maintenance, powered down or not responding).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.export import export_schedule
from planner.export.common import ExportContext
from planner.export.slurm import ROUNDS_FILE
from planner.export.slurm_driver import Round, SubmitError, run_tool
from planner.formats.cluster import Cluster
from planner.launch.adapter import ClusterState, JobResult, JobState, NodeState, RoundResult

# Node state words (scontrol joins them with '+') under which Slurm starts no new job on a node.
UNUSABLE_FLAGS = {
    "DOWN": "down",
    "DRAIN": "drained",
    "DRAINED": "drained",
    "DRAINING": "draining",
    "FAIL": "failed",
    "FAILING": "failing",
    "MAINT": "in maintenance",
    "NOT_RESPONDING": "not responding",
    "POWERED_DOWN": "powered down",
    "POWER_DOWN": "powering down",
    "POWERING_DOWN": "powering down",
    "POWERING_UP": "powering up",
    "INVAL": "invalid configuration",
    "FUTURE": "not yet in service",
    "UNKNOWN": "state unknown",
    "REBOOT_ISSUED": "rebooting",
    "REBOOT_REQUESTED": "reboot requested",
}
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:.]*)=")
_GPU = re.compile(r"gpu(?::[^:,(]+)?:(\d+)")

# What Slurm's end of a job (as the driver tells it apart) means for the run loop.
STATES = {
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "KILLED": JobState.KILLED,
    "TIMEOUT": JobState.KILLED,
    "DEADLINE": JobState.KILLED,
    "NOT_RUN": JobState.NOT_RUN,
    "CANCELLED": JobState.CANCELLED,
    "PREEMPTED": JobState.CANCELLED,
    "NODE_FAIL": JobState.LOST,
    "BOOT_FAIL": JobState.LOST,
}


def node_fields(line: str) -> dict[str, str]:
    """One line of `scontrol show node -o` as key -> value (values such as Reason hold spaces)."""
    marks = list(_KEY.finditer(line))
    out = {}
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def gres_gpus(gres: str) -> int | None:
    """GPUs in a Gres string such as 'gpu:a100:4(S:0-1),gpu:a100:2'; None when it names none."""
    counts = [int(n) for n in _GPU.findall(gres or "")]
    return sum(counts) if counts else None


def parse_nodes(text: str) -> dict[str, NodeState]:
    """`scontrol show node -o` output as NodeStates (usable, why not, GPUs)."""
    nodes = {}
    for line in text.splitlines():
        fields = node_fields(line.strip())
        name = fields.get("NodeName")
        if not name:
            continue
        words = [w.rstrip("*") for w in fields.get("State", "UNKNOWN").upper().split("+")]
        reasons = [UNUSABLE_FLAGS[w] for w in words if w in UNUSABLE_FLAGS]
        if fields.get("State", "").endswith("*") and "not responding" not in reasons:
            reasons.append("not responding")
        why = ", ".join(dict.fromkeys(reasons))
        if why and fields.get("Reason"):
            why += f": {fields['Reason']}"
        nodes[name] = NodeState(name, usable=not reasons, reason=why, gpus=gres_gpus(fields.get("Gres", "")))
    return nodes


def cluster_state_from(text: str, cluster: Cluster) -> ClusterState:
    known = parse_nodes(text)
    nodes = {}
    for spec in cluster.worker_types.values():
        for n in spec.nodes:
            nodes[n] = known.get(n) or NodeState(n, usable=False, reason="unknown to the launcher")
    return ClusterState(nodes)


@dataclass
class Prepared:
    spec: dict[str, Any]  # the round's entry of slurm_rounds.json
    round_s: float
    grace_s: float
    cwd: Path


class SlurmLauncher:
    name = "slurm"

    def cluster_state(self, cluster: Cluster) -> ClusterState:
        out = run_tool(["scontrol", "show", "node", "-o"])
        if out.returncode != 0:
            lines = [line.strip() for line in (out.stderr or out.stdout).splitlines() if line.strip()]
            last = lines[-1][:200] if lines else f"exit status {out.returncode}"
            raise InputError(f"cannot read Slurm's node states (scontrol show node): {last}; is Slurm reachable here?")
        return cluster_state_from(out.stdout, cluster)

    def prepare(self, context: ExportContext, out_dir: Path, options: dict[str, Any]) -> Prepared:
        export_schedule("slurm", context, out_dir, **options)  # whole or not at all, as `rota export`
        plan = json.loads((out_dir / ROUNDS_FILE).read_text(encoding="utf-8"))
        (out_dir / "logs").mkdir(exist_ok=True)
        return Prepared(plan["rounds"][0], float(plan["round_s"]), float(plan["grace_s"]), out_dir)

    def launch(self, prepared: Prepared, round_start: float) -> Round:
        handle = Round(prepared.spec, prepared.round_s, prepared.grace_s, cwd=str(prepared.cwd))
        try:
            handle.start(round_start)
        except SubmitError as exc:  # sbatch refused a script: the round's submitted jobs are cancelled
            handle.abort(str(exc))
        return handle

    def wait(self, handle: Round, until: float) -> bool:
        return handle.poll(until)

    def collect(self, handle: Round) -> RoundResult:
        report = handle.report()
        result = RoundResult(handle.spec["index"], handle.started_at, handle.ended_at or handle.started_at)
        result.error = handle.error
        for job in report["jobs"]:
            state = STATES.get(job["state"], JobState.LOST)
            code = job.get("exit_code")
            if state == JobState.COMPLETED and code not in (0, None):
                state = JobState.FAILED
            detail = f"Slurm job {job['slurm_job_id']}: {job['slurm_state']}"
            late = job.get("late_start_s")  # the driver read it NOT_RUN (started_too_late)
            if late is not None:
                detail += (
                    f"; Slurm started it {late:.0f} s before the round's SIGTERM (less than the {handle.grace_s:g} s "
                    "grace): too late to run, not held against it"
                )
            result.jobs[job["job_id"]] = JobResult(job["job_id"], state, code, detail)
        return result

    def cancel(self, handle: Round) -> None:
        handle.abort("stopped by the operator")
