"""Simulation: the round engine driven by a trace with arrivals (spec §5.6b, §6).

There is no second mechanism: `run_simulation` feeds jobs into
`planner.rounds.engine.Engine` (lazily, for endless generated traces), steps it
round by round, and measures. A run ends when every job of the measurement
window has finished (Gavel's jobs [s, e) of a continuous trace), when a
finite trace is done, or early: when the load is found to exceed what the
cluster can serve ("saturated"), at the `max_time_s` limit ("time_limit"), or
on Ctrl-C ("interrupted", only when the caller asks for it).

A run that ended early is incomplete: its JCTs cover only the jobs that happened
to finish (the short ones, biased low), so the metrics hold no `jct_s` then,
only `censored` estimates, labelled as such (`censored_jct`).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from planner.errors import InputError
from planner.formats.cluster import GAVEL_TYPE_ORDER, Cluster
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.formats.trace import default_reference_type
from planner.modes.generator import JobGenerator
from planner.modes.metrics import BooksUsage, GpuUsage, LeaseCounter, distribution, restart_metrics, rho, utilisation
from planner.modes.tenants import refuse_barred, tenant_summary
from planner.policies import check_reuse, make_cluster_policy
from planner.policies.base import Policy, Status
from planner.policies.lp import DEFAULT_METHOD
from planner.rounds.compiled import have_numba
from planner.rounds.engine import DEFAULT_ROUND_S, Engine, EngineConfig, RoundBatch, RoundRecord
from planner.rounds.restart import charged_restarts

GAVEL_RESOLVE_INTERVAL_S = 1920.0
ROUND_LOOPS = ("auto", "python", "compiled")
OFFERED_LOAD_SAMPLE = 2000


def gavel_shuffles(policy: Policy) -> bool:
    """Gavel shuffles the worker-type order each round for policies whose internal name has
    neither 'Perf' nor 'Packing' (spec §3.1): the heterogeneity-agnostic ones, except Gandiva,
    agnostic but registered as 'Gandiva_Packing'."""
    return not policy.perf_aware and policy.name != "gandiva"


# --------------------------------------------------------------------------- inputs


@dataclass
class SimulationConfig:
    policy: str = "max_min_fairness_perf"
    round_s: float = DEFAULT_ROUND_S
    gavel_compat: bool = False
    seed: int = 0
    window: tuple[int, int] | None = None  # jobs [start, end) in arrival order; None: all
    resolve_interval_s: float | None = None  # None: 1920 s with gavel_compat, else 0
    solver_method: str = DEFAULT_METHOD
    aggregate: bool = True
    max_active_jobs: int | None = None  # saturated beyond this many jobs in the system
    max_time_s: float | None = None  # --max-hours: stop ("time_limit") when the window is unfinished by then
    restart_cost_s: float | None = None  # --restart-cost: every (re)start costs this (None: table, cluster, 0)
    migration_aware: bool = False  # keep jobs on their worker type when a move does not pay
    # "auto": the compiled round loop where numba is installed and the case allows it (identical
    # results, see planner.rounds.compiled); "python": always the reference loop; "compiled": as
    # auto, but numba must be there (the CLI refuses the option without it).
    round_loop: str = "auto"
    # LAS only: give the last solve's shares again, at most this many times in a row, while the
    # set of job classes is unchanged (planner/policies/reuse.py); 0: solve every time.
    reuse_solves: int = 0

    def engine_round_loop(self) -> str:
        """The engine's round loop for this run: "compiled" or "python"."""
        if self.round_loop not in ROUND_LOOPS:
            raise ValueError(f"unknown round loop {self.round_loop!r}; use one of {ROUND_LOOPS}")
        if self.round_loop == "auto":
            return "compiled" if have_numba() else "python"
        return self.round_loop

    def engine_config(self, policy: Policy) -> EngineConfig:
        if self.gavel_compat:
            order = "shuffle" if gavel_shuffles(policy) else "fastest"
            return EngineConfig(
                round_s=self.round_s,
                min_resolve_interval_s=self.resolve_interval,
                visit_order=order,
                seed=self.seed,
                type_order=GAVEL_TYPE_ORDER,
                keep_rounds=False,
                gavel_compat=True,
                round_loop=self.engine_round_loop(),
            )
        return EngineConfig(
            round_s=self.round_s,
            min_resolve_interval_s=self.resolve_interval,
            visit_order="gavel",
            seed=self.seed,
            keep_rounds=False,
        )

    @property
    def resolve_interval(self) -> float:
        if self.resolve_interval_s is not None:
            return self.resolve_interval_s
        return GAVEL_RESOLVE_INTERVAL_S if self.gavel_compat else 0.0


