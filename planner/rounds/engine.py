"""One engine for `plan` and `simulate`: policy + mechanism run forward in rounds.

Planning a batch is simulating it with no arrivals after t = 0. Progress per
round follows spec §5.6: a job on a type with throughput r runs
n = min(floor(r·τ), steps left) steps; the round ends when its slowest job does.
The policy is re-solved whenever the job set changes (arrival or completion),
no more often than `min_resolve_interval_s` (Gavel used 1920 s).

Placement keeps gangs whole (planner.rounds.mechanism): an entry the fill chose
that finds no room does not run that round (`RoundRecord.unplaced` says why; its
books simply record no service), and the GPUs it leaves go to the next entries
in the fill's order. A gang spread over nodes that share no domain runs at the
table's spread throughput, the `<type>_unconsolidated` rows of Gavel's table
(the only form a table states it in); without such a row a gang bigger than a
node runs only inside one domain. Gavel's compatibility mode keeps Gavel's
placement (a gang no node fits spills over nodes at the table's throughput).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.formats.cluster import NO_ENTITY, Cluster, Tenants, tenant_name
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.policies.base import Allocation, Policy, Stateful
from planner.policies.problem import build_problem
from planner.rounds import compiled as compiled_rounds
from planner.rounds.mechanism import (
    DEFAULT_ROUND_S,
    Gpu,
    Key,
    MechanismSnapshot,
    Placement,
    RoundMechanism,
    Unplaced,
    visiting_order,
)
from planner.rounds.restart import RestartCosts

_STEPS_DONE = operator.attrgetter("steps_done")


@dataclass
class EngineConfig:
    round_s: float = DEFAULT_ROUND_S
    min_resolve_interval_s: float = 0.0  # Gavel: 1920 s between re-solves
    max_rounds: int = 1_000_000
    # Worker-type visiting order: "fastest" (from the data), "spec" (cluster
    # spec order), "shuffle" (every round), "gavel" (shuffle for agnostic policies).
    visit_order: str = "fastest"
    seed: int = 0
    # Base worker-type order by name (unlisted types follow in spec order), e.g. Gavel's
    # hard-coded v100, p100, k80; None: fastest first, from the data at every solve.
    type_order: tuple[str, ...] | None = None
    # False: step() still returns each RoundRecord but the engine does not keep it
    # (long simulations would otherwise hold every round in memory).
    keep_rounds: bool = True
    # Gavel HEAD's simulation quirks, to reproduce its numbers (spec §5.2, §5.6, §13.3 #5, #6, #14):
    # - after the first solve at t = 0 the next change re-solves at once (Gavel's last_reset == 0 test);
    # - a job missing from the current allocation is never placed: it waits for the next re-solve and
    #   the GPUs the greedy pass picked for it idle; an idle cluster still jumps to the next arrival;
    # - with nothing runnable and no arrival left, a re-solve is forced (last_reset := 0);
    # - an idle pass still re-solves (possibly with no jobs) and draws from the shuffle stream;
    # - a round's execution time counts from the previous round's end (job time and busy time
    #   are inflated after idle gaps); the last round runs the exact, possibly fractional, remainder;
    # - a co-located job's completion time is its pair's finish.
    gavel_compat: bool = False
    # "python": the reference round loop; "compiled": `step_many` runs the rounds between two
    # events in one compiled call (planner.rounds.compiled; needs numba) where the case allows
    # it (Gavel-compat, single-GPU jobs, no pairs, quotas, restart costs; a fixed visiting
    # order; keep_rounds False), else the Python step.
    round_loop: str = "python"


@dataclass
class RoundRecord:
    index: int
    start_s: float
    end_s: float
    placements: list[Placement]
    # Whole steps; Gavel's compat mode runs the exact, possibly fractional, remainder.
    planned_steps: dict[str, float]
    unplaced: list[Unplaced] = field(default_factory=list)  # chosen, but no whole nodes had room
    # per multi-node placement: the switch / NVLink domain all its nodes share (schedule fields)
    domains: dict[Key, dict[str, str]] = field(default_factory=dict)


class RoundBatch:
    """Consecutive rounds run by the compiled loop (`Engine.step_many`), no event between them
    but after the last: per round its start and end, how many entries it placed and how many of
    those kept last round's GPUs; `finished`: the jobs that finished in the last round, in
    placement order (their finish times are set). `last`, the last round's full record, is
    built when first asked for."""

    def __init__(self, starts, ends, n_placed, n_same, finished: list[str], index: int, make_last):
        self.starts, self.ends, self.n_placed, self.n_same = starts, ends, n_placed, n_same
        self.finished = finished
        self.index = index  # the last round's index
        self._make_last = make_last
        self._last: RoundRecord | None = None

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def last_finished(self) -> int:
        return len(self.finished)

    @property
    def last(self) -> RoundRecord:
        if self._last is None:
            self._last = self._make_last()
        return self._last


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
class EngineSnapshot:
    """Everything an engine needs to continue exactly where it stopped, as values.

    `Engine.snapshot()` takes one, `Engine.from_snapshot()` continues from one: the
    restored engine steps through the rounds the original would have. Nothing is
    rounded, so a snapshot that goes through JSON and back is exact.
    """

    config: EngineConfig
    worker_types: list[str]
    outcomes: list[JobOutcome]  # every job submitted, in submission order
    pending: list[str]  # ids of jobs waiting for their arrival, in arrival order
    active: list[str]  # ids of admitted jobs that have not finished, in admission order
    t: float | None  # the clock: where the next round starts
    need_update: bool  # the job set changed since the last solve
    order: list[int]  # base worker-type visiting order (from the last solve)
    finished: int
    busy: dict[str, float]  # GPU-seconds per worker type
    round_origin: float  # end of the previous round (Gavel counts execution time from it)
    shuffle: tuple[Any, ...]  # random.Random.getstate() of the per-round shuffle stream
    rounds_done: int
    mechanism: MechanismSnapshot
    last_solve: Solve | None = None
    policy_state: dict[str, Any] | None = None  # a Stateful policy's get_state()
    quota_credit: dict[str, dict[str, float]] = field(default_factory=dict)  # tenant -> type -> GPUs


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
    restarts: RestartTally | None = None  # None: no restart cost was charged (no information given)


@dataclass
class RestartTally:
    """What restarts cost a run: starts on GPUs a job did not hold the round before (first starts
    included) and the GPU-seconds they took, per worker type."""

    starts: int = 0
    lost_gpu_s: dict[str, float] = field(default_factory=dict)
    across_types: int = 0  # starts on another worker type than the one the job last ran on


class Engine:
    """Round-by-round state: jobs waiting and active, the mechanism, the records.

    `step()` runs one round and returns its record (None when there is nothing
    left to run); `run()` steps until every job finished. Keys of the
    mechanism are tuples of job ids: one id for a job alone, two for a
    co-located pair (packing policies).
    """

    def __init__(
        self,
        table: ThroughputTable,
        cluster: Cluster,
        policy: Policy,
        config: EngineConfig | None = None,
        jobs: Iterable[Job] = (),
        source: Callable[[float | None], list[Job]] | None = None,
        decision_table: ThroughputTable | None = None,
        restart: RestartCosts | None = None,
        migration_aware: bool = False,
    ):
        """`source(t)`, if given, is asked for new jobs before every admission at time t
        (None before the first job): it must return every not yet submitted job arriving
        at or before t, plus the next later one when there is one (lazy, endless traces).

        `decision_table`, if given, is what the policy sees (e.g. estimated co-locations);
        progress always follows `table`, the true throughputs.

        `restart`, if given, charges every start of a job on GPUs it did not hold the round
        before (a lease extension is free): that round it runs min(cost, round) seconds less.
        `migration_aware` keeps jobs on their worker type when a move would not recover
        its restart cost (`RoundMechanism.select_migration_aware`)."""
        if (restart is not None or migration_aware) and config is not None and config.gavel_compat:
            raise ValueError("restart costs and migration-aware rounds are not part of Gavel's simulator")
        self.table, self.cluster, self.policy = table, cluster, policy
        self.decision_table = table if decision_table is None else decision_table
        self.config = config or EngineConfig()
        self.types = cluster.names
        self.mech = RoundMechanism(cluster, self.config.round_s)
        self.pending: list[Job] = []
        self.active: dict[str, Job] = {}
        self.outcomes: dict[str, JobOutcome] = {}
        self.rounds: list[RoundRecord] = []
        # Every re-solve; only the first and the latest keep their allocation in full (a long
        # packed plan re-solves hundreds of times, each with ~10^5 pair shares).
        self.solves: list[Solve] = []
        self.last_solve: Solve | None = None
        self.busy = {w: 0.0 for w in self.types}
        # tenant -> worker type -> GPUs it may still take (tenant quotas; see _quota_allowance)
        self.quota_credit: dict[str, dict[str, float]] = {}
        self._largest_gang: dict[int, int] = {}
        self.need_update = True
        type_order = self.config.type_order
        self._fixed_orders: dict[tuple[str, ...], list[int]] = {}
        self.order = self._fixed_order(type_order) if type_order is not None else list(range(len(self.types)))
        self.finished = 0
        self.n_rounds = 0
        self.t: float | None = None
        self.source = source
        self._rates: dict[Key, list[tuple[float, ...]]] = {}  # per entry, per type, from the true table
        self._type_index = {w: j for j, w in enumerate(self.types)}
        self._runnable: dict[Key, np.ndarray] = {}  # per entry: types where every member runs
        self._rates_by_types: dict[tuple[int, ...], list[tuple[float, ...]]] = {}  # shared by entries
        self._runnable_by_types: dict[tuple[int, ...], np.ndarray] = {}
        self._spread_by_types: dict[tuple[int, ...], list[tuple[float, ...]]] = {}  # `<type>_unconsolidated`
        self._with_domains = any(spec.domains for spec in cluster.worker_types.values())
        self._type_numbers: dict[JobType, int] = {}  # job type -> small number, in order of first sight
        self._numbered_types: list[JobType] = []
        self._type_number: dict[str, int] = {}  # job id -> its type's number
        self._scale: dict[Key, int] = {}  # per entry: GPUs it needs at once
        self._round_origin = 0.0  # end of the previous round (Gavel measures execution time from it)
        self._shuffle = random.Random(self.config.seed + 5)  # Gavel's per-round shuffle stream
        self.restart = restart
        self.migration_aware = migration_aware
        self.restart_tally = RestartTally(lost_gpu_s=dict.fromkeys(self.types, 0.0)) if restart is not None else None
        self._restart_cost: dict[tuple[str, str], float] = {}  # (job id, worker type) -> seconds
        self._last_type: dict[str, str] = {}  # job id -> the worker type it last started on (restart tally)
        self._entries_version = -1  # the mechanism's entries the caches below were filled for
        self._ok = np.zeros((0, len(self.types)), dtype=bool)  # runnable, stacked in entry order
        self._compiled_cache: tuple | None = None  # (entries version, allocation, per-entry arrays)
        self._compiled_geometry: tuple | None = None  # per type: GPUs, nodes, GPUs per node, node names
        self._compiled_out: tuple | None = None  # output buffers of the compiled call
        # numbered as the mechanism numbers jobs: its member rows give the entries' job numbers
        self.compiled_books = compiled_rounds.CompiledBooks(len(self.types), self.mech._job_number)
        self._lease_source: Callable | None = None  # the deferred leases the last compiled call left
        self._solo_table: list[list[float]] = []  # per job type number: steps/s per worker type
        self._solo_array = np.zeros((0, len(self.types)))
        # compiled calls, rounds they ran; calls per stop reason (planner.rounds.compiled.STOP_*)
        self.compiled_stats: dict[str, Any] = {"calls": 0, "rounds": 0, "stops": [0] * 7}
        self.submit(list(jobs))

    # snapshot --------------------------------------------------------------
    def snapshot(self) -> EngineSnapshot:
        """The engine's state now, as values (the engine keeps running unaffected)."""
        policy = self.policy
        return EngineSnapshot(
            config=dataclasses.replace(self.config),
            worker_types=list(self.types),
            outcomes=[JobOutcome(out.job, out.finish_s, out.steps_done) for out in self.outcomes.values()],
            pending=[job.job_id for job in self.pending],
            active=list(self.active),
            t=self.t,
            need_update=self.need_update,
            order=list(self.order),
            finished=self.finished,
            busy=dict(self.busy),
            round_origin=self._round_origin,
            shuffle=self._shuffle.getstate(),
            rounds_done=self.n_rounds,
            mechanism=self.mech.snapshot(),
            last_solve=self.last_solve,
            policy_state=policy.get_state() if isinstance(policy, Stateful) else None,
            quota_credit={tenant: dict(left) for tenant, left in self.quota_credit.items()},
        )

    @classmethod
    def from_snapshot(
        cls,
        snapshot: EngineSnapshot,
        table: ThroughputTable,
        cluster: Cluster,
        policy: Policy,
        decision_table: ThroughputTable | None = None,
        restart: RestartCosts | None = None,
        migration_aware: bool = False,
    ) -> Engine:
        """An engine that continues from `snapshot`; `policy` is a fresh policy object
        (it gets `snapshot.policy_state` when it keeps state). `restart` and `migration_aware`
        as for a new engine: a snapshot does not keep them (the caller's state does)."""
        if list(snapshot.worker_types) != cluster.names:
            raise ValueError(f"snapshot of worker types {snapshot.worker_types}, cluster has {cluster.names}")
        config = dataclasses.replace(snapshot.config)
        engine = cls(
            table,
            cluster,
            policy,
            config,
            decision_table=decision_table,
            restart=restart,
            migration_aware=migration_aware,
        )
        engine._restore(snapshot)
        return engine

    def _restore(self, snapshot: EngineSnapshot) -> None:
        self.outcomes = {out.job.job_id: JobOutcome(out.job, out.finish_s, out.steps_done) for out in snapshot.outcomes}
        jobs = {jid: out.job for jid, out in self.outcomes.items()}
        self.pending = [jobs[jid] for jid in snapshot.pending]
        self.active = {jid: jobs[jid] for jid in snapshot.active}
        self.t = snapshot.t
        self.need_update = snapshot.need_update
        self.order = list(snapshot.order)
        self.finished = snapshot.finished
        self.busy = {w: snapshot.busy.get(w, 0.0) for w in self.types}  # cluster order; new types at 0
        self._round_origin = snapshot.round_origin
        self._shuffle.setstate(snapshot.shuffle)
        self.n_rounds = snapshot.rounds_done
        self.quota_credit = {tenant: dict(left) for tenant, left in snapshot.quota_credit.items()}
        self.mech.restore(snapshot.mechanism)
        self.last_solve = snapshot.last_solve
        if snapshot.policy_state is not None and isinstance(self.policy, Stateful):
            self.policy.set_state(snapshot.policy_state)

    # inputs ----------------------------------------------------------------
    def submit(self, jobs: list[Job]) -> None:
        for job in jobs:
            if job.job_id in self.outcomes:
                raise InputError(f"job id {job.job_id!r} submitted twice", field="job_id")
            self.outcomes[job.job_id] = JobOutcome(job, steps_done=job.steps_done)
        self.pending = sorted(self.pending + list(jobs), key=lambda j: j.arrival_s)  # stable
        if self.t is None and self.pending:
            self.t = self.pending[0].arrival_s

    # what a launcher reports between rounds ----------------------------------
    def move_clock(self, t: float) -> None:
        """The next round starts at `t` (the launcher's clock, not the planned end)."""
        self.t = t

    def set_steps_done(self, job_id: str, steps_done: float) -> None:
        self.outcomes[job_id].steps_done = steps_done

    def withdraw(self, job_id: str, finish_s: float | None) -> None:
        """The job leaves now (finished early; cancelled: finish_s None). A job that had
        already left keeps its place in the counts; only its finish time changes."""
        if job_id in self.active:
            self._complete(job_id)
        elif any(job.job_id == job_id for job in self.pending):
            self.pending = [job for job in self.pending if job.job_id != job_id]
            self.finished += 1
        self.outcomes[job_id].finish_s = finish_s

    def reopen(self, job_id: str) -> None:
        """A job the plan saw finish has steps left after all: it runs again, as a newcomer."""
        out = self.outcomes[job_id]
        out.finish_s = None
        self.mech.previous  # noqa: B018  # deferred leases are built before the job's entry returns
        self.active[job_id] = out.job
        self.mech.add((job_id,))
        books = self.compiled_books
        row = books.number.get(job_id)
        if row is not None and row < len(books.known):  # its notes (in the allocation?) are stale
            books.known[row] = False
        self.need_update = True
        self.finished -= 1

    def move_lease(self, job_id: str, worker_type: str, gpus: tuple[Gpu, ...]) -> None:
        """The GPUs a running job really held; next round extends that lease instead."""
        if (job_id,) in self.mech.job_time:
            self.mech.move_lease(job_id, Placement((job_id,), worker_type, gpus))

    def request_resolve(self) -> None:
        """Re-solve before the next round (e.g. the policy changed)."""
        self.need_update = True

    def set_round_length(self, round_s: float) -> None:
        self.config.round_s = self.mech.round_s = round_s

    # rates -------------------------------------------------------------------
    def rate(self, key: Key, j: int) -> tuple[float, ...]:
        """Steps/s of each member of `key` on type j; zeros where it cannot run."""
        rates = self._rates.get(key)
        if rates is None:
            rates = self._rates[key] = self._type_rates(self._job_types(key))
        return rates[j]

    def solo_rates(self, job_ids: Sequence[str]) -> np.ndarray:
        """(jobs, types) steps/s of each active job alone, as `rate((jid,), j)` gives them one by one."""
        numbers = self._type_number
        types = np.fromiter(
            (numbers[jid] if jid in numbers else self._number_type(jid) for jid in job_ids), dtype=np.int64
        )
        distinct, rows = np.unique(types, return_inverse=True)
        by_type = np.array([[r[0] for r in self._type_rates((int(n),))] for n in distinct], dtype=float)
        return by_type.reshape(len(distinct), len(self.types))[rows.reshape(-1)]

    def runnable(self, key: Key) -> np.ndarray:
        ok = self._runnable.get(key)
        if ok is None:
            types = self._job_types(key)
            ok = self._runnable_by_types.get(types)
            if ok is None:
                rates = self._type_rates(types)
                ok = self._runnable_by_types[types] = np.array([min(r) > 0 for r in rates])
            self._runnable[key] = ok
        return ok

    def _job_types(self, key: Key) -> tuple[int, ...]:
        """The members' job types as small numbers (tuples of ints hash in C; JobType in Python)."""
        numbers = self._type_number
        return tuple(numbers[jid] if jid in numbers else self._number_type(jid) for jid in key)

    def _number_type(self, jid: str) -> int:
        job_type = self.active[jid].job_type
        number = self._type_numbers.setdefault(job_type, len(self._type_numbers))
        if number == len(self._numbered_types):
            self._numbered_types.append(job_type)
        self._type_number[jid] = number
        return number

    def _type_rates(self, types: tuple[int, ...]) -> list[tuple[float, ...]]:
        # Rates depend only on the members' job types: thousands of jobs (and millions of
        # candidate pairs) share a few hundred type combinations, so look the table up once each.
        rates = self._rates_by_types.get(types)
        if rates is None:
            job_types = tuple(self._numbered_types[n] for n in types)
            rates = self._rates_by_types[types] = [self._rate(job_types, w) for w in self.types]
        return rates

    def _rate(self, types: tuple[JobType, ...], w: str) -> tuple[float, ...]:
        size = types[0].scale_factor
        if self.cluster.capacity(w) < size or (
            # rota keeps gangs whole: one bigger than every domain runs only where spreading is stated
            not self.config.gavel_compat
            and not self.mech.topology(w).can_consolidate(size)
            and min(self._table_rate(types, f"{w}_unconsolidated")) <= 0
        ):
            return tuple(0.0 for _ in types)
        return self._table_rate(types, w)

    def _table_rate(self, types: tuple[JobType, ...], w: str) -> tuple[float, ...]:
        if len(types) == 1:
            return (self.table.solo(w, types[0]),)
        return self.table.pair(w, types[0], types[1])

    def _hide_unplaceable(self, throughput: np.ndarray, scale: np.ndarray, jobs: Sequence[Job]) -> None:
        """Zero (in place) the throughput of gangs on types where whole-gang placement can never
        run them (bigger than every domain, no spread throughput): the policy then allocates
        their time where they can run (FIFO, for one, never runs a job where it gave it none)."""
        for j, w in enumerate(self.types):
            topology = self.mech.topology(w)
            largest = max(topology.per_node, topology.widest * topology.per_node)  # a whole domain
            for i in np.flatnonzero(scale > largest).tolist():
                if self.table.solo(f"{w}_unconsolidated", jobs[i].job_type) <= 0:
                    throughput[i, j] = 0.0

    def spread_rate(self, key: Key, j: int) -> tuple[float, ...]:
        """Steps/s of each member of `key` as a gang spread over nodes of type j that share no
        domain: the table's `<type>_unconsolidated` rows; zeros where it states none."""
        types = self._job_types(key)
        rates = self._spread_by_types.get(types)
        if rates is None:
            job_types = tuple(self._numbered_types[n] for n in types)
            rates = self._spread_by_types[types] = [
                self._table_rate(job_types, f"{w}_unconsolidated") for w in self.types
            ]
        return rates[j]

    def _spread_ok(self, key: Key, j: int) -> bool:
        return min(self.spread_rate(key, j)) > 0

    # one round -------------------------------------------------------------
    def _pull(self) -> None:
        if self.source is not None:
            new = self.source(self.t)
            if new:
                self.submit(new)

    def _fixed_order(self, type_order: tuple[str, ...]) -> list[int]:
        order = self._fixed_orders.get(type_order)  # (asked at every re-solve)
        if order is None:
            listed = [self.types.index(w) for w in type_order if w in self.types]
            order = self._fixed_orders[type_order] = listed + [j for j in range(len(self.types)) if j not in listed]
        return list(order)

    def _clock(self) -> float:
        if self.t is None:
            raise RuntimeError("internal error: the engine has no clock before its first job")
        return self.t

    def _admit(self) -> None:
        t, pending = self._clock(), self.pending
        n = 0
        while n < len(pending) and pending[n].arrival_s <= t:
            n += 1
        if not n:
            return
        self.pending = pending[n:]  # one cut: popping the head job by job is quadratic
        arrived = pending[:n]
        for job in arrived:
            self.active[job.job_id] = job
        self.mech.add_jobs([(job.job_id,) for job in arrived])
        self.need_update = True

    def _resolve(self) -> None:
        mech, t = self.mech, self._clock()
        mech.reset(t)
        current = list(self.active.values())
        outcomes = self.outcomes
        remaining = {jid: (out := outcomes[jid]).job.total_steps - out.steps_done for jid in self.active}
        problem = build_problem(current, self.decision_table, self.cluster, now=t, remaining=remaining)
        if not self.config.gavel_compat:
            self._hide_unplaceable(problem.throughput, problem.scale, current)
        allocation = self.policy.allocate(problem)
        alloc: dict[Key, np.ndarray] = dict(zip([(jid,) for jid in problem.job_ids], allocation.x))
        pairs = allocation.pair_x or {}
        for pair, row in pairs.items():
            alloc[pair] = row
        mech.add_pairs([pair for pair in pairs if pair not in mech.rows])
        dropped = [k for k in mech.keys if len(k) > 1 and k not in alloc]  # pairs the policy dropped
        mech.remove_many(dropped)
        self._forget(dropped)
        # no pairs and the problem's jobs are the entries, in entry order: its rows are the matrix
        solo = not mech._pairs and len(problem.job_ids) == len(mech.keys)
        same = solo and [k[0] for k in mech.keys] == problem.job_ids
        mech.set_allocation(alloc, allocation.x if same else None)
        if len(self.solves) > 1:  # the one before stops being the latest: keep its summary
            before = self.solves[-1]
            self.solves[-1] = Solve(before.time_s, before.job_ids, before.allocation.summary())
        self.last_solve = Solve(t, problem.job_ids, allocation)
        self.solves.append(self.last_solve)
        type_order = self.config.type_order
        self.order = self._fixed_order(type_order) if type_order is not None else visiting_order(problem.throughput)
        self.need_update = False

    def _visiting_order(self) -> list[int]:
        mode = self.config.visit_order
        if mode == "spec":
            return list(range(len(self.types)))
        if mode == "shuffle" or (mode == "gavel" and not self.policy.perf_aware):
            order = list(self.order)
            self._shuffle.shuffle(order)
            return order
        return self.order

    def step(self) -> RoundRecord | None:
        return self._step(None)  # type: ignore[return-value]  # None: never a batch

    def step_many(
        self, until_s: float = math.inf, one_round: Callable[[], bool] | None = None
    ) -> RoundRecord | RoundBatch | None:
        """`step`, except that with `config.round_loop == "compiled"`, where the case allows it,
        the rounds up to the next event (a job finishing, an arrival, a re-solve due, a round
        ending after `until_s`) run in one compiled call and come back as one RoundBatch.
        `one_round`, asked after the new jobs are admitted: when it says so, only one round
        runs (a caller that stops on the number of active jobs checks after every round)."""
        if self.config.round_loop != "compiled" or not self._compiled_case():
            return self.step()
        return self._step(until_s, one_round)

    def _step(
        self, until_s: float | None, one_round: Callable[[], bool] | None = None
    ) -> RoundRecord | RoundBatch | None:
        config, mech = self.config, self.mech
        compat = config.gavel_compat
        while True:
            self._pull()
            if self.t is None or not (self.active or self.pending) or self.n_rounds >= config.max_rounds:
                return None
            self._admit()
            if not self.active and not compat:
                self.t = self.pending[0].arrival_s
                continue
            interval_ok = (
                mech.last_reset is None
                or (compat and mech.last_reset == 0)
                or self.t - mech.last_reset >= config.min_resolve_interval_s
            )
            held = self._held() if self.restart is not None else None  # before a re-solve drops pairs
            if self.need_update and interval_ok:
                self._resolve()
            if until_s is not None and not mech._pairs and not (one_round is not None and one_round()):
                batch = self._compiled_rounds(until_s)
                if batch is not None:
                    return batch
            if self._entries_version != mech.version:  # (the compiled rounds keep their own)
                self._refresh_entry_caches()
            placements = self._choose_and_place()
            if placements:
                return self._execute(placements, held)
            if self.pending:
                self.t = self.pending[0].arrival_s
                continue
            if compat and self.need_update and mech.last_reset != 0:
                mech.force_reset()  # Gavel forces a reset when nothing runs and no job is queued
                continue
            raise InputError(
                "no remaining job can be placed on the cluster "
                f"({', '.join(sorted(self.active))}); check the policy and the job sizes"
            )

    def _refresh_entry_caches(self) -> None:
        """Per-entry caches, filled for new entries only, after the entries changed."""
        mech, runnable, scale = self.mech, self._runnable, self._scale
        for key in mech.rows.keys() - runnable.keys():
            self.runnable(key)
        for key in mech.rows.keys() - scale.keys():
            scale[key] = self.active[key[0]].scale_factor
        n = len(mech.keys)
        self._ok = np.array([runnable[k] for k in mech.keys], dtype=bool).reshape(n, len(self.types))
        self._entries_version = mech.version

    def _choose_and_place(self) -> list[Placement]:
        """This round's fill and placement, within the tenants' quotas when the cluster has any."""
        tenants = self.cluster.tenants
        if tenants is None or not tenants.has_quotas:
            return self._fill_and_place()
        codes = self._quota_allowance(tenants)
        try:
            return self._fill_and_place()
        finally:
            self._settle_quota(tenants, codes)

    def _quota_allowance(self, tenants: Tenants) -> dict[str, int]:
        """The mechanism's allowance this round, tenant x type: GPUs a tenant with a quota may take.

        Each (tenant, type) holds a credit of GPUs: it starts at the quota, pays for the GPUs
        the tenant takes in a round, and grows back by the quota each round up to the larger of
        the quota and the tenant's largest gang. So a tenant holds at most its quota on average
        (the allocation LP's bound, kept round by round), and a gang larger than the quota runs
        in turns. Types without a quota: no limit. Returns tenant -> row of the allowance."""
        codes: dict[str, int] = {}
        tenant_of: dict[Key, int] = {}
        for key in self.mech.keys:
            entity = self.active[key[0]].entity
            if tenants.quota(entity):
                tenant_of[key] = codes.setdefault(tenant_name(entity), len(codes))
        allowance = np.full((len(codes), len(self.types)), np.inf)
        for name, g in codes.items():
            quota, credit = tenants.quota(None if name == NO_ENTITY else name), self.quota_credit.get(name, {})
            for j, w in enumerate(self.types):
                if w in quota:
                    allowance[g, j] = credit.get(w, quota[w])
        self.mech.tenant_of, self.mech.allowance = tenant_of, allowance.copy()
        self._largest_gang = {}
        for key, g in tenant_of.items():
            self._largest_gang[g] = max(self._largest_gang.get(g, 0), self._scale.get(key, 1))
        return codes

    def _settle_quota(self, tenants: Tenants, codes: dict[str, int]) -> None:
        """Carry each credit over: what the round left, plus the quota, capped (see above)."""
        left = self.mech.allowance
        assert left is not None  # set by _quota_allowance for this round
        for name, g in codes.items():
            quota = tenants.quota(None if name == NO_ENTITY else name)
            credit = self.quota_credit.setdefault(name, {})
            for j, w in enumerate(self.types):
                if w in quota:
                    cap = max(quota[w], float(self._largest_gang.get(g, 0)))
                    credit[w] = min(cap, float(left[g, j]) + quota[w])
        self.mech.tenant_of = self.mech.allowance = None

    def _fill_and_place(self) -> list[Placement]:
        """This round's fill and placement (plus the backfill of GPUs a chosen gang left)."""
        mech, compat, fifo = self.mech, self.config.gavel_compat, self.policy.fifo
        runnable, scale = self._runnable, self._scale
        order = self._visiting_order()
        spread_ok = None if compat else self._spread_ok
        whole = not compat  # Gavel's spill placement in its compatibility mode
        if self.migration_aware:
            costs = self._entry_costs()
            chosen = mech.select_migration_aware(order, scale, runnable, costs, self._clock(), fifo=fifo)
            protected = [key for key, p in mech.previous.items() if key in costs and self._costs_on(key, p)]
            placements = mech.place(
                chosen, scale, allocated_only=compat, protected=protected, whole_gangs=whole, spread_ok=spread_ok
            )
        else:
            chosen = mech.select(order, scale, runnable, fifo=fifo, ok=self._ok)
            placements = mech.place(chosen, scale, allocated_only=compat, whole_gangs=whole, spread_ok=spread_ok)
        if mech.unplaced:  # GPUs a gang could not use go to the next entries in the fill's order
            placements = placements + mech.backfill(order, scale, fifo=fifo, spread_ok=spread_ok)
        return placements

    # compiled rounds -------------------------------------------------------
    def _compiled_case(self) -> bool:
        """Whether `planner.rounds.compiled` can run this engine's rounds (asked at every
        `step_many`, a few attribute reads; the per-entry conditions, 1 GPU and no pairs, are
        checked before each compiled call)."""
        config, tenants = self.config, self.cluster.tenants
        if not compiled_rounds.available():
            return False
        fixed = config.visit_order in ("fastest", "spec") or (config.visit_order == "gavel" and self.policy.perf_aware)
        return (
            config.gavel_compat
            and self.restart is None
            and not self.migration_aware
            and (tenants is None or not tenants.has_quotas)
            and not config.keep_rounds
            and fixed
        )

    def _compiled_arrays(self) -> tuple | None:
        """Per-entry arrays that change only with the entries or a re-solve (cached until then);
        None when some entry is not one single-GPU job."""
        mech = self.mech
        cached = self._compiled_cache
        if cached is not None and cached[0] == mech.version and cached[1] is mech.alloc:
            return cached[2]
        keys = mech.keys
        arrays = None
        if not mech._pairs:
            books, alloc = self.compiled_books, mech.alloc
            jn = np.ascontiguousarray(mech._member_rows.array[:, 0])  # each entry's (only) job
            books.grow()
            known = books.known[jn]
            if not known.all():  # jobs seen for the first time: note their fixed data
                numbers, outcomes = self._type_number, self.outcomes
                new_i = np.flatnonzero(~known)
                new, ids = jn[new_i], [keys[i][0] for i in new_i.tolist()]
                books.total[new] = [outcomes[jid].job.total_steps for jid in ids]
                books.type_number[new] = [numbers[jid] if jid in numbers else self._number_type(jid) for jid in ids]
                scale = [outcomes[jid].job.scale_factor for jid in ids]
                books.scale[new] = scale
                books.multi_gpu = books.multi_gpu or max(scale) > 1
                books.in_alloc[new] = [(jid,) in alloc for jid in ids]
                books.outcome[new] = [outcomes[jid] for jid in ids]
                books.known[new] = True
            # every entry needs 1 GPU (asked of the entries only once some job needed more)
            if len(jn) and (not books.multi_gpu or books.scale[jn].max() == 1):
                if alloc is not books.alloc_seen:  # a re-solve: which entries the allocation has
                    books.in_alloc[jn] = [k in alloc for k in keys]
                    books.alloc_seen = alloc
                table = self._solo_table
                if len(table) < len(self._numbered_types):  # rows for job types seen since
                    table.extend(
                        [r[0] for r in self._type_rates((t,))] for t in range(len(table), len(self._numbered_types))
                    )
                    self._solo_array = np.array(table, dtype=float).reshape(len(table), len(self.types))
                rates = self._solo_array[books.type_number[jn]]
                alloc_rows = np.ascontiguousarray(mech._alloc_matrix())
                ok = rates > 0  # `runnable` of a job alone: where its rate is positive
                arrays = (books.outcome[jn], rates, ok, books.total[jn], books.in_alloc[jn], alloc_rows, jn)
        self._compiled_cache = (mech.version, mech.alloc, arrays)
        return arrays

    def _compiled_buffers(self, K: int, G: int) -> tuple:
        """Output buffers of the compiled call, kept between calls (results are copied out)."""
        buffers = self._compiled_out
        if buffers is None or buffers[0] != (K, G):
            buffers = self._compiled_out = (
                (K, G),
                np.empty(K), np.empty(K), np.empty(K, dtype=np.int64), np.empty(K, dtype=np.int64),
                np.empty(K + 1, dtype=np.int64),
                np.empty(K * G, dtype=np.int64), np.empty(K * G, dtype=np.int64),
                np.empty(K * G, dtype=np.int64), np.empty(K * G, dtype=np.int64),
                np.empty(G), np.empty(G, dtype=bool), np.empty(G),
            )  # fmt: skip
        return buffers[1:]

    def _geometry(self) -> tuple:
        """Per worker type: GPUs, nodes, GPUs per node, node name -> number, node names; and
        the GPUs of all types (cached)."""
        geometry = self._compiled_geometry
        if geometry is None:
            specs = [self.cluster.worker_types[w] for w in self.types]
            geometry = self._compiled_geometry = (
                np.array([s.gpus for s in specs], dtype=np.int64),
                np.array([len(s.nodes) for s in specs], dtype=np.int64),
                np.array([s.gpus_per_node for s in specs], dtype=np.int64),
                [{node: a for a, node in enumerate(s.nodes)} for s in specs],
                [list(s.nodes) for s in specs],
                sum(s.gpus for s in specs),
            )
        return geometry

    def _reload_leases(self, jn: np.ndarray, node_index: list[dict[str, int]]) -> None:
        """The leases were last set by Python (a Python round, a restore, move_lease): into the books."""
        mech, lease, type_index = self.mech, self.compiled_books.lease, self._type_index
        rows = mech.rows
        lease[jn] = -1
        for key, p in mech.previous.items():
            i = rows.get(key)
            if i is None or len(p.gpus) != 1:
                continue
            j = type_index[p.worker_type]
            node, g = p.gpus[0]
            lease[jn[i]] = (j, node_index[j][node], g)

    def _compiled_rounds(self, until_s: float) -> RoundBatch | None:
        """Rounds up to the next event in one compiled call (None: not this time, the Python
        step runs the round). State goes back into the engine and the mechanism exactly as the
        Python rounds would have left it; the last round's Placements are built only when read
        (`RoundMechanism.defer_previous`, `RoundBatch.last`)."""
        mech, config = self.mech, self.config
        keys = mech.keys
        n = len(keys)
        arrays = self._compiled_arrays() if n else None
        if arrays is None:  # no entries, or one that is not a single-GPU job
            return None
        entry_outcomes, rates, ok, total, has_alloc, alloc, jn = arrays
        outcomes, types = self.outcomes, self.types
        books = self.compiled_books
        steps = np.fromiter(map(_STEPS_DONE, entry_outcomes), dtype=float, count=n)
        cap, nodes, per_node, node_index, node_names, G = self._geometry()
        if mech._previous_source is None or mech._previous_source is not self._lease_source:
            self._reload_leases(jn, node_index)
        left = config.max_rounds - self.n_rounds
        K = max(1, min(left + 1, 256))  # room for one more: the call then stops at max_rounds, not full
        busy = np.array([self.busy[w] for w in types], dtype=float)
        (starts, ends, n_placed, n_same, offsets, pl_entry, pl_type, pl_node, pl_gpu,
         last_steps, last_is_int, last_finish) = self._compiled_buffers(K, G)  # fmt: skip
        finished = np.zeros(n, dtype=bool)
        last_reset = math.nan if mech.last_reset is None else mech.last_reset
        next_arrival = self.pending[0].arrival_s if self.pending else math.inf
        ran = compiled_rounds.run_rounds(
            self._clock(), self._round_origin, float(config.round_s), float(last_reset),
            float(config.min_resolve_interval_s), bool(self.need_update), float(next_arrival), float(until_s),
            left, bool(self.policy.fifo),
            mech._spent, mech._deficit, alloc, has_alloc, ok, rates, mech.worker_time, busy,
            steps, total, np.asarray(self._visiting_order(), dtype=np.int64), cap, nodes, per_node,
            jn, books.lease, books.gpu_s, books.held, books.idle,
            starts, ends, n_placed, n_same, offsets, pl_entry, pl_type, pl_node, pl_gpu,
            last_steps, last_is_int, last_finish, finished,
        )  # fmt: skip
        if ran is None:  # numba could not compile the loop: this round, and the rest, in Python
            return None
        k, stop = ran
        stats = self.compiled_stats
        stats["calls"] += 1
        stats["stops"][stop] += 1
        if k == 0:
            return None
        stats["rounds"] += k
        # back into the engine: busy time, steps, the clock; the leases stay in `books` until read
        for j, w in enumerate(types):
            self.busy[w] = float(busy[j])
        used, first = int(offsets[k]), int(offsets[k - 1])
        # the entries placed in any of the rounds (np.unique costs ten times more on these sizes)
        moved = np.flatnonzero(np.bincount(pl_entry[:used], minlength=n)) if k > 1 else pl_entry[first:used]
        for i, v in zip(moved.tolist(), steps[moved].tolist()):
            entry_outcomes[i].steps_done = v
        last = (
            pl_entry[first:used].copy(), pl_type[first:used].copy(), pl_node[first:used].copy(),
            pl_gpu[first:used].copy(), last_steps[: used - first].copy(), last_is_int[: used - first].copy(),
        )  # fmt: skip
        done = _finished(stop, keys, last[0], finished, last_finish)
        end, start = float(ends[k - 1]), float(starts[k - 1])
        index = self.n_rounds + k - 1

        def placements() -> list[Placement]:
            i, j, a, g = (x.tolist() for x in last[:4])
            return [Placement(keys_now[e], types[t], ((node_names[t][n_], g_),)) for e, t, n_, g_ in zip(i, j, a, g)]

        keys_now = list(keys)  # the entries as the call saw them (completions remove some below)

        def previous() -> dict[Key, Placement]:
            live = mech.rows
            return {p.jobs: p for p in placements() if p.jobs in live}

        def record() -> RoundRecord:
            steps_, ints = last[4].tolist(), last[5].tolist()
            planned = {keys_now[e][0]: int(v) if is_int else v for e, v, is_int in zip(last[0].tolist(), steps_, ints)}
            return RoundRecord(index, start, end, placements(), planned, [])

        batch = RoundBatch(
            starts[:k].copy(), ends[:k].copy(), n_placed[:k].copy(), n_same[:k].copy(),
            [jid for jid, _ in done], index, record,
        )  # fmt: skip
        self.n_rounds += k
        self._round_origin = end
        mech.unplaced, mech.spread, mech._left, mech._ranking, mech._leases = [], set(), {}, None, {}
        mech.defer_previous(previous)
        self._lease_source = previous
        for jid, finish in done:
            outcomes[jid].finish_s = finish
        if done:
            self._complete(*(jid for jid, _ in done))
        self.t = end
        return batch

    # restarts --------------------------------------------------------------
    def _held(self) -> dict[str, tuple[str, frozenset[Gpu]]]:
        """Per running job: the worker type and GPUs it held last round."""
        return {jid: (p.worker_type, frozenset(p.gpus)) for p in self.mech.previous.values() for jid in p.jobs}

    def restart_cost(self, job_id: str, worker_type: str) -> float:
        """Seconds the job loses when it starts on new GPUs of `worker_type` (0 without costs)."""
        if self.restart is None:
            return 0.0
        cost = self._restart_cost.get((job_id, worker_type))
        if cost is None:
            job_type = self.outcomes[job_id].job.job_type
            cost = self._restart_cost[(job_id, worker_type)] = self.restart.cost(worker_type, job_type)
        return cost

    def _entry_costs(self) -> dict[Key, np.ndarray]:
        """Per entry, per worker type: its restart cost (a pair: its costlier member's)."""
        return {
            key: np.array([max(self.restart_cost(jid, w) for jid in key) for w in self.types])
            for key in self.mech.job_time
        }

    def _costs_on(self, key: Key, placement: Placement) -> bool:
        return any(self.restart_cost(jid, placement.worker_type) > 0 for jid in key)

    def _restart_s(self, jid: str, p: Placement, held: dict[str, tuple[str, frozenset[Gpu]]]) -> float:
        """Seconds of this round the job spends (re)starting, counted in the tally: 0 on a lease extension."""
        if held.get(jid) == (p.worker_type, frozenset(p.gpus)):
            return 0.0
        lost = min(self.restart_cost(jid, p.worker_type), self.config.round_s)
        tally = self.restart_tally
        if tally is not None:
            tally.starts += 1
            last = self._last_type.get(jid)
            tally.across_types += last is not None and last != p.worker_type
            self._last_type[jid] = p.worker_type
            tally.lost_gpu_s[p.worker_type] += lost * len(p.gpus) / len(p.jobs)  # its share of the GPUs idles
        return lost

    def _execute(
        self, placements: list[Placement], held: dict[str, tuple[str, frozenset[Gpu]]] | None = None
    ) -> RoundRecord:
        t, tau = self._clock(), self.config.round_s
        compat = self.config.gavel_compat
        outcomes, type_index = self.outcomes, self._type_index
        planned: dict[str, float] = {}
        finish: dict[str, float] = {}
        ends: list[float] = []  # per placement: when its slowest member finishes
        elapsed: list[float] = []  # per placement: the time it is charged (from `origin`)
        finished: list[str] = []  # jobs done this round, in placement order
        origin = self._round_origin if compat else t
        busy = self.busy
        floor, ceil, rates, inf = math.floor, math.ceil, self._rates, math.inf
        spread = self.mech.spread  # gangs over nodes that share no domain: the table's spread rates
        # One pass: every job is in one placement, so its progress can be booked at once; the
        # finished jobs leave after the round's times are recorded, in the order they were found.
        for p in placements:
            key, w = p.jobs, p.worker_type
            j = type_index[w]
            cached = rates.get(key)
            per_job = cached[j] if cached is not None else self.rate(key, j)
            if spread and key in spread:
                per_job = self.spread_rate(key, j)
            if held is None and len(key) == 1:  # a job alone, no restart costs: the common case, inlined
                jid, r = key[0], per_job[0]
                out = outcomes[jid]
                left = out.job.total_steps - out.steps_done
                n = min(max(1, floor(r * tau)), left if compat else ceil(left - 1e-9))
                planned[jid] = n
                finish[jid] = done = t + 0.0 + n / r
                slowest = done if done > -inf else -inf
                out.steps_done += n
                if out.steps_done >= out.job.total_steps - 1e-9:
                    finished.append(jid)
            else:
                slowest = self._progress(p, per_job, t, held, planned, finish)
                for jid in key:
                    out = outcomes[jid]
                    out.steps_done += planned[jid]
                    if out.steps_done >= out.job.total_steps - 1e-9:
                        finished.append(jid)
            ends.append(slowest)
            elapsed.append(spent := slowest - origin)
            busy[w] += spent * len(p.gpus)
        end = max(ends)
        record = RoundRecord(self.n_rounds, t, end, placements, planned, list(self.mech.unplaced))
        if self._with_domains:
            record.domains = self._shared_domains(placements)
        self.n_rounds += 1
        if self.config.keep_rounds:
            self.rounds.append(record)
        self._round_origin = end
        self.mech.record_round([(p.jobs, type_index[p.worker_type]) for p in placements], elapsed)
        for jid in finished:
            outcomes[jid].finish_s = finish[jid]
        if finished:
            self._complete(*finished)
        self.t = end
        return record

    def _shared_domains(self, placements: list[Placement]) -> dict[Key, dict[str, str]]:
        """The switch / NVLink domain shared by all nodes of each multi-node placement."""
        out: dict[Key, dict[str, str]] = {}
        for p in placements:
            if len(p.gpus) > 1:
                nodes = dict.fromkeys(node for node, _ in p.gpus)
                if len(nodes) > 1 and (shared := self.cluster.worker_types[p.worker_type].shared_domains(nodes)):
                    out[p.jobs] = shared
        return out

    def _progress(
        self,
        p: Placement,
        per_job: tuple[float, ...],
        t: float,
        held: dict[str, tuple[str, frozenset[Gpu]]] | None,
        planned: dict[str, float],
        finish: dict[str, float],
    ) -> float:
        """Steps (into `planned`) and finish times (into `finish`) of a placement's jobs this
        round, restart costs included; returns when its slowest member finishes."""
        tau, compat = self.config.round_s, self.config.gavel_compat
        floor, ceil, outcomes = math.floor, math.ceil, self.outcomes
        slowest = -math.inf
        for jid, r in zip(p.jobs, per_job):
            out = outcomes[jid]
            left = out.job.total_steps - out.steps_done
            lost = self._restart_s(jid, p, held) if held is not None else 0.0
            if lost > 0:
                # Restarting takes `lost` seconds of the round: fewer steps, but still at least
                # one (a cost of a whole round would otherwise stall time-shared jobs for ever).
                n: float = min(max(1, floor(r * (tau - lost))), ceil(left - 1e-9))
            else:
                # At least one step, so a job slower than one step per round still progresses.
                n = min(max(1, floor(r * tau)), left if compat else ceil(left - 1e-9))
            planned[jid] = n
            finish[jid] = done = t + lost + n / r
            if done > slowest:
                slowest = done
        if compat and len(p.jobs) > 1:
            finish.update({jid: slowest for jid in p.jobs})
        return slowest

    def _complete(self, *job_ids: str) -> None:
        """These jobs leave: out of the active set and, with every entry they are in, the books."""
        for jid in job_ids:
            del self.active[jid]
            self._type_number.pop(jid, None)
        entries = self.mech.entries_of(*job_ids)
        self.mech.remove_many(entries)
        self._forget(entries)
        self.need_update = True
        self.finished += len(job_ids)

    def _forget(self, entries: Iterable[Key]) -> None:
        """Drop what the per-entry caches hold for entries that left the mechanism (a packed
        re-solve drops hundreds of pairs; kept, the caches would grow with every pair ever proposed)."""
        rates, runnable, scale = self._rates, self._runnable, self._scale
        for key in entries:
            rates.pop(key, None)
            runnable.pop(key, None)
            scale.pop(key, None)

    # whole runs ------------------------------------------------------------
    def run(self, on_round: Callable[[RoundRecord, int, int], None] | None = None) -> EngineResult:
        started = time.perf_counter()
        while (record := self.step()) is not None:
            if on_round:
                on_round(record, self.finished, len(self.outcomes))
        return self.result(time.perf_counter() - started)

    def result(self, wall_s: float = 0.0) -> EngineResult:
        makespan = max((o.finish_s for o in self.outcomes.values() if o.finish_s is not None), default=self.t or 0.0)
        return EngineResult(
            self.rounds,
            self.outcomes,
            self.solves,
            self.busy,
            makespan,
            self.types,
            {w: self.cluster.capacity(w) for w in self.types},
            wall_s,
            self.restart_tally,
        )


def _finished(
    stop: int, keys: list[Key], entries: np.ndarray, finished: np.ndarray, finish: np.ndarray
) -> list[tuple[str, float]]:
    """(job, finish time) of each job a compiled call's last round finished, in placement order
    (`entries`, `finish`: per placement); jobs finish only in a call's last round, which then stops."""
    if stop != compiled_rounds.STOP_FINISHED:
        return []
    q = np.flatnonzero(finished[entries])
    return [(keys[i][0], f) for i, f in zip(entries[q].tolist(), finish[q].tolist())]


def run_engine(
    jobs: list[Job],
    table: ThroughputTable,
    cluster: Cluster,
    policy: Policy,
    config: EngineConfig | None = None,
    on_round: Callable[[RoundRecord, int, int], None] | None = None,
) -> EngineResult:
    """Run until every job finished (or `config.max_rounds`); `on_round(rec, done, total)` reports progress."""
    return Engine(table, cluster, policy, config, jobs).run(on_round)
