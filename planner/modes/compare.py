"""Which policy, and how much better on my jobs: simulate one job list under several policies.

Every policy sees the same jobs (their arrival times as given), the same cluster and
the same table; each run is `run_simulation` on a finite trace, so a comparison is
a row per policy of the metrics the simulator measures, plus the dollar cost of the
GPU time used, the heterogeneity-aware vs agnostic ratios, and a recommendation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from planner.errors import InputError, SolverError
from planner.formats.cluster import Cluster
from planner.formats.jobs import Job
from planner.formats.table import ThroughputTable
from planner.modes.round_length import choose_for_simulation
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.policies import POLICY_NAMES, QUOTA_POLICIES
from planner.policies.lp import DEFAULT_METHOD
from planner.rounds.engine import DEFAULT_ROUND_S
from planner.rounds.restart import PlannedRestarts, charged_restarts, unknown_cost_note

Objective = Literal["jct", "makespan", "cost"]
OBJECTIVES: tuple[Objective, ...] = ("jct", "makespan", "cost")

# A small set that spans the families: arrival order, fairness, finish-time fairness, makespan,
# each blind to heterogeneity and aware of it, plus packing when the table has pair rows.
DEFAULT_POLICIES = (
    "fifo",
    "fifo_perf",
    "max_min_fairness",
    "max_min_fairness_perf",
    "finish_time_fairness_perf",
    "min_total_duration_perf",
)
PACKED_POLICY = "max_min_fairness_packed"
# Heterogeneity-agnostic policy -> its heterogeneity-aware version (the Gavel paper's comparison).
AWARE_VERSION = {
    "fifo": "fifo_perf",
    "max_min_fairness": "max_min_fairness_perf",
    "finish_time_fairness": "finish_time_fairness_perf",
    "min_total_duration": "min_total_duration_perf",
    "max_min_fairness_water_filling": "max_min_fairness_water_filling_perf",
}


@dataclass
class PolicyOutcome:
    policy: str
    status: str  # "ok", "cannot run", or why the run ended early: "saturated", "time_limit"
    reason: str | None = None
    # an incomplete run: a lower bound on the average JCT (planner/modes/simulate.py censored_jct)
    jct_lower_bound_s: float | None = None
    jct_mean_s: float | None = None
    jct_p50_s: float | None = None
    jct_p90_s: float | None = None
    makespan_s: float | None = None
    utilisation: float | None = None
    cost: float | None = None  # dollars for the GPU time used; None without prices
    jobs_finished: int = 0
    wall_s: float = 0.0
    restarts: int | None = None  # (re)starts on GPUs a job did not hold the round before
    restarts_across_types: int | None = None
    goodput: float | None = None  # GPU time not lost to restarts, over GPU time used
    round_s: float | None = None  # the round length simulated (--round-length auto: chosen per policy)

    def value(self, objective: Objective) -> float | None:
        return {"jct": self.jct_mean_s, "makespan": self.makespan_s, "cost": self.cost}[objective]


@dataclass
class Comparison:
    outcomes: list[PolicyOutcome]
    objective: Objective
    n_jobs: int
    ratios: dict[str, float] = field(default_factory=dict)  # agnostic/aware mean-JCT ratio, by aware policy
    recommended: str | None = None
    reason: str = ""
    restart_note: str | None = None  # "restart cost unknown, assumed 0 s: ..." (None: a cost is known)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "rota.comparison/v1",
            "objective": self.objective,
            "jobs": self.n_jobs,
            "recommended": self.recommended,
            "reason": self.reason,
            "heterogeneity_ratios": self.ratios,
            "restart_note": self.restart_note,
            "policies": [vars(o) for o in self.outcomes],
        }


def default_policies(table: ThroughputTable, cluster: Cluster | None = None) -> list[str]:
    """The comparison's default policies; with tenant quotas, only those that keep them."""
    has_pairs = any(r["partner_model"] is not None for r in table.rows)
    names = [*DEFAULT_POLICIES, *([PACKED_POLICY] if has_pairs else [])]
    if cluster is not None and cluster.tenants is not None and cluster.tenants.has_quotas:
        names = [n for n in names if n in QUOTA_POLICIES]
    return names


def check_policies(names: Sequence[str]) -> None:
    unknown = [n for n in names if n not in POLICY_NAMES and not n.startswith("allox_alpha=")]
    if unknown:
        raise InputError(
            f"unknown polic{'y' if len(unknown) == 1 else 'ies'} {', '.join(map(repr, unknown))}; see 'rota policies'",
            field="--policies",
        )
    if not names:
        raise InputError("give at least one policy", field="--policies")


def gpu_cost(metrics: dict[str, Any], cluster: Cluster) -> float | None:
    """Dollars for the GPU-hours the jobs used, at each worker type's price; None if a used type has none."""
    total = 0.0
    for w in cluster.names:
        busy_gpu_h = metrics["utilisation"].get(w, 0.0) * cluster.capacity(w) * metrics["makespan_s"] / 3600
        if busy_gpu_h <= 0:
            continue
        price = cluster.worker_types[w].cost_per_gpu_hour
        if price is None:
            return None
        total += busy_gpu_h * price
    return total


