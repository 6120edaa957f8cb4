"""Schedule validator: does a `rota.schedule/v1` document fit its cluster and jobs?

Pure functions: `check_schedule` returns the list of violations (empty = valid).
Rules: rounds numbered contiguously and not overlapping in time; every GPU
exists and is booked at most once per round; a job runs at most once per
round and not before it arrives; a gang has exactly its scale factor of GPUs,
all on nodes of the assignment's worker type; at most two jobs share GPUs, and
only where the table has a co-located throughput for the pair (solo jobs: a
positive solo throughput); planned steps are positive and never exceed the
steps a job has left; a gang's `switch` / `nvlink_domain` is one every node
of it has in the cluster spec; a job listed as not placed in a round does not
also run in it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.formats.cluster import Cluster, NodeDomains
from planner.formats.fields import is_number, short
from planner.formats.schedule import (
    Assignment,
    Round,
    assignment_problem,
    document_problems,
    job_entry_problem,
    round_problem,
)
from planner.formats.table import JobType, ThroughputTable

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
    "topology": "a gang's switch or NVLink domain that not all of its nodes have in the cluster",
    "unplaced": "a job listed as not placed in a round that also runs in it",
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


def check_structure(schedule: Any) -> list[Violation]:
    """Top-level shape; the per-assignment shape is checked with the rules."""
    return [Violation("structure", message) for _, message in document_problems(schedule)]


@dataclass
class _Context:
    """What the per-round checks read; `done` (job -> steps planned so far) is updated."""

    cluster: Cluster
    jobs: dict[str, Any]  # the schedule's job entries
    done: dict[str, float]
    node_type: dict[str, str]  # node -> its worker type
    table: ThroughputTable | None
    job_types: Mapping[str, JobType] | None


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
        if (problem := job_entry_problem(info)) is not None:
            out.append(Violation("structure", f"job {short(jid)}: {problem}"))
            continue
        start = info.get("steps_done_at_start") or 0.0
        if not is_number(start):
            out.append(Violation("structure", f"job {short(jid)}: 'steps_done_at_start' must be a number"))
            continue
        done[jid] = float(start)
    node_type = {n: w for w, spec in cluster.worker_types.items() for n in spec.nodes}
    context = _Context(cluster, jobs, done, node_type, table, job_types)
    previous = None
    for position, rnd in enumerate(schedule["rounds"]):
        if (problem := round_problem(rnd)) is not None:
            out.append(Violation("structure", f"round at position {position} {problem}"))
            previous = None
            continue
        out += _check_timing(rnd, previous)
        previous = rnd
        out += _check_round(rnd, context)
    return out


def _check_timing(rnd: Round, previous: Round | None) -> list[Violation]:
    """Rounds follow each other: next index, not before the previous one ends, positive length."""
    out = []
    r = rnd["index"]
    if previous is not None:
        if r != previous["index"] + 1:
            out.append(Violation("rounds", f"index {r} follows {previous['index']}", r))
        if rnd["start_s"] < previous["end_s"] - EPS:
            out.append(
                Violation(
                    "rounds",
                    f"starts at {rnd['start_s']:g} s, before round {previous['index']} ends ({previous['end_s']:g} s)",
                    r,
                )
            )
    if rnd["end_s"] <= rnd["start_s"]:
        out.append(Violation("rounds", f"ends at {rnd['end_s']:g} s, not after its start ({rnd['start_s']:g} s)", r))
    return out


def _check_round(rnd: Round, context: _Context) -> list[Violation]:
    out: list[Violation] = []
    r = rnd["index"]
    held: dict[tuple[str, int], str] = {}
    seen: set[str] = set()
    for a in rnd["assignments"]:
        problem = assignment_problem(a)
        if problem:
            out.append(Violation("structure", problem, r))
            continue
        out += _check_gpus(a, r, context, held)
        out += _check_topology(a, r, context)
        out += _check_jobs(a, rnd, context, seen)
        out += _check_throughput(a, r, context)
        out += _check_steps(a, r, context)
    for u in rnd.get("unplaced", []):
        for jid in u["jobs"]:
            if jid in seen:
                out.append(Violation("unplaced", f"{jid} is listed as not placed but runs in this round", r))
    return out


def _check_topology(a: Assignment, r: int, context: _Context) -> list[Violation]:
    """A declared switch / NVLink domain is the one every node of the gang has."""
    spec = context.cluster.worker_types.get(a["worker_type"])
    if spec is None:
        return []  # reported by _check_gpus
    out = []
    none = NodeDomains()
    for key in ("switch", "nvlink_domain"):
        declared = a.get(key)
        if declared is None:
            continue
        for node in dict.fromkeys(g["node"] for g in a["gpus"]):
            actual = getattr(spec.domains.get(node, none), key)
            if actual != declared:
                label = "+".join(a["jobs"])
                has = f"is on {short(actual)}" if actual is not None else "declares none"
                out.append(Violation("topology", f"{label} says {key} {short(declared)} but {node} {has}", r))
    return out


def _check_gpus(a: Assignment, r: int, context: _Context, held: dict[tuple[str, int], str]) -> list[Violation]:
    """The GPUs exist, belong to the assignment's worker type, and nobody else holds them
    this round (`held`: GPU -> assignment label, updated)."""
    out = []
    w, label = a["worker_type"], "+".join(a["jobs"])
    types = context.cluster.worker_types
    if w not in types:
        out.append(Violation("unknown_gpu", f"{label}: worker type {short(w)} is not in the cluster", r))
    for g in a["gpus"]:
        node, gpu = g["node"], g["gpu"]
        owner_type = context.node_type.get(node)
        if owner_type is None:
            out.append(Violation("unknown_gpu", f"{label}: node {short(node)} is not in the cluster", r))
        elif w in types and owner_type != w:
            out.append(Violation("gang_type", f"{label} on {w} holds {node}:{gpu}, a GPU of {owner_type}", r))
        elif not 0 <= gpu < types[owner_type].gpus_per_node:
            per_node = types[owner_type].gpus_per_node
            out.append(Violation("unknown_gpu", f"{label}: {node} has no GPU {gpu} ({per_node} per node)", r))
        if (node, gpu) in held:
            out.append(Violation("double_booked", f"{node}:{gpu} is held by {held[(node, gpu)]} and {label}", r))
        else:
            held[(node, gpu)] = label
    return out


def _check_jobs(a: Assignment, rnd: Round, context: _Context, seen: set[str]) -> list[Violation]:
    """At most two jobs, each once per round (`seen`, updated), known, arrived, with its gang size."""
    out = []
    r, ids = rnd["index"], a["jobs"]
    if len(ids) > 2:
        label = "+".join(ids)
        out.append(Violation("pair", f"{len(ids)} jobs share GPUs ({label}); at most two can be co-located", r))
    for jid in ids:
        if jid in seen:
            out.append(Violation("job_twice", f"{jid} is in two assignments", r))
        seen.add(jid)
    for jid in ids:
        if jid not in context.jobs:
            out.append(Violation("unknown_job", f"{jid} is not in the schedule's job list", r))
    for jid in _known(ids, context):
        info = context.jobs[jid]
        scale = info.get("scale_factor")
        if is_number(scale) and len(a["gpus"]) != scale:
            out.append(Violation("gang_size", f"{jid} needs {scale:g} GPU(s) but holds {len(a['gpus'])}", r))
        arrival = info.get("arrival_s")
        if is_number(arrival) and rnd["start_s"] < arrival - EPS:
            out.append(
                Violation("arrival", f"{jid} arrives at {arrival:g} s, the round starts at {rnd['start_s']:g} s", r)
            )
    return out


def _known(ids: list[str], context: _Context) -> list[str]:
    """The jobs whose entry in the schedule could be read."""
    return [jid for jid in ids if jid in context.jobs and jid in context.done]


def _check_throughput(a: Assignment, r: int, context: _Context) -> list[Violation]:
    """With a table: a solo job can run on its worker type, a pair has a co-located throughput."""
    table, job_types, ids, w = context.table, context.job_types, a["jobs"], a["worker_type"]
    if table is None or job_types is None or w not in context.cluster.worker_types or len(ids) > 2:
        return []
    types = [t for t in (job_types.get(jid) for jid in ids) if t is not None]
    if len(types) < len(ids):  # a job of unknown type: nothing to look up
        return []
    if len(types) == 1 and table.solo(w, types[0]) <= 0:
        return [Violation("throughput", f"{ids[0]} ({types[0].label}) cannot run on {w}", r)]
    if len(types) == 2 and min(table.pair(w, types[0], types[1])) <= 0:
        message = f"no co-located throughput for {types[0].label} with {types[1].label} on {w} in the table"
        return [Violation("pair", message, r)]
    return []


def _check_steps(a: Assignment, r: int, context: _Context) -> list[Violation]:
    """Planned steps are positive and within what each job has left (`context.done` is updated)."""
    out = []
    done = context.done
    for jid in _known(a["jobs"], context):
        if math.isnan(done[jid]):
            continue
        n = a["planned_steps"][jid]
        if not is_number(n) or n <= 0:
            out.append(Violation("steps", f"{jid}: planned steps {short(n)} must be a positive number", r))
            continue
        left = float(context.jobs[jid]["total_steps"]) - done[jid]
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