@dataclass
class Workload:
    """A finite job list (trace, static) or an endless generator (continuous)."""

    jobs: list[Job] | None = None
    generator: JobGenerator | None = None
    num_jobs: int | None = None  # generated traces: stop generating after this many
    description: dict = field(default_factory=dict)

    def __post_init__(self):
        if (self.jobs is None) == (self.generator is None):
            raise ValueError("a workload is either a job list or a generator")
        if self.jobs is not None:
            self.jobs = sorted(self.jobs, key=lambda j: j.arrival_s)

    @property
    def finite(self) -> bool:
        return self.jobs is not None or self.num_jobs is not None

    def stream(self) -> Iterator[Job]:
        if self.jobs is not None:
            return iter(self.jobs)
        assert self.generator is not None  # exactly one of jobs / generator (checked on creation)
        source = iter(self.generator)
        return itertools.islice(source, self.num_jobs) if self.num_jobs is not None else source

    def offered_load(self, table: ThroughputTable, cluster: Cluster) -> float:
        """The load the arrivals put on the cluster: for generated ones, that of a sample of the
        same stream; for a replayed trace, its arrival rate over its arrival span (0 for a
        static trace, whose jobs all arrive at once)."""
        if self.jobs is not None:
            span_s = self.jobs[-1].arrival_s - self.jobs[0].arrival_s if self.jobs else 0.0
            if span_s <= 0:
                return 0.0
            return offered_load(self.jobs, (len(self.jobs) - 1) / span_s * 3600.0, table, cluster)
        assert self.generator is not None  # exactly one of jobs / generator (checked on creation)
        if self.generator.lam == 0:
            return 0.0
        sample = JobGenerator(table, replace(self.generator.config)).take(OFFERED_LOAD_SAMPLE)
        return offered_load(sample, self.generator.config.rate_per_hour, table, cluster)

    def durations(self, table: ThroughputTable, cluster: Cluster) -> dict[str, float]:
        """Each job's run time alone on the reference worker type (as the generator draws them)."""
        if self.generator is not None:
            return dict(self.generator.durations)
        reference = default_reference_type(table, cluster)
        out = {}
        for job in self.jobs or ():
            rate = table.solo(reference, job.job_type)
            if rate > 0:
                out[job.job_id] = job.total_steps / rate
        return out


def check_fits(job: Job, table: ThroughputTable, cluster: Cluster) -> None:
    refuse_barred([job], table, cluster)  # a tenant quota of 0 wherever it could run
    if not any(table.solo(w, job.job_type) > 0 and cluster.capacity(w) >= job.scale_factor for w in cluster.names):
        raise InputError(
            f"job {job.job_id} ({job.job_type.label}) needs {job.scale_factor} GPUs of a type "
            "where it can run; no worker type of the cluster has that",
            field="scale_factor",
        )


class _FitCheck:
    """`check_fits`, asked once per job type and tenant: the answer depends on nothing else
    (and a trace has thousands of jobs of a few dozen types)."""

    def __init__(self, table: ThroughputTable, cluster: Cluster):
        self.table, self.cluster = table, cluster
        self._fit: set[tuple[JobType, str | None]] = set()

    def __call__(self, job: Job) -> None:
        key = (job.job_type, job.entity)
        if key not in self._fit:
            check_fits(job, self.table, self.cluster)
            self._fit.add(key)


