"""One engine for `plan` and `simulate`: policy + mechanism run forward in rounds.

Planning a batch is simulating it with no arrivals after t = 0. Progress per
round follows spec §5.6: a job on a type with throughput r runs
n = min(floor(r·τ), steps left) steps; the round ends when its slowest job does.
The policy is re-solved whenever the job set changes (arrival or completion),
no more often than `min_resolve_interval_s` (Gavel used 1920 s).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from planner.cluster import Cluster
from planner.errors import InputError
from planner.jobs import Job
from planner.mechanism import Key, Placement, RoundMechanism, visiting_order
from planner.policies.base import Allocation, Policy
from planner.problem import Problem, build_problem
from planner.table import ThroughputTable


@dataclass
class EngineConfig:
    round_s: float = 360.0
    min_resolve_interval_s: float = 0.0
    max_rounds: int = 1_000_000


@dataclass
class RoundRecord:
    index: int
    start_s: float
    end_s: float
    placements: list[Placement]
    planned_steps: dict[str, int]


@dataclass
class Solve:
    time_s: float
    job_ids: list[str]
    allocation: Allocation


@dataclass
class JobOutcome:
    job: Job
    finish_s: float | None = None
    steps_done: float = 0.0

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.job.arrival_s


@dataclass
class EngineResult:
    rounds: list[RoundRecord]
    outcomes: dict[str, JobOutcome]
    solves: list[Solve]
    busy_gpu_s: dict[str, float]
    makespan_s: float
    worker_types: list[str]
    capacity: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0


def run_engine(jobs: list[Job], table: ThroughputTable, cluster: Cluster, policy: Policy,
               config: EngineConfig | None = None,
               on_round: Callable[[RoundRecord, int, int], None] | None = None) -> EngineResult:
    """Run until every job finished (or `config.max_rounds`); `on_round(rec, done, total)` reports progress."""
    config = config or EngineConfig()
    started = time.perf_counter()
    mech = RoundMechanism(cluster, config.round_s)
    types = cluster.names
    pending = sorted(jobs, key=lambda j: j.arrival_s)  # stable: ties keep file order
    outcomes = {j.job_id: JobOutcome(j, steps_done=j.steps_done) for j in jobs}
    active: dict[str, Job] = {}
    rounds: list[RoundRecord] = []
    solves: list[Solve] = []
    busy = {w: 0.0 for w in types}
    need_update = True
    t = pending[0].arrival_s if pending else 0.0
    order: list[int] = list(range(len(types)))
    finished = 0

    def rate(job: Job, j: int) -> float:
        if cluster.capacity(types[j]) < job.scale_factor:
            return 0.0
        return table.solo(types[j], job.job_type)

    while (active or pending) and len(rounds) < config.max_rounds:
        while pending and pending[0].arrival_s <= t:
            job = pending.pop(0)
            active[job.job_id] = job
            mech.add((job.job_id,))
            need_update = True
        if not active:
            t = pending[0].arrival_s
            continue
        interval_ok = mech.last_reset is None or t - mech.last_reset >= config.min_resolve_interval_s
        if need_update and interval_ok:
            mech.reset(t)
            current = list(active.values())
            remaining = {jid: outcomes[jid].job.total_steps - outcomes[jid].steps_done for jid in active}
            problem = build_problem(current, table, cluster, now=t, remaining=remaining)
            allocation = policy.allocate(problem)
            mech.set_allocation({(jid,): allocation.x[i] for i, jid in enumerate(problem.job_ids)})
            solves.append(Solve(t, problem.job_ids, allocation))
            order = visiting_order(problem.throughput)
            need_update = False

        keys = list(mech.job_time)
        runnable = {k: np.array([rate(active[k[0]], j) > 0 for j in range(len(types))]) for k in keys}
        scale = {k: active[k[0]].scale_factor for k in keys}
        chosen = mech.select(order, scale, runnable, fifo=policy.fifo)
        placements = mech.place(chosen, scale)
        if not placements:
            if pending:
                t = pending[0].arrival_s
                continue
            raise InputError("no remaining job can be placed on the cluster "
                             f"({', '.join(sorted(active))}); check the policy and the job sizes")

        planned: dict[str, int] = {}
        finish: dict[str, float] = {}
        for p in placements:
            j = types.index(p.worker_type)
            for jid in p.jobs:
                job, out = active[jid], outcomes[jid]
                r = rate(job, j)
                left = job.total_steps - out.steps_done
                # At least one step, so a job slower than one step per round still progresses.
                n = min(max(1, math.floor(r * config.round_s)), math.ceil(left - 1e-9))
                planned[jid] = n
                finish[jid] = t + n / r
        end = max(finish.values())
        record = RoundRecord(len(rounds), t, end, placements, planned)
        rounds.append(record)
        for p in placements:
            j = types.index(p.worker_type)
            elapsed = max(finish[jid] for jid in p.jobs) - t
            mech.record(p.jobs, j, elapsed)
            busy[p.worker_type] += elapsed * len(p.gpus)
            for jid in p.jobs:
                out = outcomes[jid]
                out.steps_done += planned[jid]
                if out.steps_done >= out.job.total_steps - 1e-9:
                    out.finish_s = finish[jid]
                    del active[jid]
                    mech.remove((jid,))
                    need_update = True
                    finished += 1
        t = end
        if on_round:
            on_round(record, finished, len(jobs))

    makespan = max((o.finish_s for o in outcomes.values() if o.finish_s is not None), default=t)
    return EngineResult(rounds, outcomes, solves, busy, makespan, types,
                        {w: cluster.capacity(w) for w in types}, time.perf_counter() - started)
