"""Policy registry: name -> (factory, description). Names follow Gavel so results compare."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from planner.errors import InputError
from planner.formats.cluster import Cluster
from planner.policies.allox import AlloX
from planner.policies.base import Allocation, Policy
from planner.policies.closed_form import Isolated, Proportional
from planner.policies.fifo import Fifo, FifoPacked
from planner.policies.finish_time_fairness import FinishTimeFairness
from planner.policies.gandiva import Gandiva
from planner.policies.lp import DEFAULT_METHOD
from planner.policies.makespan import MinTotalDuration
from planner.policies.max_min_fairness import MaxMinFairness
from planner.policies.max_sum_throughput import MaxSumThroughput
from planner.policies.reuse import MAX_REUSE_LIMIT, ReusingMaxMinFairness
from planner.policies.water_filling import ENTITY_POLICIES, WaterFilling


@dataclass
class PolicyOptions:
    method: str = DEFAULT_METHOD
    aggregate: bool = True
    seed: int = 0
    gavel_compat: bool = False
    allox_alpha: float = 1.0
    entity_weights: dict[str, float] | None = None
    entity_policies: dict[str, str] = field(default_factory=dict)
    reuse_solves: int = 0  # LAS: reuse the last solve up to this many times in a row (policies/reuse.py)


def _las(**fixed) -> Callable[[PolicyOptions], Policy]:
    def make(o: PolicyOptions) -> Policy:
        if o.reuse_solves and not fixed.get("packed"):  # REUSE_POLICIES: the last solve, reused
            return ReusingMaxMinFairness(method=o.method, aggregate=o.aggregate, reuse_limit=o.reuse_solves, **fixed)
        return MaxMinFairness(method=o.method, aggregate=o.aggregate, **fixed)

    return make


def _lp(cls, **fixed) -> Callable[[PolicyOptions], Policy]:
    return lambda o: cls(method=o.method, aggregate=o.aggregate, **fixed)


def _compat(cls, **fixed) -> Callable[[PolicyOptions], Policy]:
    return lambda o: cls(method=o.method, aggregate=o.aggregate, gavel_compat=o.gavel_compat, **fixed)


def _ftf(**fixed) -> Callable[[PolicyOptions], Policy]:
    # bisection re-solves one model many times: dual simplex warm-starts, IPM cannot
    return lambda o: FinishTimeFairness(method="simplex", aggregate=o.aggregate, gavel_compat=o.gavel_compat, **fixed)


def _water(**fixed) -> Callable[[PolicyOptions], Policy]:
    return lambda o: WaterFilling(
        method=o.method,
        aggregate=o.aggregate,
        entity_weights=o.entity_weights,
        entity_policies=dict(o.entity_policies),
        gavel_compat=o.gavel_compat,
        **fixed,
    )


# name -> (factory, what it optimises, inputs it needs beyond throughputs and cluster)
REGISTRY: dict[str, tuple[Callable[[PolicyOptions], Policy], str, str]] = {
    "isolated": (lambda o: Isolated(), "equal 1/n share of every worker type", "-"),
    "proportional": (lambda o: Proportional(), "share of each type proportional to its size", "-"),
    "max_min_fairness": (_las(perf_aware=False), "LAS, heterogeneity-agnostic: equalise GPU-time", "priority_weight"),
    "max_min_fairness_perf": (
        _las(perf_aware=True),
        "LAS, heterogeneity-aware: equalise throughput vs. proportional share",
        "priority_weight",
    ),
    "max_min_fairness_packed": (
        _las(perf_aware=True, packed=True),
        "LAS with space sharing (co-located pairs)",
        "priority_weight, pair rows",
    ),
    "max_min_fairness_water_filling": (
        _water(perf_aware=False),
        "unique max-min fair GPU-time shares (progressive filling)",
        "priority_weight; entity + --entity-weights for multi-level",
    ),
    "max_min_fairness_water_filling_perf": (
        _water(perf_aware=True),
        "unique max-min fair throughput shares (progressive filling)",
        "priority_weight; entity + --entity-weights for multi-level",
    ),
    "max_min_fairness_water_filling_packed": (
        _water(perf_aware=True, packed=True),
        "progressive filling with space sharing",
        "pair rows; entity + --entity-weights for multi-level",
    ),
    "fifo": (
        lambda o: Fifo(perf_aware=False, seed=o.seed, gavel_compat=o.gavel_compat),
        "first come first served, random free type",
        "arrival_s",
    ),
    "fifo_perf": (lambda o: Fifo(perf_aware=True), "first come first served, fastest free type", "arrival_s"),
    "fifo_packed": (
        lambda o: FifoPacked(),
        "fifo_perf, then queued jobs join running ones when packing pays",
        "arrival_s, pair rows",
    ),
    "finish_time_fairness": (
        _ftf(perf_aware=False),
        "Themis finish-time fairness, heterogeneity-agnostic",
        "steps left, arrival_s",
    ),
    "finish_time_fairness_perf": (
        _ftf(perf_aware=True),
        "minimise the worst finish-time ratio rho",
        "steps left, arrival_s",
    ),
    "finish_time_fairness_packed": (
        _ftf(perf_aware=True, packed=True),
        "finish-time fairness with space sharing",
        "steps left, arrival_s, pair rows",
    ),
    "min_total_duration": (
        _compat(MinTotalDuration, perf_aware=False),
        "makespan, heterogeneity-agnostic",
        "steps left",
    ),
    "min_total_duration_perf": (
        _compat(MinTotalDuration, perf_aware=True),
        "makespan: finish all jobs earliest",
        "steps left",
    ),
    "min_total_duration_packed": (
        _compat(MinTotalDuration, perf_aware=True, packed=True),
        "makespan with space sharing",
        "steps left, pair rows",
    ),
    "max_sum_throughput_perf": (_lp(MaxSumThroughput), "maximise total steps/s", "-"),
    "max_sum_throughput_normalized_by_cost_perf": (
        _lp(MaxSumThroughput, cost_normalized=True),
        "maximise steps per dollar",
        "cost_per_gpu_hour",
    ),
    "max_sum_throughput_normalized_by_cost_perf_SLOs": (
        _lp(MaxSumThroughput, cost_normalized=True, slos=True),
        "steps per dollar, keeping each job's deadline (dropped if infeasible)",
        "cost_per_gpu_hour, slo_s",
    ),
    "max_sum_throughput_normalized_by_cost_packed_SLOs": (
        _lp(MaxSumThroughput, cost_normalized=True, slos=True, packed=True),
        "steps per dollar with space sharing and deadlines",
        "cost_per_gpu_hour, slo_s, pair rows",
    ),
    "allox": (
        lambda o: AlloX(alpha=o.allox_alpha),
        "AlloX: min sum of completion times by matching",
        "steps left; single-GPU jobs",
    ),
    "gandiva": (lambda o: Gandiva(seed=o.seed), "Gandiva: equal shares, random packing under load", "pair rows"),
}

POLICY_NAMES = list(REGISTRY)
# The policies that read entity weights and per-entity policies (multi-level fairness).
HIERARCHICAL_POLICIES = tuple(name for name in REGISTRY if name.startswith("max_min_fairness_water_filling"))

# The policies that can reuse their last solve while the job classes stay (--reuse-solves).
REUSE_POLICIES = ("max_min_fairness", "max_min_fairness_perf")


# The policies that honour tenant quotas (docs/tenants.md): the unpacked LP policies, whose
# allocation space carries the quota rows (space.py). The others refuse a cluster with quotas:
# closed forms and greedy ones (isolated, proportional, fifo*, gandiva, allox) have no LP,
# the packed LPs have no quota rows over pair cells yet, and finish-time fairness bisects from
# the isolated allocation, which a quota can make infeasible.
QUOTA_POLICIES = (
    "max_min_fairness",
    "max_min_fairness_perf",
    "max_min_fairness_water_filling",
    "max_min_fairness_water_filling_perf",
    "min_total_duration",
    "min_total_duration_perf",
    "max_sum_throughput_perf",
    "max_sum_throughput_normalized_by_cost_perf",
    "max_sum_throughput_normalized_by_cost_perf_SLOs",
)


def check_tenants(name: str, cluster: Cluster) -> None:
    """InputError (one line) when the cluster gives tenants quotas that policy `name` cannot honour."""
    tenants = cluster.tenants
    if tenants is None or not tenants.has_quotas or name in QUOTA_POLICIES:
        return
    limited = ", ".join(sorted(t.name for t in tenants.listed.values() if t.quota))
    raise InputError(
        f"policy {name!r} cannot honour the tenant quotas of cluster {cluster.path} (tenants {limited}); "
        f"choose one of {', '.join(QUOTA_POLICIES)}, or drop the quotas",
        field="policy",
    )


def make_cluster_policy(name: str, cluster: Cluster, options: PolicyOptions | None = None, **overrides) -> Policy:
    """`make_policy` for a run on `cluster`: refuses (`check_tenants`) a policy that cannot honour
    the cluster's tenant quotas. The tenants' weights and quotas reach the policy through the
    problem each re-solve builds from the cluster (planner/policies/problem.py), so nothing else
    changes: the hierarchical policies take the tenants' weights unless `entity_weights`
    (--entity-weights) names an entity's own, and every policy of QUOTA_POLICIES keeps the quotas."""
    policy = make_policy(name, options, **overrides)  # an unknown name is said as such first
    check_tenants(name, cluster)
    return policy