class _Feed:
    """Engine source: every job up to time t, plus the next later one (for idle jumps).

    Each job is checked to fit some worker type as it is handed out: one that
    fits nowhere would wait forever.
    """

    def __init__(self, jobs: Iterator[Job], table: ThroughputTable, cluster: Cluster):
        self._stream = jobs
        self._check = _FitCheck(table, cluster)
        self._next: Job | None = self._take()
        self._last: Job | None = None

    def _take(self) -> Job | None:
        job = next(self._stream, None)
        if job is not None:
            self._check(job)
        return job

    def __call__(self, t: float | None) -> list[Job]:
        if self._next is None:
            return []
        limit = self._next.arrival_s if t is None else t
        out = []
        while self._next is not None and (self._last is None or self._last.arrival_s <= limit):
            self._last = self._next
            out.append(self._last)
            self._next = self._take()
        return out


# --------------------------------------------------------------------------- results


@dataclass
class SimulationResult:
    status: str  # "ok", or why it ended early: "saturated", "time_limit", "interrupted"
    reason: str | None
    metrics: dict
    jobs: list[dict]  # one row per job that arrived
    config: dict
    workload: dict


def job_demand_gpu_s(job: Job, table: ThroughputTable, cluster: Cluster) -> float:
    """GPU-seconds the job needs at the least: alone on its fastest type that fits it."""
    return _demand_gpu_s(job, fastest_rate(job.job_type, table, cluster))


def fastest_rate(job_type: JobType, table: ThroughputTable, cluster: Cluster) -> float:
    """Steps/s of a job of this type alone on its fastest worker type that fits it (0.0: none)."""
    rates = [table.solo(w, job_type) for w in cluster.names if cluster.capacity(w) >= job_type.scale_factor]
    return max(rates, default=0.0)


def _demand_gpu_s(job: Job, best: float) -> float:
    return math.inf if best <= 0 else job.remaining_steps / best * job.scale_factor


def offered_load(jobs: list[Job], rate_per_hour: float, table: ThroughputTable, cluster: Cluster) -> float:
    """Arrival rate x mean minimum GPU-time per job, over the cluster's GPU count.

    At or above 1 no policy can keep up; policies that use GPUs less well
    saturate below it (found while simulating).
    """
    if not jobs or rate_per_hour <= 0:
        return 0.0
    check = _FitCheck(table, cluster)
    for job in jobs:
        check(job)
    fastest: dict[JobType, float] = {}  # per job type (thousands of jobs, a few dozen types)

    def demand(job: Job) -> float:
        best = fastest.get(job.job_type)
        if best is None:
            best = fastest[job.job_type] = fastest_rate(job.job_type, table, cluster)
        return _demand_gpu_s(job, best)

    mean = sum(demand(j) for j in jobs) / len(jobs)
    return rate_per_hour / 3600.0 * mean / cluster.total_gpus


def _window(config: SimulationConfig, workload: Workload) -> tuple[int, int | None]:
    if config.window is None:
        if not workload.finite:
            raise InputError(
                "an endless generated trace needs a measurement window (--window START:END) or a number of jobs",
                field="--window",
            )
        return 0, None
    start, end = config.window
    if not 0 <= start < end:
        raise InputError(f"window must be START:END with 0 <= START < END, got {start}:{end}", field="--window")
    total = len(workload.jobs) if workload.jobs is not None else workload.num_jobs
    if total is not None and end > total:
        raise InputError(f"window end {end} is beyond the trace's {total} jobs", field="--window")
    return start, end


# (simulated s, window jobs done, window size, jobs active, rounds)
Progress = Callable[[float, int, int, int, int], None]


