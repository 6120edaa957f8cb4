"""`--round-length auto`: the round length that serves THIS job list best once restarts cost time.

Every start of a job on GPUs it did not hold the round before costs its restart time
(`planner.rounds.restart`). Short rounds react fast (fair shares, arrivals and completions
soon taken into account) but pay that cost often; long rounds pay it rarely but let GPUs
idle after short jobs end and keep newcomers waiting. Which wins depends on the jobs, the
cluster, the table, the policy and the restart costs, so `choose_round_length` does not
guess: it runs the same engine the plan will run, once per candidate length, and compares.

What is compared (and why):

* the policy's realised outcome, not its LP objective: the LP solves the same allocation
  whatever the round length, which only changes how well the rounds realise it and what
  restarts take away. So the score is the average JCT (restart losses included: a job that
  restarts runs fewer steps that round), or the makespan for the makespan policies
  (`min_total_duration*`). Goodput is reported but not multiplied in: its losses are
  already in the JCT, and counting them twice would favour the longest rounds regardless
  of how long jobs wait;
* near ties: a candidate within `TOLERANCE` (1 %) of the best score is as good on this list.
  Among those, the other measure decides, with the same tolerance: the makespan for the
  JCT policies, the average JCT for the makespan policies (a makespan set by the longest job
  hides everything else: with 120 s restarts on the lab list, 360 s rounds are within 1 % of
  the best makespan at 76 % goodput and a 34 % longer average JCT). What still ties goes to
  the shorter round, which serves what the list does not show (jobs submitted later, shares
  that must follow them) sooner.

Each candidate is simulated to a common horizon of `horizon_rounds` rounds of the shortest
candidate (5000 x 120 s, about 167 h, by default: the lab list finishes well inside it), so
the cost stays bounded on long lists. A job still running at the horizon counts up to it
(its JCT is censored), so every candidate is measured over the same span. Deterministic:
the engine, the policies' seeds and HiGHS give the same numbers for the same inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from planner.errors import InputError
from planner.formats.cluster import Cluster
from planner.formats.jobs import Job
from planner.formats.table import ThroughputTable
from planner.modes.generator import JobGenerator
from planner.modes.metrics import restart_metrics
from planner.modes.simulate import SimulationConfig, Workload, check_fits
from planner.policies import PolicyOptions, make_policy
from planner.rounds.engine import DEFAULT_ROUND_S, Engine, EngineConfig
from planner.rounds.restart import RestartCosts, charged_restarts

CANDIDATES_S: tuple[float, ...] = (120.0, 360.0, 720.0, 1800.0, 3600.0)
TOLERANCE = 0.01  # a candidate within 1 % of the best score ties with it; the shorter round wins
HORIZON_ROUNDS = 5000  # the horizon: this many rounds of the shortest candidate
SAMPLE_JOBS = 500  # a simulation's workload is judged on its first jobs (a trace may hold 10^5)
NO_COST_REASON = "no restart cost known"
# The makespan policies are scored on the makespan; every other policy on the average JCT.
MAKESPAN_POLICIES = ("min_total_duration",)

Objective = Literal["avg JCT", "makespan"]


@dataclass(frozen=True)
class CandidateMetrics:
    """One candidate round length, simulated to the horizon."""

    round_s: float
    goodput: float | None  # useful over allocated GPU time; None when nothing ran
    restarts: int
    restart_gpu_s: float
    avg_jct_s: float  # from arrival (or the start) to finish; a job unfinished at the horizon counts to it
    makespan_s: float | None  # latest finish; None when jobs were left at the horizon
    finished_all: bool
    rounds: int
    score: float  # the objective compared (seconds; lower is better)
    tiebreak: float  # the other measure, for near ties (seconds; lower is better)


@dataclass(frozen=True)
class RoundLengthChoice:
    round_s: float
    reason: str  # one line: "round length auto: 1800 s (goodput ... vs ... at 360 s; avg JCT -13.6 %)"
    objective: Objective | None  # None: nothing was simulated (no restart cost)
    candidates: tuple[CandidateMetrics, ...] = ()
    horizon_s: float | None = None  # simulated span from the start; None: nothing simulated

    def to_json(self) -> dict[str, Any]:
        return {
            "auto": True,
            "round_s": self.round_s,
            "reason": self.reason,
            "objective": self.objective,
            "horizon_s": self.horizon_s,
            "candidates": [asdict(c) for c in self.candidates],
        }


def choose_round_length(
    jobs: Sequence[Job],
    table: ThroughputTable,
    cluster: Cluster,
    policy: str,
    restart: RestartCosts | None,
    *,
    migration_aware: bool = False,
    policy_options: PolicyOptions | None = None,
    engine: EngineConfig | None = None,
    decision_table: ThroughputTable | None = None,
    candidates: Sequence[float] = CANDIDATES_S,
    horizon_rounds: int = HORIZON_ROUNDS,
) -> RoundLengthChoice:
    """The candidate round length with the best score on `jobs` (module docstring).

    `restart` is what the run will charge (`charged_restarts(...)`); None or all zero for
    these jobs: the default 360 s, nothing simulated. `engine` is the run's engine
    configuration (visiting order, seed, re-solve interval); its round length is replaced.
    Candidates not longer than the largest restart cost are skipped (a restart would take
    the whole round), except the default, which is always measured as the baseline."""
    lengths = sorted(set(candidates) | {DEFAULT_ROUND_S})
    if not all(math.isfinite(c) and c > 0 for c in lengths):
        raise InputError(f"round lengths must be positive seconds, got {list(candidates)}", field="candidates")
    if horizon_rounds < 1:
        raise InputError(f"must be at least 1, got {horizon_rounds}", field="horizon_rounds")
    worst = largest_cost(restart, jobs, cluster)
    if restart is None or worst <= 0 or not jobs:
        why = NO_COST_REASON if jobs else "no jobs"
        return RoundLengthChoice(DEFAULT_ROUND_S, f"round length auto: {DEFAULT_ROUND_S:g} s ({why})", None)
    lengths = [c for c in lengths if c > worst or c == DEFAULT_ROUND_S]
    start = min(job.arrival_s for job in jobs)
    horizon = horizon_rounds * lengths[0]
    base = engine or EngineConfig()
    runs = [
        _simulate(
            jobs,
            table,
            cluster,
            policy,
            restart,
            replace(base, round_s=length, max_rounds=2 * horizon_rounds, keep_rounds=False),
            migration_aware=migration_aware,
            policy_options=policy_options,
            decision_table=decision_table,
            until=start + horizon,
        )
        for length in lengths
    ]
    # A run cut by its round cap before the horizon shortens the span all are measured on.
    end = min([start + horizon] + [r.end_s for r in runs if not r.finished_all])
    objective: Objective = "makespan" if policy.startswith(MAKESPAN_POLICIES) else "avg JCT"
    measured = [_measure(r, start, end) for r in runs]
    if objective == "makespan" and not any(m.finished_all for m in measured):
        objective = "avg JCT"  # nobody finished: no makespan to compare
    other: Objective = "avg JCT" if objective == "makespan" else "makespan"
    scored = [replace(m, score=_score(m, objective, start), tiebreak=_score(m, other, start)) for m in measured]
    chosen = pick(scored)
    return RoundLengthChoice(chosen.round_s, reason(chosen, scored, objective), objective, tuple(scored), end - start)


def largest_cost(restart: RestartCosts | None, jobs: Sequence[Job], cluster: Cluster) -> float:
    """The largest restart cost any of `jobs` pays on a worker type of `cluster` (0 without costs)."""
    if restart is None:
        return 0.0
    types = {job.job_type for job in jobs}
    return max((restart.cost(w, t) for w in cluster.names for t in types), default=0.0)


def pick(scored: Sequence[CandidateMetrics]) -> CandidateMetrics:
    """Candidates within TOLERANCE of the best score, then of the best tie-break among
    those; the shortest round of what is left."""
    near = _near(scored, lambda c: c.score)
    return min(_near(near, lambda c: c.tiebreak), key=lambda c: c.round_s)


def _near(scored: Sequence[CandidateMetrics], value: Callable[[CandidateMetrics], float]) -> list[CandidateMetrics]:
    best = min(value(c) for c in scored)
    return [c for c in scored if value(c) <= best * (1 + TOLERANCE)]  # inf ties with inf


def reason(chosen: CandidateMetrics, scored: Sequence[CandidateMetrics], objective: Objective) -> str:
    """One line: the choice, its goodput against the default's, and both measures' change."""
    head = f"round length auto: {chosen.round_s:g} s"
    base = next(c for c in scored if c.round_s == DEFAULT_ROUND_S)
    if chosen is base:
        others = ", ".join(f"{c.round_s:g}" for c in scored if c is not base)
        return f"{head} (the default: {others} s do no better on {objective}; goodput {_percent(chosen.goodput)})"
    other = "avg JCT" if objective == "makespan" else "makespan"
    return (
        f"{head} (goodput {_percent(chosen.goodput)} vs {_percent(base.goodput)} at {base.round_s:g} s; "
        f"{objective} {_change(chosen.score, base.score)}, {other} {_change(chosen.tiebreak, base.tiebreak)})"
    )


def _change(value: float, base: float) -> str:
    if not (math.isfinite(value) and math.isfinite(base)) or base <= 0:
        return "-"
    return f"{(value - base) / base * 100:+.1f} %"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _score(m: CandidateMetrics, objective: Objective, start: float) -> float:
    if objective == "makespan":
        # Unfinished at the horizon: later than any finished candidate.
        return math.inf if m.makespan_s is None else m.makespan_s - start
    return m.avg_jct_s


@dataclass(frozen=True)
class _Run:
    round_s: float
    spans: list[tuple[float, float | None]]  # per job: (arrival, finish or None)
    end_s: float  # the clock when the run stopped
    finished_all: bool
    goodput: float | None
    restarts: int
    restart_gpu_s: float
    rounds: int


def _simulate(
    jobs: Sequence[Job],
    table: ThroughputTable,
    cluster: Cluster,
    policy: str,
    restart: RestartCosts,
    config: EngineConfig,
    *,
    migration_aware: bool,
    policy_options: PolicyOptions | None,
    decision_table: ThroughputTable | None,
    until: float,
) -> _Run:
    """The engine on `jobs` with round length `config.round_s`, stepped until every job
    finished, the clock passed `until`, or the round cap."""
    engine = Engine(
        table,
        cluster,
        make_policy(policy, policy_options),  # a fresh one: stateful policies keep history
        config,
        jobs,
        decision_table=decision_table,
        restart=restart,
        migration_aware=migration_aware,
    )
    while (engine.t is None or engine.t < until) and engine.step() is not None:
        pass
    spans = [(o.job.arrival_s, o.finish_s) for o in engine.outcomes.values()]
    tally = engine.restart_tally
    lost = restart_metrics(tally.starts, tally.lost_gpu_s, engine.busy) if tally is not None else None
    return _Run(
        config.round_s,
        spans,
        engine.t or 0.0,
        all(finish is not None for _, finish in spans),
        None if lost is None else lost["goodput"],
        0 if lost is None else lost["restarts"],
        0.0 if lost is None else lost["restart_gpu_s"],
        engine.n_rounds,
    )


def _measure(run: _Run, start: float, end: float) -> CandidateMetrics:
    """Metrics over [start, end]: time in the system of every job that arrived by `end`."""
    times = [
        min(finish if finish is not None else end, end) - max(arrival, start)
        for arrival, finish in run.spans
        if arrival <= end
    ]
    finished = all(finish is not None and finish <= end for _, finish in run.spans)
    makespan = max(finish for _, finish in run.spans if finish is not None) if finished and run.spans else None
    return CandidateMetrics(
        round_s=run.round_s,
        goodput=run.goodput,
        restarts=run.restarts,
        restart_gpu_s=run.restart_gpu_s,
        avg_jct_s=sum(times) / len(times) if times else 0.0,
        makespan_s=makespan,
        finished_all=finished,
        rounds=run.rounds,
        score=math.nan,
        tiebreak=math.nan,
    )


def choose_for_simulation(
    table: ThroughputTable,
    cluster: Cluster,
    workload: Workload,
    config: SimulationConfig,
    *,
    decision_table: ThroughputTable | None = None,
    sample_jobs: int = SAMPLE_JOBS,
) -> RoundLengthChoice:
    """`choose_round_length` for `rota simulate`: on the workload's first `sample_jobs` jobs in
    arrival order (a generated one drawn again from the same seed), with the restart costs,
    policy options and engine settings `config` gives (its own round length is ignored)."""
    missing = [w for w in cluster.names if w not in table.worker_types]
    if missing:
        raise InputError(
            f"worker type(s) {', '.join(missing)} of the cluster have no rows in the table",
            path=table.path,
            field="worker_type",
        )
    restart = charged_restarts(table, cluster, config.restart_cost_s, config.migration_aware, config.gavel_compat)
    if workload.offered_load(table, cluster) >= 1.0:
        why = "offered load >= 1: saturated at any length"
        return RoundLengthChoice(DEFAULT_ROUND_S, f"round length auto: {DEFAULT_ROUND_S:g} s ({why})", None)
    # An endless trace measured on a window needs no job beyond its end.
    limit = sample_jobs if config.window is None else min(sample_jobs, config.window[1])
    jobs = first_jobs(workload, table, limit)
    for job in jobs:
        check_fits(job, table, cluster)
    options = PolicyOptions(
        method=config.solver_method, aggregate=config.aggregate, seed=config.seed, gavel_compat=config.gavel_compat
    )
    return choose_round_length(
        jobs,
        table,
        cluster,
        config.policy,
        restart,
        migration_aware=config.migration_aware,
        policy_options=options,
        engine=config.engine_config(make_policy(config.policy, options)),
        decision_table=decision_table,
    )


def first_jobs(workload: Workload, table: ThroughputTable, limit: int) -> list[Job]:
    """The workload's first `limit` jobs (fewer when it has fewer), without consuming it."""
    if workload.jobs is not None:
        return workload.jobs[:limit]  # sorted by arrival on creation
    assert workload.generator is not None  # a workload is a job list or a generator
    wanted = limit if workload.num_jobs is None else min(limit, workload.num_jobs)
    return JobGenerator(table, replace(workload.generator.config)).take(wanted)