def run_policy(table: ThroughputTable, cluster: Cluster, jobs: list[Job], config: SimulationConfig) -> PolicyOutcome:
    try:
        result = run_simulation(table, cluster, Workload(jobs=list(jobs)), config)
    except (InputError, SolverError) as exc:  # e.g. AlloX refuses multi-GPU jobs
        return PolicyOutcome(config.policy, "cannot run", str(exc))
    m = result.metrics
    if "jct_s" not in m:  # ended early (or never started): no JCT is the answer
        censored = m.get("censored_jct") or {}
        return PolicyOutcome(
            config.policy,
            result.status,
            result.reason,
            jct_lower_bound_s=censored.get("mean_lower_bound_s"),
            jobs_finished=int(m.get("jobs_finished") or 0),
        )
    return PolicyOutcome(
        policy=config.policy,
        status=result.status,
        reason=result.reason,
        jct_mean_s=m["jct_s"]["mean"],
        jct_p50_s=m["jct_s"]["p50"],
        jct_p90_s=m["jct_s"]["p90"],
        makespan_s=m["makespan_s"],
        utilisation=m["utilisation"]["all"],
        cost=gpu_cost(m, cluster),
        jobs_finished=m["jobs_finished"],
        wall_s=m["wall_s"],
        restarts=m.get("restarts"),
        restarts_across_types=m.get("restarts_across_types"),
        goodput=m.get("goodput"),
    )


def heterogeneity_ratios(outcomes: Sequence[PolicyOutcome]) -> dict[str, float]:
    """Mean JCT of each agnostic policy over that of its aware version, where both finished."""
    ok = {o.policy: o for o in outcomes if o.status == "ok" and o.jct_mean_s}
    return {
        aware: ok[agnostic].jct_mean_s / ok[aware].jct_mean_s  # type: ignore[operator]
        for agnostic, aware in AWARE_VERSION.items()
        if agnostic in ok and aware in ok
    }


def recommend(outcomes: Sequence[PolicyOutcome], objective: Objective) -> tuple[str | None, str]:
    """The policy with the best value of the objective among those that finished every job."""
    finished = max((o.jobs_finished for o in outcomes if o.status == "ok"), default=0)
    ranked = sorted(
        (o for o in outcomes if o.status == "ok" and o.jobs_finished == finished and o.value(objective) is not None),
        key=lambda o: (o.value(objective), o.policy),
    )
    if not ranked:
        return None, "no policy finished the jobs"
    best = ranked[0]
    what = {"jct": "average JCT", "makespan": "makespan", "cost": "GPU cost"}[objective]
    reason = f"lowest {what} ({_show(best.value(objective), objective)})"
    if len(ranked) > 1:
        second = ranked[1]
        gain = 1 - best.value(objective) / second.value(objective)  # type: ignore[operator]
        runner_up = f"{second.policy} ({_show(second.value(objective), objective)})"
        reason += (
            f", {100 * gain:.1f} % below the next best, {runner_up}" if gain >= 0.001 else f", tied with {runner_up}"
        )
    return best.policy, reason


def _show(value: float | None, objective: Objective) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if objective == "cost" else f"{value / 3600:.3g} h"


def compare_policies(
    table: ThroughputTable,
    cluster: Cluster,
    jobs: list[Job],
    policies: Sequence[str],
    *,
    objective: Objective = "jct",
    seed: int = 0,
    round_s: float = DEFAULT_ROUND_S,
    method: str = DEFAULT_METHOD,
    gavel_compat: bool = False,
    restart_cost_s: float | None = None,
    migration_aware: bool = False,
    round_auto: bool = False,
    max_active_jobs: int | None = None,
    max_time_s: float | None = None,
    on_policy: Callable[[PolicyOutcome, int, int], None] | None = None,
) -> Comparison:
    """Simulate `jobs` under each policy; `on_policy(outcome, done, total)` reports progress.

    Restarts cost `restart_cost_s` (None: the table's restart columns, the cluster's
    restart_s); when nothing gives a cost they are still counted, at 0 s, and the
    comparison's `restart_note` says so. `round_auto`: each policy runs at the round length
    `--round-length auto` chooses for it (planner/modes/round_length.py)."""
    check_policies(policies)
    if objective not in OBJECTIVES:
        raise InputError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}", field="--objective")
    if not jobs:
        raise InputError("the job list is empty", field="--jobs")
    known = charged_restarts(table, cluster, restart_cost_s, migration_aware, gavel_compat) is not None
    counted = restart_cost_s if known or gavel_compat else 0.0  # unknown: count the restarts, charge nothing
    outcomes = []
    for k, name in enumerate(policies, start=1):
        config = SimulationConfig(
            policy=name,
            round_s=round_s,
            gavel_compat=gavel_compat,
            seed=seed,
            solver_method=method,
            restart_cost_s=counted,
            migration_aware=migration_aware,
            max_active_jobs=max_active_jobs,
            max_time_s=max_time_s,
        )
        if round_auto:
            config = replace(
                config, round_s=choose_for_simulation(table, cluster, Workload(jobs=list(jobs)), config).round_s
            )
        outcomes.append(run_policy(table, cluster, jobs, config))
        outcomes[-1].round_s = config.round_s
        if on_policy is not None:
            on_policy(outcomes[-1], k, len(policies))
    recommended, reason = recommend(outcomes, objective)
    comparison = Comparison(outcomes, objective, len(jobs), heterogeneity_ratios(outcomes), recommended, reason)
    if not known and not gavel_compat:
        comparison.restart_note = _unknown_note(outcomes, recommended)
    return comparison


def _unknown_note(outcomes: Sequence[PolicyOutcome], recommended: str | None) -> str | None:
    """The note for restarts counted at 0 s: those of the recommended policy (else the first that ran)."""
    ran = [o for o in outcomes if o.restarts is not None]
    shown = next((o for o in ran if o.policy == recommended), ran[0] if ran else None)
    if shown is None:
        return None
    planned = PlannedRestarts(shown.restarts or 0, shown.restarts_across_types or 0)
    return f"{unknown_cost_note(planned)}; counted under {shown.policy}"