class _WindowWatch:
    """When to stop stepping: the measurement window finished, or the load saturated the cluster.

    Saturation (spec §6.4): more jobs in the system than `max_active`; the system grew by
    more than half the window while the window's jobs arrived; or the window is still
    unfinished long after its last arrival.
    """

    def __init__(
        self,
        engine: Engine,
        workload: Workload,
        start: int,
        end: int | None,
        config: SimulationConfig,
        table: ThroughputTable,
        cluster: Cluster,
    ):
        self.engine, self.workload, self.start, self.end = engine, workload, start, end
        self.table, self.cluster = table, cluster
        self.window_ids = None if end is None else {str(i) for i in range(start, end)}
        self.size = (end - start) if end is not None else None
        self.done = 0
        self.arrivals: list[tuple[float, int]] = []  # (time, jobs in system) at window start / end arrivals
        self.max_time_s = config.max_time_s  # the user's limit (--max-hours)
        self.limit_s: float | None = None  # the window's drain allowance, set once its last job arrived
        self.max_active = config.max_active_jobs or max(200, 10 * cluster.total_gpus)

    def in_window(self, job_id: str) -> bool:
        return self.window_ids is None or job_id in self.window_ids

    def count_finished(self, record: RoundRecord) -> bool:
        """Count window jobs that finished in this round; True once the whole window is done."""
        for jid in record.planned_steps:
            out = self.engine.outcomes[jid]
            if out.finish_s is not None and out.finish_s <= record.end_s and self.in_window(jid):
                self.done += 1
        if self.size is None:
            self.size = _window_total(self.workload, self.start)
        return self.size is not None and self.done >= self.size

    def count_finished_jobs(self, job_ids: list[str], end_s: float) -> bool:
        """`count_finished` for a round given by the jobs that finished in it."""
        for jid in job_ids:
            out = self.engine.outcomes[jid]
            if out.finish_s is not None and out.finish_s <= end_s and self.in_window(jid):
                self.done += 1
        if self.size is None:
            self.size = _window_total(self.workload, self.start)
        return self.size is not None and self.done >= self.size

    def over_active_limit(self) -> bool:
        """More jobs in the system than --max-active: the run stops after the next round."""
        return len(self.engine.active) > self.max_active

    def saturation(self, now: float, active: int) -> tuple[str, str] | None:
        """(status, reason) when the run should stop early ("saturated" or "time_limit"), or None."""
        if self.end is not None and len(self.arrivals) < 2:
            index = self.end - 1 if self.arrivals else self.start
            out = self.engine.outcomes.get(str(index))
            if out is not None and out.job.arrival_s <= now:
                self.arrivals.append((now, active))
                if len(self.arrivals) == 2 and self.max_time_s is None:
                    self.limit_s = now + _drain_allowance(self.engine, self.window_ids, self.table, self.cluster)
        if self.max_time_s is not None and now > self.max_time_s:
            return "time_limit", f"stopped at the time limit: {now / 3600:.1f} h simulated (--max-hours)"
        if active > self.max_active:
            return "saturated", f"{active} jobs in the system (more than {self.max_active})"
        if self.end is not None and len(self.arrivals) == 2:
            grew = self.arrivals[1][1] - self.arrivals[0][1]
            if grew > 0.5 * (self.end - self.start):
                return (
                    "saturated",
                    f"jobs in the system grew by {grew} while the window's {self.end - self.start} jobs arrived",
                )
        if self.limit_s is not None and now > self.limit_s:
            return "saturated", f"window unfinished at {now / 3600:.0f} h (limit {self.limit_s / 3600:.0f} h)"
        return None


def _check_tables(cluster: Cluster, tables: list[ThroughputTable]) -> None:
    for checked in tables:
        missing = [w for w in cluster.names if w not in checked.worker_types]
        if missing:
            raise InputError(
                f"worker type(s) {', '.join(missing)} of the cluster have no rows in the table",
                path=checked.path,
                field="worker_type",
            )


