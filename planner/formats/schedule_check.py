"""Schedule validator: does a `rota.schedule/v1` document fit its cluster and jobs?

Pure functions: `check_schedule` returns the list of violations (empty = valid).
Rules: rounds numbered contiguously and not overlapping in time; every GPU
exists and is booked at most once per round; a job runs at most once per
round and not before it arrives; a gang has exactly its scale factor of GPUs,
all on nodes of the assignment's worker type; at most two jobs share GPUs, and
only where the table has a co-located throughput for the pair (solo jobs: a
positive solo throughput); planned steps are positive and never exceed the
steps a job has left.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.formats.cluster import Cluster
from planner.formats.table import JobType, ThroughputTable

SCHEDULE_FORMAT = "rota.schedule/v1"
EPS = 1e-6

KINDS = {
    "structure": "a required field is missing or has the wrong type",
    "rounds": "round indices not contiguous, or rounds out of order / overlapping in time",
    "unknown_gpu": "a GPU, node or worker type that the cluster does not have",
    "double_booked": "a GPU held by two assignments in one round",
    "job_twice": "a job in two assignments of one round",
    "unknown_job": "a job the schedule's job list does not have",
    "arrival": "a job planned before it arrives",
    "gang_size": "a gang with more or fewer GPUs than its scale factor",
    "gang_type": "a gang on nodes of another worker type",
    "pair": "co-located jobs without a pair throughput in the table (or more than two)",
    "throughput": "a job on a worker type where it cannot run",
    "steps": "planned steps not positive, or more than the job has left",
}


@dataclass(frozen=True)
class Violation:
    kind: str
    message: str
    round: int | None = None

    def __str__(self) -> str:
        where = f"round {self.round}: " if self.round is not None else ""
        return f"{where}{self.kind}: {self.message}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "round": self.round, "message": self.message}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_structure(schedule: Any) -> list[Violation]:
    """Top-level shape; the per-assignment shape is checked with the rules."""
    if not isinstance(schedule, dict):
        return [Violation("structure", "the schedule is not a JSON object")]
    out = []
    if schedule.get("format") != SCHEDULE_FORMAT:
        out.append(Violation("structure", f"format is {schedule.get('format')!r}, expected {SCHEDULE_FORMAT!r}"))
    if not isinstance(schedule.get("rounds"), list):
        out.append(Violation("structure", "'rounds' must be a list"))
    if not isinstance(schedule.get("jobs"), dict):
        out.append(Violation("structure", "'jobs' must map job ids to their totals"))
    if not _number(schedule.get("round_s")) or schedule.get("round_s", 0) <= 0:
        out.append(Violation("structure", "'round_s' must be a positive number"))
    return out


def _assignment_shape(a: Any) -> str | None:
    if not isinstance(a, dict):
        return "an assignment is not an object"
    jobs = a.get("jobs")
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, str) for j in jobs):
        return "'jobs' must be a non-empty list of job ids"
    if not isinstance(a.get("worker_type"), str):
        return f"assignment of {', '.join(jobs)}: 'worker_type' must be a string"
    gpus = a.get("gpus")
    if (
        not isinstance(gpus, list)
        or not gpus
        or not all(
            isinstance(g, dict)
            and isinstance(g.get("node"), str)
            and isinstance(g.get("gpu"), int)
            and not isinstance(g.get("gpu"), bool)
            for g in gpus
        )
    ):
        return f"assignment of {', '.join(jobs)}: 'gpus' must be a non-empty list of {{node, gpu}}"
    steps = a.get("planned_steps")
    if not isinstance(steps, dict) or set(steps) != set(jobs):
        return f"assignment of {', '.join(jobs)}: 'planned_steps' must give steps for exactly its jobs"
    if "node" in a:
        nodes = list(dict.fromkeys(g["node"] for g in gpus))
        if a["node"] != "+".join(nodes):
            return f"assignment of {', '.join(jobs)}: 'node' is {a['node']!r} but its GPUs are on {'+'.join(nodes)}"
    return None


def check_schedule(
    schedule: Any,
    cluster: Cluster,
    *,
    table: ThroughputTable | None = None,
    job_types: Mapping[str, JobType] | None = None,
) -> list[Violation]:
    """Every violation of the rules above. `table` and `job_types` (job id -> type)
    enable the throughput checks; without them those checks are skipped."""
    out = check_structure(schedule)
    if out:
        return out
    jobs: dict = schedule["jobs"]
    done: dict[str, float] = {}
    for jid, info in jobs.items():
        if not isinstance(info, dict) or not _number(info.get("total_steps")):
            out.append(Violation("structure", f"job {jid!r}: 'total_steps' must be a number"))
            continue
        done[jid] = float(info.get("steps_done_at_start") or 0.0)
    node_type = {n: w for w, spec in cluster.worker_types.items() for n in spec.nodes}
    previous = None
    for position, rnd in enumerate(schedule["rounds"]):
        if (
            not isinstance(rnd, dict)
            or not isinstance(rnd.get("index"), int)
            or not _number(rnd.get("start_s"))
            or not _number(rnd.get("end_s"))
            or not isinstance(rnd.get("assignments"), list)
        ):
            out.append(Violation("structure", f"round at position {position} needs index, start_s, end_s, assignments"))
            previous = None
            continue
        r = rnd["index"]
        if previous is not None:
            if r != previous["index"] + 1:
                out.append(Violation("rounds", f"index {r} follows {previous['index']}", r))
            if rnd["start_s"] < previous["end_s"] - EPS:
                out.append(
                    Violation(
                        "rounds",
                        f"starts at {rnd['start_s']:g} s, before round "
                        f"{previous['index']} ends ({previous['end_s']:g} s)",
                        r,
                    )
                )
        if rnd["end_s"] <= rnd["start_s"]:
            out.append(
                Violation("rounds", f"ends at {rnd['end_s']:g} s, not after its start ({rnd['start_s']:g} s)", r)
            )
        previous = rnd
        out += _check_round(rnd, r, cluster, jobs, done, node_type, table, job_types)
    return out


def _check_round(
    rnd: dict,
    r: int,
    cluster: Cluster,
    jobs: dict,
    done: dict[str, float],
    node_type: dict[str, str],
    table: ThroughputTable | None,
    job_types: Mapping[str, JobType] | None,
) -> list[Violation]:
    out: list[Violation] = []
    held: dict[tuple[str, int], str] = {}
    seen: set[str] = set()
    for a in rnd["assignments"]:
        problem = _assignment_shape(a)
        if problem:
            out.append(Violation("structure", problem, r))
            continue
        ids, w = a["jobs"], a["worker_type"]
        label = "+".join(ids)
        spec = cluster.worker_types.get(w)
        if spec is None:
            out.append(Violation("unknown_gpu", f"{label}: worker type {w!r} is not in the cluster", r))
        gpus = [(g["node"], g["gpu"]) for g in a["gpus"]]
        for node, g in gpus:
            owner_type = node_type.get(node)
            if owner_type is None:
                out.append(Violation("unknown_gpu", f"{label}: node {node!r} is not in the cluster", r))
            elif spec is not None and owner_type != w:
                out.append(Violation("gang_type", f"{label} on {w} holds {node}:{g}, a GPU of {owner_type}", r))
            elif not 0 <= g < cluster.worker_types[owner_type].gpus_per_node:
                out.append(
                    Violation(
                        "unknown_gpu",
                        f"{label}: {node} has no GPU {g} ({cluster.worker_types[owner_type].gpus_per_node} per node)",
                        r,
                    )
                )
            if (node, g) in held:
                out.append(Violation("double_booked", f"{node}:{g} is held by {held[(node, g)]} and {label}", r))
            else:
                held[(node, g)] = label
        if len(ids) > 2:
            out.append(Violation("pair", f"{len(ids)} jobs share GPUs ({label}); at most two can be co-located", r))
        for jid in ids:
            if jid in seen:
                out.append(Violation("job_twice", f"{jid} is in two assignments", r))
            seen.add(jid)
        known = [jid for jid in ids if jid in jobs and jid in done]
        for jid in ids:
            if jid not in jobs:
                out.append(Violation("unknown_job", f"{jid} is not in the schedule's job list", r))
        for jid in known:
            info = jobs[jid]
            scale = info.get("scale_factor")
            if _number(scale) and len(gpus) != scale:
                out.append(Violation("gang_size", f"{jid} needs {scale:g} GPU(s) but holds {len(gpus)}", r))
            if _number(info.get("arrival_s")) and rnd["start_s"] < info["arrival_s"] - EPS:
                out.append(
                    Violation(
                        "arrival",
                        f"{jid} arrives at {info['arrival_s']:g} s, the round starts at {rnd['start_s']:g} s",
                        r,
                    )
                )
        if table is not None and job_types is not None and spec is not None and len(ids) <= 2:
            types = [job_types.get(jid) for jid in ids]
            if all(t is not None for t in types):
                if len(ids) == 1 and table.solo(w, types[0]) <= 0:
                    out.append(Violation("throughput", f"{ids[0]} ({types[0].label}) cannot run on {w}", r))
                if len(ids) == 2 and min(table.pair(w, types[0], types[1])) <= 0:
                    out.append(
                        Violation(
                            "pair",
                            f"no co-located throughput for {types[0].label} with {types[1].label} on {w} in the table",
                            r,
                        )
                    )
        for jid in known:
            if math.isnan(done[jid]):
                continue
            n = a["planned_steps"][jid]
            if not _number(n) or n <= 0:
                out.append(Violation("steps", f"{jid}: planned steps {n!r} must be a positive number", r))
                continue
            left = float(jobs[jid]["total_steps"]) - done[jid]
            if n > math.ceil(left - 1e-9) + EPS:
                out.append(
                    Violation(
                        "steps",
                        f"{jid} plans {n:g} steps but has {max(left, 0.0):g} left (its later rounds are not checked)",
                        r,
                    )
                )
                done[jid] = math.nan  # one report per job, not one per later round
            done[jid] += n
    return out