def describe_policies() -> dict[str, dict[str, str]]:
    return {name: {"description": text, "needs": needs} for name, (_, text, needs) in REGISTRY.items()}


def make_policy(name: str, options: PolicyOptions | None = None, **overrides) -> Policy:
    """A fresh policy object (stateful policies keep their history in it)."""
    if name.startswith("allox_alpha="):
        try:
            overrides["allox_alpha"] = float(name.split("=", 1)[1])
        except ValueError:
            raise InputError(f"bad AlloX alpha in {name!r}", field="policy") from None
        name = "allox"
    if name not in REGISTRY:
        raise InputError(f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}", field="policy")
    options = options or PolicyOptions()
    if overrides:
        options = PolicyOptions(**{**options.__dict__, **overrides})
    return REGISTRY[name][0](options)  # reuse_solves: read by the LAS factories only (check_reuse)


def check_reuse(
    name: str, reuse_solves: int, aggregate: bool = True, *, path: object = None, field: str = "reuse_solves"
) -> None:
    """InputError (one line) for a --reuse-solves out of range, with a policy that has no reuse, or
    with one LP row per job (--no-aggregate: no classes to compare). Tenant quotas also turn the
    reuse off (classes then carry the tenant); that is said in docs/simulation.md, not refused."""
    if isinstance(reuse_solves, bool) or not isinstance(reuse_solves, int) or not 0 <= reuse_solves <= MAX_REUSE_LIMIT:
        raise InputError(
            f"--reuse-solves must be a whole number from 0 to {MAX_REUSE_LIMIT}, not {reuse_solves!r}",
            path=path,
            field=field,
        )
    if reuse_solves and name not in REUSE_POLICIES:
        raise InputError(
            f"--reuse-solves applies to {' and '.join(REUSE_POLICIES)}, not to {name!r}; leave it at 0",
            path=path,
            field=field,
        )
    if reuse_solves and not aggregate:
        raise InputError(
            "--reuse-solves compares classes of identical jobs, which --no-aggregate turns off; drop one of them",
            path=path,
            field=field,
        )


__all__ = [
    "Allocation",
    "Policy",
    "PolicyOptions",
    "POLICY_NAMES",
    "HIERARCHICAL_POLICIES",
    "ENTITY_POLICIES",
    "QUOTA_POLICIES",
    "REUSE_POLICIES",
    "MAX_REUSE_LIMIT",
    "check_reuse",
    "check_tenants",
    "make_cluster_policy",
    "make_policy",
    "describe_policies",
]