def run_simulation(
    table: ThroughputTable,
    cluster: Cluster,
    workload: Workload,
    config: SimulationConfig,
    *,
    progress: Progress | None = None,
    reference_jct: dict[str, float] | None = None,
    decision_table: ThroughputTable | None = None,
    stop_on_interrupt: bool = False,
) -> SimulationResult:
    """Simulate; `reference_jct` (job id -> JCT under `isolated`) adds the rho metrics.

    `decision_table` (e.g. with estimated co-locations) is what the policy decides on;
    jobs progress at the throughputs of `table`, the true ones. None: `table` for both.
    `stop_on_interrupt`: a KeyboardInterrupt ends the run as "interrupted", with what was
    measured so far (otherwise it propagates: a sweep handles it itself).
    """
    _check_tables(cluster, [table] if decision_table is None else [table, decision_table])
    if not config.round_s > 0:
        raise InputError(f"round length must be positive, got {config.round_s}", field="--round-length")
    start, end = _window(config, workload)
    load = workload.offered_load(table, cluster)
    if load >= 1.0 and workload.generator is not None:  # endless arrivals: the backlog never drains
        return SimulationResult(
            "saturated",
            f"offered load {load:.2f} of the cluster's GPU time (>= 1): no policy can keep up",
            {"offered_load": load, "window": [start, end]},
            [],
            recorded_config(config),
            workload.description,
        )
    check_reuse(config.policy, config.reuse_solves, config.aggregate)
    policy = make_cluster_policy(
        config.policy,
        cluster,
        method=config.solver_method,
        aggregate=config.aggregate,
        seed=config.seed,
        gavel_compat=config.gavel_compat,
        reuse_solves=config.reuse_solves,
    )
    engine_config = config.engine_config(policy)
    feed = _Feed(workload.stream(), table, cluster)
    restart = charged_restarts(table, cluster, config.restart_cost_s, config.migration_aware, config.gavel_compat)
    engine = Engine(
        table,
        cluster,
        policy,
        engine_config,
        source=feed,
        decision_table=decision_table,
        restart=restart,
        migration_aware=config.migration_aware,
    )
    watch = _WindowWatch(engine, workload, start, end, config, table, cluster)
    leases = LeaseCounter()
    compiled = engine_config.round_loop == "compiled"
    usage = BooksUsage(engine.compiled_books, cluster.names) if compiled else GpuUsage()
    started = time.perf_counter()
    try:
        status, reason = _step(engine, watch, leases, usage, progress)
    except KeyboardInterrupt:
        if not stop_on_interrupt:
            raise
        status, reason = "interrupted", f"interrupted after {(engine.t or 0.0) / 3600:.1f} h simulated"
    wall_s = time.perf_counter() - started
    if progress is not None:
        progress(engine.t or 0.0, watch.done, watch.size or 0, len(engine.active), engine.n_rounds)

    end_time = engine.t or 0.0
    rows = _job_rows(engine, watch.in_window, workload.durations(table, cluster), end_time)
    metrics = _metrics(engine, rows, leases, cluster, load, end_time, wall_s)
    metrics["window"] = [start, end if end is not None else start + (watch.size or 0)]
    metrics["window_finished"] = watch.done
    metrics["idle_after_finish_gpu_s"] = usage.idle_after_finish_gpu_s
    if compiled:  # how many of the rounds the compiled loop ran (the rest: the Python step)
        metrics["rounds_compiled"] = engine.compiled_stats["rounds"]
    if cluster.tenants is not None or any(r["entity"] is not None for r in rows):
        metrics["tenants"] = tenant_summary(rows, usage.job_gpu_s, cluster.tenants, end_s=end_time)
    if status != "ok":
        metrics["censored_jct"] = censored_jct(engine, workload, watch, end_time, table, cluster)
        for key in ("jct_s", "jct_low_priority_s", "jct_high_priority_s"):  # not the run's answer
            metrics.pop(key, None)
    else:
        _add_rho(metrics, rows, reference_jct)
    if engine.restart_tally is not None:
        tally = engine.restart_tally
        metrics.update(restart_metrics(tally.starts, tally.lost_gpu_s, engine.busy, tally.across_types))
    cfg = recorded_config(config)
    cfg["resolve_interval_s"] = config.resolve_interval
    cfg["decision_table"] = None if decision_table is None else str(decision_table.path)
    cfg["engine"] = {k: v for k, v in asdict(engine_config).items()}
    return SimulationResult(status, reason, metrics, rows, cfg, workload.description)


