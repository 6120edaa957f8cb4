"""Finish times of the jobs a short plan leaves running: the policy's allocation, run forward as a fluid.

`rota plan --rounds K` (or `--horizon`) plans K rounds; the jobs still running then need an
expected finish. Their last allocation is a poor guide: as other jobs finish, a job's share
grows. So, from where the planned rounds end, `fluid_finishes` solves the policy again for the
jobs left, runs every job at the rate its shares give it until the next one finishes or
arrives, and repeats.

`PolicyRates` turns an allocation into rates the way the round mechanism realises it over
many rounds (`round_shares`: a job runs on one type per round, idle GPUs go to whoever can use
them) and charges restarts (`starts_per_round`). Whole steps, node placement and the rounds'
fixed length are left out.

`fluid_finishes` is the loop, over any rate function; `PolicyRates` is the rate function of a
policy on a cluster; `engine_finishes` reads where an engine stopped, simulates the rounds on
for a bounded number of job-rounds on a copy of it (exact, where it reaches), and runs the two
from there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.formats.cluster import Cluster
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.policies.base import Allocation, Policy, Stateful
from planner.policies.problem import build_problem
from planner.rounds.engine import Engine, EngineConfig
from planner.rounds.mechanism import DEFAULT_ROUND_S, visiting_order
from planner.rounds.restart import RestartCosts

# A re-solve costs about one unit of work per job and per co-located pair it weighs (~10 µs
# each for the LP policies). The re-solves after the first may cost MIN_WORK units in all, or
# WORK_FACTOR times the first if more: while that allows one re-solve per event (a job finishes
# or arrives) each gets one, else a step lets several events pass. 10^5 jobs: a few re-solves,
# a fraction of one full solve in all, instead of 10^5.
MIN_WORK = 10_000.0
WORK_FACTOR = 0.25
# Before the fluid takes over, the rounds themselves are simulated on (not written) for up to
# this many job-rounds (a round of n mechanism entries, jobs and co-located pairs, counts n): a
# list of tens of jobs is simulated to its end (the lab list: ~14,000), 2048 jobs for 9 rounds,
# 10^5 jobs or 2048 packed for none. Per job-round the engine costs about 10 µs (LAS).
LOOKAHEAD_JOB_ROUNDS = 20_000.0
# Steps left below this fraction of the job's total count as done (float dust after many steps).
DONE_FRACTION = 1e-9


@dataclass(frozen=True)
class FluidJobs:
    """The jobs a fluid run starts with, as columns (10^5 of them: no object per job)."""

    ids: list[str]
    steps_left: np.ndarray
    arrival_s: np.ndarray  # a job arriving after the start joins then
    total_steps: np.ndarray  # scales the 'done' tolerance (steps_left where larger)

    @classmethod
    def of(
        cls,
        steps_left: Mapping[str, float],
        arrival_s: Mapping[str, float] | None = None,
        total_steps: Mapping[str, float] | None = None,
    ) -> FluidJobs:
        """From per-id values (arrival 0 and total = left where not given)."""
        ids = list(steps_left)
        left = np.array([steps_left[i] for i in ids], dtype=float)
        arrival = np.array([(arrival_s or {}).get(i, 0.0) for i in ids], dtype=float)
        total = np.array([(total_steps or {}).get(i, steps_left[i]) for i in ids], dtype=float)
        return cls(ids, left, arrival, total)


@dataclass(frozen=True)
class Rates:
    steps_per_s: np.ndarray  # per job asked, in the order asked
    size: float  # jobs plus co-located pairs the allocation weighs: what solving it again costs
    solved: bool = True  # False: an allocation at hand was used, at no cost


RateFn = Callable[[np.ndarray, float, np.ndarray], Rates]
"""(the jobs present, as indices into the fluid's jobs; time s; their steps left) -> their rates."""


def fluid_finishes(
    jobs: FluidJobs,
    start_s: float,
    rates: RateFn,
    *,
    min_work: float = MIN_WORK,
    work_factor: float = WORK_FACTOR,
) -> dict[str, float]:
    """Finish time of each job when every job runs at `rates` between events.

    From `start_s`, repeatedly: ask `rates` for the jobs present, advance the clock to the next
    event (a job finishes at its rate, or one arrives), book progress, drop the finished jobs.
    A job whose rate stays 0 while nothing else can change (no job left to finish at a positive
    rate, none to arrive) gets no finish. When the work budget (see MIN_WORK) runs short, a step
    lets several events pass, each job finishing at its own time at the step's rates."""
    ids = np.array(jobs.ids, dtype=object)
    left = np.asarray(jobs.steps_left, dtype=float).copy()
    arrival = np.asarray(jobs.arrival_s, dtype=float)
    dust = DONE_FRACTION * np.maximum(np.asarray(jobs.total_steps, dtype=float), np.maximum(left, 1.0))
    by_arrival = np.argsort(arrival, kind="stable")
    waiting = by_arrival[arrival[by_arrival] > start_s]  # in arrival order
    present = np.flatnonzero(arrival <= start_s)
    finish: dict[str, float] = dict.fromkeys(ids[present[left[present] <= dust[present]]].tolist(), start_s)
    present = present[left[present] > dust[present]]
    t, budget = start_s, None
    while len(present) or len(waiting):
        if not len(present):
            t = max(t, float(arrival[waiting[0]]))
        n_new = int(np.searchsorted(arrival[waiting], t, side="right"))
        present, waiting = np.concatenate((present, waiting[:n_new])), waiting[n_new:]
        if not len(present):
            continue
        asked = rates(present, t, left[present])
        rate = np.asarray(asked.steps_per_s, dtype=float)
        if budget is None:  # the first call sets what the re-solves after it may cost in all
            budget = max(min_work, work_factor * asked.size)
        elif asked.solved:
            budget -= asked.size
        running = rate > 0
        if not running.any() and not len(waiting):
            break  # nothing moves and nothing will: the rest never finish
        until = np.full(len(present), math.inf)
        until[running] = t + left[present[running]] / rate[running]
        events = np.sort(np.concatenate((until[running], arrival[waiting])))
        # One re-solve per event while the budget allows one for each job left (their sizes
        # shrinking to 0: about half this size on average); else steps that each let a fraction
        # f of the events pass, f = size / (budget + size), so that the geometric series of
        # re-solves to come, size · (1 - f) / f, fits the budget.
        size = asked.size
        k = 1 if len(present) * size / 2 <= budget else math.ceil(len(events) * size / (max(budget, 0.0) + size))
        end = float(events[min(k, len(events)) - 1])
        done = running & (until <= end)
        finish.update(zip(ids[present[done]].tolist(), until[done].tolist()))
        moving = present[~done]
        left[moving] = np.maximum(0.0, left[moving] - rate[~done] * (end - t))
        dusted = left[moving] <= dust[moving]  # reached `end` with float dust left: done there
        finish.update(dict.fromkeys(ids[moving[dusted]].tolist(), end))
        present = moving[~dusted]
        t = end
    return finish


# --------------------------------------------------------------------------- the round mechanism


def round_shares(
    x: np.ndarray,
    runnable: np.ndarray,
    scale: np.ndarray,
    free: np.ndarray,
    available: np.ndarray,
    order: Sequence[int],
    *,
    fill: bool = True,
) -> np.ndarray:
    """(jobs, types) time fractions the round mechanism gives an allocation `x`, over many rounds.

    Every round it visits the worker types in `order` and fills each: first with the jobs
    allocated time there (when they do not all fit, in proportion to x: it ranks them by
    allocation over time received), then what is left, evenly (its tie-break), to those same
    jobs and, with `fill`, then to any job that can run there (FIFO policies run only allocated
    jobs). A job runs on one type per round, so time it gets on an earlier type is time it is
    not `available` for later ones, even where allocated. `free`: GPUs per type; `available`:
    per job, the time it can run alone (1 less its co-located time)."""
    shares = np.zeros(x.shape)
    available = available.copy()
    for j in order:
        gpus = float(free[j])
        can = runnable[:, j] & (available > 1e-12)
        allocated = can & (x[:, j] > 0)
        own = np.minimum(x[:, j], available)
        steps: list[tuple[np.ndarray, np.ndarray | None]] = [(allocated, own), (allocated, None)]
        if fill:
            steps.append((can & ~allocated, None))
        for group, cap in steps:
            weight = None if cap is None else cap[group]
            given = water_fill(available[group] if cap is None else cap[group], scale[group], weight, gpus)
            shares[group, j] += given
            available[group] -= given
            gpus -= float(given @ scale[group])
    return shares


def water_fill(caps: np.ndarray, sizes: np.ndarray, weight: np.ndarray | None, gpus: float) -> np.ndarray:
    """Time fractions min(caps_i, λ·w_i) with the largest λ that keeps Σ sizes_i · share_i within
    `gpus` (w = 1 without `weight`)."""
    if not len(caps) or gpus <= 1e-9:
        return np.zeros(len(caps))
    if float(caps @ sizes) <= gpus:
        return caps.copy()  # room for all of them, all their time
    w = np.ones(len(caps)) if weight is None else weight
    stops = caps / w  # the λ at which each one reaches its cap
    by_stop = np.argsort(stops, kind="stable")
    stops, caps_s, sizes_s, w_s = stops[by_stop], caps[by_stop], sizes[by_stop], w[by_stop]
    capped = np.concatenate(([0.0], np.cumsum(caps_s * sizes_s)))[:-1]  # GPUs of those stopped before k
    growing = np.cumsum((w_s * sizes_s)[::-1])[::-1]  # GPUs per unit λ of k and after
    levels = (gpus - capped) / growing
    k = int(np.argmax(levels <= stops))  # the first job still below its cap at its level
    return np.minimum(caps, levels[k] * w)


def starts_per_round(x: np.ndarray, busy: np.ndarray, *, moves: bool = True) -> np.ndarray:
    """Per job: how many rounds in one it starts on GPUs it did not hold the round before.

    The mechanism interleaves a job's rounds as finely as it can (priorities follow the time
    received), so take its rounds as labels (a worker type, or not running) spread evenly: when
    one type holds half its rounds or more, every other round is alone and the one after it
    returns there, 1 + busy - 2·x_max starts; with no such type every running round is a start
    (busy). Without `moves` (migration-aware rounds keep jobs on their type) only a return
    after a pause starts: min(busy, 1 - busy). `x`: (jobs, types) time alone; `busy`: in all."""
    if not moves:
        return np.clip(np.minimum(busy, 1.0 - busy), 0.0, None)
    return np.clip(np.minimum(busy, 1.0 + busy - 2.0 * x.max(axis=1, initial=0.0)), 0.0, None)


# --------------------------------------------------------------------------- a policy's rates


@dataclass
class PolicyRates:
    """A `RateFn`: the policy's allocation for the jobs present, as the steps/s rounds give them.

    `jobs` are the fluid's jobs, in its order. The policy sees `decision_table` (as the engine's
    policy does); progress follows `table`, the true throughputs. A job's rate is Σ_j y_ij T_ij
    over worker types, y its `round_shares` of the allocation, plus, for every co-located pair
    it is in, the pair's time fractions times its rate in the pair; each start on new GPUs
    (`starts_per_round`) costs it `restart` seconds of its round. `type_order` is the
    mechanism's fixed visiting order (None: fastest first, as the engine orders them).
    `current` (job ids, allocation), if given, is used instead of solving for that very job set."""

    table: ThroughputTable
    cluster: Cluster
    policy: Policy
    jobs: Sequence[Job]
    decision_table: ThroughputTable | None = None
    restart: RestartCosts | None = None
    round_s: float = DEFAULT_ROUND_S
    migration_aware: bool = False
    type_order: Sequence[int] | None = None
    current: tuple[Sequence[str], Allocation] | None = None
    solves: int = 0  # how many times the policy was asked

    def __post_init__(self) -> None:
        names = self.cluster.names
        self._ids = [job.job_id for job in self.jobs]
        self._capacity = np.array([self.cluster.capacity(w) for w in names], dtype=float)
        # Job types by their fields (a tuple of a str and ints hashes in C; a JobType in Python).
        kinds: dict[tuple[str, int | None, int], int] = {}
        self._kinds: list[JobType] = []
        numbers = []
        for job in self.jobs:
            jt = job.job_type
            number = kinds.setdefault((jt.model, jt.batch_size, jt.scale_factor), len(kinds))
            if number == len(self._kinds):
                self._kinds.append(jt)
            numbers.append(number)
        self._kind = np.array(numbers, dtype=np.int64)
        shape = (len(self._kinds), len(names))
        fits = np.array([[self._capacity[j] >= jt.scale_factor for j in range(shape[1])] for jt in self._kinds])
        fits = fits.reshape(shape)
        solo = np.array([[self.table.solo(w, jt) for w in names] for jt in self._kinds]).reshape(shape)
        self._solo = np.where(fits, solo, 0.0)  # per job type: steps/s alone; 0 where it does not fit
        decision = self.table if self.decision_table is None else self.decision_table
        seen = [[decision.solo(w, jt) for w in names] for jt in self._kinds] if decision is not self.table else solo
        self._seen = np.where(fits, np.array(seen, dtype=float).reshape(shape), 0.0)  # what the policy sees
        costs, round_s = self.restart, self.round_s
        lost = [
            [0.0 if costs is None else min(costs.cost(w, jt), round_s) / round_s for w in names] for jt in self._kinds
        ]
        self._lost = np.array(lost, dtype=float).reshape(shape)  # the share of its round a start takes
        self._scale = np.array([jt.scale_factor for jt in self._kinds], dtype=float).reshape(-1)[self._kind]
        self._pair: dict[tuple[int, int], np.ndarray] = {}

    def __call__(self, present: np.ndarray, now: float, steps_left: np.ndarray) -> Rates:
        n, m = len(present), len(self.cluster.names)
        ids = [self._ids[k] for k in present.tolist()]
        x, pair_x, solved = self._allocation(present, ids, now, steps_left)
        kind, scale = self._kind[present], self._scale[present]
        solo = self._solo[kind]
        a, b, j, share, own, other = self._paired(ids, kind, pair_x)
        busy = _sum_at(a, share, n) + _sum_at(b, share, n)  # time each job runs in a pair
        used = _sum_at(j, share * scale[a], m)  # GPUs of each type pairs keep busy
        order = visiting_order(self._seen[kind]) if self.type_order is None else self.type_order
        alone = np.maximum(0.0, 1.0 - busy)
        y = round_shares(x, solo > 0, scale, self._capacity - used, alone, order, fill=not self.policy.fifo)
        busy += y.sum(axis=1)
        kept = np.ones((n, m))  # the fraction of its time on a type a job computes (not restarting)
        if self.restart is not None:
            starts = starts_per_round(y, busy, moves=not self.migration_aware)
            per_run = np.divide(starts, busy, out=np.zeros(n), where=busy > 0)
            kept = 1.0 - per_run[:, None] * self._lost[kind]
        rate = (y * solo * kept).sum(axis=1)
        rate += _sum_at(a, share * own * kept[a, j], n) + _sum_at(b, share * other * kept[b, j], n)
        return Rates(rate, float(n + len(pair_x)), solved)

    def _allocation(
        self, present: np.ndarray, ids: list[str], now: float, steps_left: np.ndarray
    ) -> tuple[np.ndarray, dict[tuple[str, str], np.ndarray], bool]:
        """(x with rows in `ids` order, zeros for negative dust; pair shares; whether the policy
        was asked): `current` when it is for these very jobs, else the policy's allocation."""
        known, m = self.current, len(self.cluster.names)
        if known is not None and len(known[0]) == len(ids) and set(known[0]) == set(ids):
            self.current = None  # once: the job set changes at every later call
            x = np.asarray(known[1].x, dtype=float).reshape(len(ids), m)
            if list(known[0]) != ids:
                at = {jid: i for i, jid in enumerate(ids)}
                x = x[np.argsort([at[jid] for jid in known[0]])]
            return np.where(x > 0, x, 0.0), known[1].pair_x or {}, False
        decision = self.table if self.decision_table is None else self.decision_table
        jobs = [self.jobs[k] for k in present.tolist()]
        problem = build_problem(jobs, decision, self.cluster, now=now, remaining=dict(zip(ids, steps_left.tolist())))
        allocation = self.policy.allocate(problem)
        self.solves += 1
        x = np.asarray(allocation.x, dtype=float).reshape(len(ids), m)  # build_problem keeps the order
        return np.where(x > 0, x, 0.0), allocation.pair_x or {}, True

    def _paired(
        self, ids: list[str], kind: np.ndarray, pair_x: dict[tuple[str, str], np.ndarray]
    ) -> tuple[np.ndarray, ...]:
        """(member a, member b, type, time fraction, a's rate, b's rate) of every pair given time."""
        none = np.zeros(0, dtype=np.int64)
        if not pair_x:
            return none, none, none, np.zeros(0), np.zeros(0), np.zeros(0)
        # Packing lists every candidate pair; the aggregate LP spreads a class pair's time over
        # all its job pairs, so many get some: look each pair of job types up once.
        at = {jid: i for i, jid in enumerate(ids)}
        keys = list(pair_x)
        shares = np.asarray(list(pair_x.values()), dtype=float).reshape(len(keys), -1)
        a = np.array([at.get(key[0], -1) for key in keys], dtype=np.int64)
        b = np.array([at.get(key[1], -1) for key in keys], dtype=np.int64)
        p, j = np.nonzero((shares > 0) & ((a >= 0) & (b >= 0))[:, None])
        a, b = a[p], b[p]
        n_kinds = len(self._kinds)
        combos, where = np.unique(kind[a] * n_kinds + kind[b], return_inverse=True)
        rates = np.array([self.pair(c // n_kinds, c % n_kinds) for c in combos.tolist()])
        rates = rates.reshape(len(combos), 2, -1)[where.reshape(-1)]  # pair, member, type
        picked = np.arange(len(p))
        return a, b, j, shares[p, j], rates[picked, 0, j], rates[picked, 1, j]

    def pair(self, a: int, b: int) -> np.ndarray:
        """(2, types): steps/s of job types number a and b co-located, per worker type; 0 where they do not fit."""
        rates = self._pair.get((a, b))
        if rates is None:
            first, second = self._kinds[a], self._kinds[b]
            rows = [
                self.table.pair(w, first, second) if self._capacity[j] >= first.scale_factor else (0.0, 0.0)
                for j, w in enumerate(self.cluster.names)
            ]
            rates = self._pair[(a, b)] = np.array(rows, dtype=float).reshape(-1, 2).T
        return rates


def _sum_at(index: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """out[i] = Σ values[k] over index[k] == i, as floats (bincount of nothing gives ints)."""
    return np.bincount(index, weights=values, minlength=n).astype(float, copy=False)


# --------------------------------------------------------------------------- from an engine


def engine_finishes(engine: Engine, lookahead: float = LOOKAHEAD_JOB_ROUNDS) -> dict[str, float]:
    """Expected finish of every job the engine has not finished (running, or yet to arrive), from
    where it stopped: the rounds simulated on for up to `lookahead` job-rounds (a copy of the
    engine; finishes there are the rounds' own), the fluid from where that stops. The engine's
    policy is asked again, then given its state back."""
    if engine.t is None:
        return {}
    saved = engine.policy.get_state() if isinstance(engine.policy, Stateful) else None
    try:
        ahead, finished = _look_ahead(engine, lookahead)
        return {**finished, **_fluid_from(ahead)}
    finally:
        if saved is not None and isinstance(engine.policy, Stateful):
            engine.policy.set_state(saved)


def _look_ahead(engine: Engine, budget: float) -> tuple[Engine, dict[str, float]]:
    """(an engine `budget` job-rounds further on, the finish times of the jobs that finished in
    those rounds); `engine` itself when the budget does not cover one round of its jobs."""
    if budget < _round_cost(engine):
        return engine, {}
    snapshot = engine.snapshot()
    config = dataclasses.replace(snapshot.config, max_rounds=EngineConfig.max_rounds, keep_rounds=False)
    ahead = Engine.from_snapshot(
        dataclasses.replace(snapshot, config=config),
        engine.table,
        engine.cluster,
        engine.policy,
        engine.decision_table,
        engine.restart,
        engine.migration_aware,
    )
    before = {jid for jid, out in engine.outcomes.items() if out.finish_s is None}
    spent, cost = 0, _round_cost(ahead)
    while spent + cost <= budget and ahead.step() is not None:
        spent, cost = spent + cost, _round_cost(ahead)
    finished = {jid: out.finish_s for jid, out in ahead.outcomes.items() if jid in before and out.finish_s is not None}
    return ahead, finished


def _round_cost(engine: Engine) -> int:
    """What one more round costs, in job-rounds: the mechanism's entries, jobs and co-located
    pairs (packing keeps books for every candidate pair: 2048 jobs make ~10^5 entries)."""
    return max(1, len(engine.active), len(engine.mech.keys))


def _fluid_from(engine: Engine) -> dict[str, float]:
    """The fluid's finish of every job `engine` has not finished."""
    if engine.t is None:
        return {}
    outcomes = engine.outcomes
    jobs = [job for job in [*engine.active.values(), *engine.pending] if outcomes[job.job_id].finish_s is None]
    if not jobs:
        return {}
    fluid = FluidJobs(
        [job.job_id for job in jobs],
        np.array([max(0.0, job.total_steps - outcomes[job.job_id].steps_done) for job in jobs]),
        np.array([job.arrival_s for job in jobs], dtype=float),
        np.array([job.total_steps for job in jobs], dtype=float),
    )
    config, policy, solve = engine.config, engine.policy, engine.last_solve
    order = None
    if config.type_order is not None:
        order = engine.order
    elif config.visit_order == "spec":
        order = list(range(len(engine.types)))
    # The allocation the engine runs with holds until the job set changes: no need to solve it again.
    current = None if engine.need_update or solve is None else (solve.job_ids, solve.allocation)
    rates = PolicyRates(
        engine.table,
        engine.cluster,
        policy,
        jobs,
        engine.decision_table,
        engine.restart,
        config.round_s,
        engine.migration_aware,
        order,
        current,
    )
    return fluid_finishes(fluid, engine.t, rates)