def _step(
    engine: Engine, watch: _WindowWatch, leases: LeaseCounter, usage: GpuUsage | BooksUsage, progress: Progress | None
) -> tuple[str, str | None]:
    """Step the engine until the window is done ("ok") or the watch stops the run early."""
    last_report = 0.0
    compiled = engine.config.round_loop == "compiled"
    while True:
        if compiled:
            # a batch ends after the round that passes a time limit, where the watch stops the run
            limits = [s for s in (watch.max_time_s, watch.limit_s) if s is not None]
            item = engine.step_many(min(limits, default=math.inf), watch.over_active_limit)
        else:
            item = engine.step()
        if item is None:
            break
        if isinstance(item, RoundBatch):
            leases.add_batch(item, engine.outcomes)  # (the compiled call booked its GPU usage itself)
            if watch.count_finished_jobs(item.finished, float(item.ends[-1])):
                break
        else:
            leases.add(item, engine.outcomes)
            usage.add(item, engine.outcomes)
            if watch.count_finished(item):
                break
        now, active = engine.t or 0.0, len(engine.active)
        cause = watch.saturation(now, active)
        if cause is not None:
            return cause
        if progress is not None and time.perf_counter() - last_report > 0.2:
            last_report = time.perf_counter()
            progress(now, watch.done, watch.size or 0, active, engine.n_rounds)
    return "ok", None


def censored_jct(
    engine: Engine, workload: Workload, watch: _WindowWatch, end_time: float, table: ThroughputTable, cluster: Cluster
) -> dict[str, Any]:
    """What an incomplete run can say about the window's JCTs: bounds, labelled as such.

    Every window job's JCT is at least: its JCT if it finished; the time it has been in the
    system plus its remaining steps alone on its fastest type if it is running or waiting; its
    run time alone on its fastest type if it had not arrived yet. Their mean is a lower bound on
    the average JCT the full run would report. The finished jobs' own JCTs are biased low (the
    short jobs finish first) and are given only as that.
    """
    if workload.jobs is not None:
        window = [job for job in workload.jobs if watch.in_window(job.job_id)]
    else:
        window = [o.job for jid, o in engine.outcomes.items() if watch.in_window(jid)]
    bounds: list[float] = []
    finished_jct: list[float] = []
    running = not_arrived = 0
    for job in window:
        out = engine.outcomes.get(job.job_id)
        if out is not None and out.finish_s is not None:
            bounds.append(out.finish_s - job.arrival_s)
            finished_jct.append(out.finish_s - job.arrival_s)
            continue
        alone_s = job_demand_gpu_s(job, table, cluster) / job.scale_factor  # all its steps, alone
        if out is not None and job.arrival_s <= end_time:
            running += 1
            left = max(0.0, job.total_steps - out.steps_done) / job.total_steps
            bounds.append(end_time - job.arrival_s + alone_s * left)
        else:
            not_arrived += 1
            bounds.append(alone_s)
    size = watch.size if watch.size is not None else len(window)
    return {
        "note": "the run ended early: these bound the JCTs; they are not the run's answer",
        "window_jobs": size,
        "finished": len(finished_jct),
        "unfinished": running,
        "not_arrived": not_arrived,
        "not_generated": max(0, size - len(window)),
        "mean_lower_bound_s": (sum(bounds) / len(bounds)) if bounds else None,
        "finished_only_s": distribution(finished_jct),
    }


def recorded_config(config: SimulationConfig) -> dict[str, Any]:
    """The configuration as the summary records it; the restart options only when given
    (a run without them records what it always did)."""
    cfg = asdict(config)
    optional = (("restart_cost_s", None), ("migration_aware", False), ("round_loop", "auto"), ("reuse_solves", 0))
    for key, default in optional:
        if cfg[key] == default:
            del cfg[key]
    return cfg


def _metrics(
    engine: Engine,
    rows: list[dict],
    leases: LeaseCounter,
    cluster: Cluster,
    load: float,
    end_time: float,
    wall_s: float,
) -> dict[str, Any]:
    window_jct = {r["job_id"]: r["jct_s"] for r in rows if r["in_window"] and r["jct_s"] is not None}
    capacity = {w: cluster.capacity(w) for w in cluster.names}
    solves = [s for s in engine.solves if s.job_ids]
    finished = sum(r["finish_s"] is not None for r in rows)
    metrics: dict[str, Any] = {
        "offered_load": load,
        "jct_s": distribution(window_jct.values()),
        "makespan_s": end_time,
        "utilisation": utilisation(engine.busy, capacity, end_time),
        "lease_extension_rate": leases.rate,
        "lease_extensions": leases.extensions,
        "lease_opportunities": leases.opportunities,
        "resolves": len(solves),
        "solver_s": sum(s.allocation.build_s + s.allocation.solve_s for s in solves),
        "rounds": engine.n_rounds,
        "jobs_arrived": len(rows),
        "jobs_finished": finished,
        "window": None,
        "window_finished": None,
        "wall_s": wall_s,
        "jobs_per_wall_s": (finished / wall_s) if wall_s > 0 else None,
    }
    if getattr(engine.policy, "reuse_limit", None) is not None:  # --reuse-solves: re-solves given without a solve
        metrics["resolves_reused"] = sum(s.allocation.status == Status.REUSED for s in solves)
    in_window = [r for r in rows if r["in_window"] and r["jct_s"] is not None]
    high = [r["jct_s"] for r in in_window if r["priority_weight"] != 1.0]
    if high:
        metrics["jct_low_priority_s"] = distribution([r["jct_s"] for r in in_window if r["priority_weight"] == 1.0])
        metrics["jct_high_priority_s"] = distribution(high)
    return metrics


def _add_rho(metrics: dict[str, Any], rows: list[dict], reference_jct: dict[str, float] | None) -> None:
    if reference_jct is None:
        return
    window_jct = {r["job_id"]: r["jct_s"] for r in rows if r["in_window"] and r["jct_s"] is not None}
    ratios = rho(window_jct, reference_jct)
    for r in rows:
        r["rho"] = ratios.get(r["job_id"])
    metrics["rho"] = distribution(ratios.values())
    metrics["rho_above_1"] = (sum(v > 1 for v in ratios.values()) / len(ratios)) if ratios else None


def _window_total(workload: Workload, start: int) -> int | None:
    if workload.jobs is not None:
        return len(workload.jobs) - start
    if workload.num_jobs is not None:
        return workload.num_jobs - start
    return None


def _drain_allowance(engine: Engine, window_ids, table, cluster) -> float:
    """Time the window may take after its last arrival: 50x its longest job alone, at least 30 days."""
    longest = max(
        (
            job_demand_gpu_s(engine.outcomes[j].job, table, cluster) / engine.outcomes[j].job.scale_factor
            for j in window_ids
            if j in engine.outcomes
        ),
        default=0.0,
    )
    return max(50.0 * longest, 30 * 86400.0)


JOB_COLUMNS = [
    "job_id",
    "model",
    "batch_size",
    "scale_factor",
    "entity",
    "priority_weight",
    "arrival_s",
    "total_steps",
    "duration_s",
    "steps_done",
    "finish_s",
    "jct_s",
    "in_window",
    "rho",
]


def _whole(steps: float) -> float | int:
    """Steps as an integer when whole (they are, except in Gavel's compat mode's last round)."""
    return int(steps) if float(steps).is_integer() else steps


def _job_rows(engine: Engine, in_window, durations: dict[str, float], end_time: float) -> list[dict]:
    rows = []
    for jid, out in engine.outcomes.items():
        job = out.job
        if job.arrival_s > end_time:
            continue  # submitted as the next arrival, never admitted
        jt = job.job_type
        rows.append(
            {
                "job_id": jid,
                "model": jt.model,
                "batch_size": jt.batch_size,
                "scale_factor": jt.scale_factor,
                "entity": job.entity,
                "priority_weight": job.priority_weight,
                "arrival_s": job.arrival_s,
                "total_steps": _whole(job.total_steps),
                "duration_s": durations.get(jid),
                "steps_done": _whole(out.steps_done),
                "finish_s": out.finish_s,
                "jct_s": out.jct_s,
                "in_window": in_window(jid),
                "rho": None,
            }
        )
    return rows
