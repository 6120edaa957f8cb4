"""What-if capacity search (`rota capacity`): which nodes to add (or retire) for a job list.

Every configuration is the current cluster plus (or minus) whole nodes of the catalogue's node
types, within the question's limits (nodes per type, money, power). Each is

1. screened: the policy's steady-state allocation with every job of the list present (one LP,
   the one the planner solves each round); a job's estimated completion is its steps over its
   effective throughput Σ_j x_ij T_ij, so the screen ranks configurations by the policy's own
   view of them in milliseconds; then
2. confirmed (the most promising ones, and the current cluster): a full simulation of the job
   list on that cluster, the same engine as `rota simulate`.

The Pareto front (cost against average JCT) is drawn from the confirmed ones; the
recommendation is the cheapest confirmed configuration meeting the target within the budget
(no target: the best average JCT within the budget).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.formats.catalogue import HOURS_PER_MONTH, Catalogue, NodeType
from planner.formats.cluster import Cluster, WorkerType
from planner.formats.jobs import Job
from planner.formats.table import ThroughputTable
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.policies import make_policy
from planner.policies.problem import Problem, build_problem

METRICS = ("avg_jct_h", "p90_jct_h", "makespan_h")
JCT_TIE = 0.01  # average JCTs this close (relative) count as equal when choosing


@dataclass(frozen=True)
class Target:
    """`metric <= limit`, e.g. avg_jct_h <= 20."""

    metric: str
    limit: float

    def met(self, measures: dict[str, float | None]) -> bool:
        value = measures.get(self.metric)
        return value is not None and value <= self.limit

    def __str__(self) -> str:
        return f"{self.metric} <= {self.limit:g}"


def parse_target(text: str) -> Target:
    metric, sep, limit = (part.strip() for part in text.partition("<="))
    if not sep or metric not in METRICS:
        raise InputError(
            f"expected METRIC<=LIMIT with METRIC one of {', '.join(METRICS)}, got {text!r}", field="--target"
        )
    try:
        value = float(limit)
    except ValueError:
        raise InputError(f"the limit must be a number of hours, got {limit!r}", field="--target") from None
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"the limit must be positive and finite, got {limit!r}", field="--target")
    return Target(metric, value)


@dataclass(frozen=True)
class Question:
    budget: float | None = None  # money for the added nodes
    power_budget_kw: float | None = None  # power of the added GPUs
    target: Target | None = None
    retire: bool = False  # also consider removing nodes of the current cluster
    rent_months: float | None = None  # cost = renting the added nodes this long, not buying them
    max_added_gpus: int | None = None  # "room for 16 more GPUs": added GPUs of all types together


@dataclass(frozen=True)
class Config:
    """Nodes added (negative: retired) per catalogue node type, in catalogue order."""

    added: tuple[int, ...]

    def label(self, catalogue: Catalogue) -> str:
        parts = [f"{n:+d} {name}" for name, n in zip(catalogue.names, self.added) if n]
        return ", ".join(parts) or "current cluster"

    @property
    def is_current(self) -> bool:
        return not any(self.added)


def _money(node: NodeType, nodes: int, question: Question) -> float | None:
    if nodes <= 0:
        return 0.0  # retiring costs nothing here (and no resale is assumed)
    if question.rent_months is not None:
        monthly = node.rent_per_month()
        return None if monthly is None else nodes * monthly * question.rent_months
    return None if node.price_per_node is None else nodes * node.price_per_node


def config_cost(catalogue: Catalogue, config: Config, question: Question) -> float | None:
    """Money for the added nodes (None: a node type added has no price for this question)."""
    total = 0.0
    for node, n in zip(catalogue.node_types.values(), config.added):
        money = _money(node, n, question)
        if money is None:
            return None
        total += money
    return total


def config_power_kw(catalogue: Catalogue, config: Config) -> float | None:
    """Power of the added GPUs less the retired ones (None: a node type used has no power figure)."""
    total = 0.0
    for node, n in zip(catalogue.node_types.values(), config.added):
        if n:
            if node.power_per_gpu_w is None:
                return None
            total += n * node.gpus_per_node * node.power_per_gpu_w / 1000.0
    return total


def check_catalogue(catalogue: Catalogue, cluster: Cluster, table: ThroughputTable, question: Question) -> None:
    """Node types that cannot be searched are errors: no table rows, a node size that does not
    match the cluster's nodes of that type, or no price / power figure where the question needs one."""
    for node in catalogue.node_types.values():
        where = f"node_types.{node.name}"
        if node.worker_type not in table.worker_types:
            raise InputError(
                f"worker type {node.worker_type!r} has no rows in the table {table.path} "
                "(measure it with rota profile, or estimate it: rota table estimate --solo)",
                path=catalogue.path,
                field=f"{where}.worker_type",
            )
        current = cluster.worker_types.get(node.worker_type)
        if current is not None and current.gpus_per_node != node.gpus_per_node:
            raise InputError(
                f"{node.gpus_per_node} GPUs per node, but the cluster's {node.worker_type} nodes have "
                f"{current.gpus_per_node}: one worker type has one node size",
                path=catalogue.path,
                field=f"{where}.gpus_per_node",
            )
        if node.max_nodes and question.budget is not None:
            priced = node.rent_per_gpu_hour if question.rent_months is not None else node.price_per_node
            if priced is None:
                key = "rent_per_gpu_hour" if question.rent_months is not None else "price_per_node"
                raise InputError("is needed for a money budget", path=catalogue.path, field=f"{where}.{key}")
        if node.max_nodes and question.power_budget_kw is not None and node.power_per_gpu_w is None:
            raise InputError("is needed for a power budget", path=catalogue.path, field=f"{where}.power_per_gpu_w")


def _retirable(catalogue: Catalogue, cluster: Cluster, question: Question) -> list[int]:
    """Per node type: how many of the cluster's nodes of its worker type may be retired."""
    if not question.retire:
        return [0] * len(catalogue.names)
    out, claimed = [], set()
    for node in catalogue.node_types.values():
        current = cluster.worker_types.get(node.worker_type)
        first = current is not None and node.worker_type not in claimed
        out.append(current.gpus // current.gpus_per_node if first and current is not None else 0)
        claimed.add(node.worker_type)
    return out


def configurations(catalogue: Catalogue, cluster: Cluster, question: Question) -> Iterable[Config]:
    """Every configuration within the limits, in a fixed order (the current cluster first)."""
    retire = _retirable(catalogue, cluster, question)
    ranges = [range(-r, node.max_nodes + 1) for node, r in zip(catalogue.node_types.values(), retire)]
    current = Config(tuple(0 for _ in ranges))
    yield current
    for added in itertools.product(*ranges):
        config = Config(tuple(added))
        if config != current and within_limits(catalogue, config, question, cluster):
            yield config


def sample_configurations(
    catalogue: Catalogue,
    cluster: Cluster,
    question: Question,
    screen: Callable[[Config], Screened],
    trials: int,
    seed: int = 0,
) -> None:
    """A search too large to enumerate: `trials` configurations chosen by Optuna's NSGA-II sampler
    (seeded: the same question gives the same sample), minimising cost and the screen's estimated
    average JCT, with the limits as constraints. The current cluster is screened first; each
    configuration once (a repeated suggestion is answered from the first screen)."""
    try:
        import optuna
    except ImportError:
        raise InputError(
            f"{count_configurations(catalogue, cluster, question):,} configurations are more than --max-configs "
            f"{trials:,}: sampling them needs optuna (pip install 'rota[capacity]'), or lower max_nodes",
            field="--max-configs",
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    retire = _retirable(catalogue, cluster, question)
    current = Config(tuple(0 for _ in catalogue.names))
    seen: dict[Config, Screened] = {current: screen(current)}

    def objective(trial) -> tuple[float, float]:
        config = Config(
            tuple(
                trial.suggest_int(name, -r, node.max_nodes)
                for (name, node), r in zip(catalogue.node_types.items(), retire)
            )
        )
        ok = within_limits(catalogue, config, question, cluster)
        trial.set_constraint("limits", 0.0 if ok else 1.0)  # <= 0: within the money, power and GPU limits
        if not ok:
            return math.inf, math.inf
        if config not in seen:
            seen[config] = screen(config)
        result = seen[config]
        cost = result.cost if result.cost is not None else 0.0
        jct = result.est_avg_jct_h if math.isfinite(result.est_avg_jct_h) else 1e12
        return cost, jct

    sampler = optuna.samplers.NSGAIISampler(seed=seed)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.optimize(objective, n_trials=max(0, trials - 1))


def count_configurations(catalogue: Catalogue, cluster: Cluster, question: Question) -> int:
    """How many configurations the limits per type allow (before money and power)."""
    retire = _retirable(catalogue, cluster, question)
    return math.prod(node.max_nodes + 1 + r for node, r in zip(catalogue.node_types.values(), retire))


def within_limits(catalogue: Catalogue, config: Config, question: Question, cluster: Cluster) -> bool:
    if question.max_added_gpus is not None:
        added = sum(max(0, n) * node.gpus_per_node for node, n in zip(catalogue.node_types.values(), config.added))
        if added > question.max_added_gpus:
            return False
    if question.budget is not None:
        cost = config_cost(catalogue, config, question)
        if cost is None or cost > question.budget:
            return False
    if question.power_budget_kw is not None:
        power = config_power_kw(catalogue, config)
        if power is None or power > question.power_budget_kw:
            return False
    gpus = gpus_per_type(catalogue, config, cluster)
    return any(n > 0 for n in gpus.values())


def gpus_per_type(catalogue: Catalogue, config: Config, cluster: Cluster) -> dict[str, int]:
    """GPUs of every worker type (the cluster's, then the catalogue's new ones) in this configuration."""
    gpus = {name: w.gpus for name, w in cluster.worker_types.items()}
    for node, n in zip(catalogue.node_types.values(), config.added):
        gpus[node.worker_type] = gpus.get(node.worker_type, 0) + n * node.gpus_per_node
    return gpus


def cluster_for(catalogue: Catalogue, config: Config, cluster: Cluster) -> Cluster:
    """The configuration as a cluster spec: the current nodes kept (the last ones retired first),
    added nodes named <worker type>-new-<k>; a worker type left with no GPU is left out."""
    per_node = {name: w.gpus_per_node for name, w in cluster.worker_types.items()}
    for node in catalogue.node_types.values():
        per_node.setdefault(node.worker_type, node.gpus_per_node)
    out: dict[str, WorkerType] = {}
    for name, gpus in gpus_per_type(catalogue, config, cluster).items():
        if gpus <= 0:
            continue
        size = per_node[name]
        old = cluster.worker_types.get(name)
        kept = list(old.nodes[: gpus // size]) if old else []
        taken = set(kept)
        k = 0
        while len(kept) < gpus // size:
            candidate = f"{name}-new-{k}"
            k += 1
            if candidate not in taken:
                kept.append(candidate)
        if old is not None:
            out[name] = replace(
                old, gpus=gpus, nodes=tuple(kept), domains={n: d for n, d in old.domains.items() if n in kept}
            )
        else:
            cost = next((n.rent_per_gpu_hour for n in catalogue.node_types.values() if n.worker_type == name), None)
            out[name] = WorkerType(name, gpus, size, tuple(kept), cost_per_gpu_hour=cost)
    return Cluster(out, path=f"{cluster.path} {config.label(catalogue)}", tenants=cluster.tenants)


def union_cluster(catalogue: Catalogue, cluster: Cluster) -> Cluster:
    """Every worker type at its most GPUs: what the job list is validated against."""
    most = Config(tuple(node.max_nodes for node in catalogue.node_types.values()))
    return cluster_for(catalogue, most, cluster)


# --------------------------------------------------------------------------- the screen


@dataclass
class Screened:
    config: Config
    cost: float | None
    power_kw: float | None
    gpus: dict[str, int]
    est_avg_jct_h: float  # inf: some job cannot run anywhere in this configuration
    est_p90_jct_h: float
    est_makespan_h: float
    objective: float | None
    utilisation: dict[str, float]
    stranded: list[str] = field(default_factory=list)  # job ids that cannot run here


@dataclass
class _FixedShares(Problem):
    """A problem whose proportional shares are fixed (those of the largest configuration): the
    policy's normaliser is then the same for every configuration, so its objective compares
    across them and more GPUs can only raise it (the LP's feasible set only grows). The policy's
    own normaliser follows the cluster's size, so its objective alone does not compare."""

    shares: np.ndarray | None = None

    def proportional_throughput(self) -> np.ndarray:
        assert self.shares is not None
        return self.shares


class Screen:
    """The steady-state screen: one problem over every worker type, its capacities set per configuration."""

    def __init__(
        self, jobs: Sequence[Job], table: ThroughputTable, catalogue: Catalogue, cluster: Cluster, policy: str
    ):
        self.catalogue, self.cluster, self.policy = catalogue, cluster, policy
        self.base = build_problem(list(jobs), table, union_cluster(catalogue, cluster))
        self.shares = self.base.proportional_throughput()
        self.rates = self.base.throughput.copy()
        self.names = self.base.worker_types

    def __call__(self, config: Config, question: Question) -> Screened:
        gpus = gpus_per_type(self.catalogue, config, self.cluster)
        capacity = np.array([max(0, gpus.get(w, 0)) for w in self.names], dtype=float)
        rates = np.where(self.base.scale[:, None] > capacity[None, :], 0.0, self.rates)
        problem = replace(self.base, capacity=capacity, throughput=rates, cost=None)
        runnable = rates.max(axis=1) > 0
        stranded = [jid for jid, ok in zip(problem.job_ids, runnable) if not ok]
        cost, power = config_cost(self.catalogue, config, question), config_power_kw(self.catalogue, config)
        if stranded:
            inf = math.inf
            return Screened(config, cost, power, gpus, inf, inf, inf, None, {}, stranded)
        # the policy as it would run there, for the completions; with one yardstick for every
        # configuration, for the objective (comparable across them, never lower with more GPUs)
        allocation = make_policy(self.policy).allocate(problem)
        yardstick = make_policy(self.policy).allocate(_FixedShares(**vars(problem), shares=self.shares))
        effective = (allocation.x * rates).sum(axis=1)
        hours = np.where(effective > 0, problem.remaining / np.maximum(effective, 1e-300) / 3600.0, math.inf)
        used = (allocation.x * problem.scale[:, None]).sum(axis=0)
        util = {w: float(u / c) for w, u, c in zip(self.names, used, capacity) if c > 0}
        return Screened(
            config,
            cost,
            power,
            gpus,
            float(hours.mean()),
            float(np.percentile(hours, 90)),
            float(hours.max()),
            yardstick.objective,
            util,
        )


# --------------------------------------------------------------------------- confirming


@dataclass
class Confirmed:
    config: Config
    status: str  # ok | saturated
    avg_jct_h: float | None
    p90_jct_h: float | None
    makespan_h: float | None
    utilisation: dict[str, float]
    jobs_finished: int
    runs: int = 1  # job lists (seeds) simulated; the measures are their means
    avg_jct_spread_h: float | None = None  # max - min of the runs' average JCTs (0 for one run)

    def measures(self) -> dict[str, float | None]:
        return {"avg_jct_h": self.avg_jct_h, "p90_jct_h": self.p90_jct_h, "makespan_h": self.makespan_h}


def _hours(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 3600.0


def confirm(
    jobs: Sequence[Job],
    table: ThroughputTable,
    catalogue: Catalogue,
    cluster: Cluster,
    config: Config,
    sim: SimulationConfig,
) -> Confirmed:
    """A full simulation of the job list on the configuration's cluster."""
    result = run_simulation(table, cluster_for(catalogue, config, cluster), Workload(jobs=list(jobs)), sim)
    metrics = result.metrics
    jct = metrics.get("jct_s") or {}
    return Confirmed(
        config,
        result.status,
        _hours(jct.get("mean")),
        _hours(jct.get("p90")),
        _hours(metrics.get("makespan_s")),
        dict(metrics.get("utilisation") or {}),
        int(metrics.get("jobs_finished") or 0),
    )


def combine(runs: Sequence[Confirmed]) -> Confirmed:
    """One configuration's simulations over several job lists (seeds): the means, and the spread."""
    first = runs[0]
    if len(runs) == 1:
        return replace(first, avg_jct_spread_h=0.0 if first.avg_jct_h is not None else None)
    ok = all(r.status == "ok" and r.avg_jct_h is not None for r in runs)

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if ok and len(known) == len(values) else None

    averages = [r.avg_jct_h for r in runs if r.avg_jct_h is not None]
    types = {k for r in runs for k in r.utilisation}
    return Confirmed(
        first.config,
        "ok" if ok else next(r.status for r in runs if r.status != "ok" or r.avg_jct_h is None),
        mean([r.avg_jct_h for r in runs]),
        mean([r.p90_jct_h for r in runs]),
        mean([r.makespan_h for r in runs]),
        {k: sum(r.utilisation.get(k, 0.0) for r in runs) / len(runs) for k in types},
        sum(r.jobs_finished for r in runs),
        len(runs),
        max(averages) - min(averages) if ok else None,
    )


# --------------------------------------------------------------------------- choosing


def pareto(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both (cost, JCT), both minimised; ties kept once."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], math.inf
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def recommend(
    confirmed: Sequence[Confirmed], screened: dict[Config, Screened], question: Question
) -> tuple[Confirmed | None, str]:
    """The recommended configuration and why (or None and why none)."""
    done = [c for c in confirmed if c.status == "ok" and c.avg_jct_h is not None]
    if not done:
        return None, "no configuration finished its simulation"

    def cost(c: Confirmed) -> float:
        value = screened[c.config].cost
        return math.inf if value is None else value

    target = question.target
    if target is not None:
        meeting = [c for c in done if target.met(c.measures())]
        if meeting:
            best = min(meeting, key=lambda c: (cost(c), c.avg_jct_h, c.config.added))
            return best, f"the cheapest that meets {target}"
        best = min(done, key=lambda c: (c.measures()[target.metric] or math.inf, cost(c)))
        return best, f"none meets {target}: the closest to it"
    # within JCT_TIE of the best average JCT, the cheapest: a 0.1 % better JCT is not worth a node
    lowest = min(c.avg_jct_h for c in done if c.avg_jct_h is not None)
    near = [c for c in done if c.avg_jct_h is not None and c.avg_jct_h <= lowest * (1 + JCT_TIE)]
    best = min(near, key=lambda c: (cost(c), c.avg_jct_h, c.config.added))
    within = " within the budget" if question.budget is not None else ""
    return best, f"the cheapest within {100 * JCT_TIE:.0f} % of the lowest average JCT{within}"


def screen_front(screened: Sequence[Screened]) -> list[Config]:
    """The screen's own Pareto front of cost against estimated average JCT, cheapest first."""
    runnable = [s for s in screened if math.isfinite(s.est_avg_jct_h)]
    points = [(s.cost if s.cost is not None else math.inf, s.est_avg_jct_h) for s in runnable]
    return [runnable[i].config for i in pareto(points)]


def spread(n: int, k: int) -> list[int]:
    """k indices spread evenly over range(n), both ends included (all of them when n <= k)."""
    if n <= k:
        return list(range(n))
    if k <= 1:
        return [n - 1]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _between(front: list[Config], simulated: dict[Config, Confirmed], target: Target) -> Config | None:
    """The front configuration halfway between the cheapest one simulated to meet the target and
    the dearest cheaper one simulated to miss it, when one lies between them unsimulated."""
    ran = [i for i, config in enumerate(front) if config in simulated]
    hits = [i for i in ran if target.met(simulated[front[i]].measures())]
    if not hits:
        return None
    misses = [i for i in ran if i < hits[0]]
    low = misses[-1] if misses else -1
    gap = [i for i in range(low + 1, hits[0]) if front[i] not in simulated]
    return front[gap[len(gap) // 2]] if gap else None


def top_screened(screened: Iterable[Screened], k: int) -> list[Screened]:
    """The k most promising by the screen's estimated average JCT, then cost (runnable ones only)."""
    runnable = [s for s in screened if math.isfinite(s.est_avg_jct_h)]
    return sorted(runnable, key=lambda s: (s.est_avg_jct_h, s.cost if s.cost is not None else math.inf))[:k]


def rent_or_buy(catalogue: Catalogue) -> dict[str, float | None]:
    """Break-even months per node type (buying pays off after this much renting)."""
    return {name: node.break_even_months() for name, node in catalogue.node_types.items()}


__all__ = [
    "HOURS_PER_MONTH",
    "JCT_TIE",
    "Answer",
    "Config",
    "Confirmed",
    "Question",
    "Screen",
    "Screened",
    "Target",
    "answer",
    "check_catalogue",
    "cluster_for",
    "configurations",
    "confirm",
    "count_configurations",
    "pareto",
    "parse_target",
    "recommend",
    "rent_or_buy",
    "sample_configurations",
    "simulate_all",
    "top_screened",
    "union_cluster",
]


# --------------------------------------------------------------------------- the whole question


@dataclass
class Answer:
    screened: list[Screened]
    confirmed: list[Confirmed]
    front: list[Config]  # Pareto-optimal confirmed configurations, cheapest first
    recommended: Confirmed | None
    why: str
    current: Confirmed | None
    sampled_from: int | None = None  # the search was sampled from this many configurations


def _confirm_one(args: tuple) -> Confirmed:
    return confirm(*args)


def _confirm_on_ray(jobs_index: int, config: Config, shared: tuple) -> Confirmed:
    """A Ray task: the inputs come once through the object store (see sweep_ray)."""
    job_lists, table, catalogue, cluster, sim = shared
    return confirm(job_lists[jobs_index], table, catalogue, cluster, config, sim)


def _simulate_on_ray(ray: Any, configs: Sequence[Config], shared: tuple, n_lists: int, on_done) -> list[Confirmed]:
    remote = ray.remote(num_cpus=1, max_retries=0)(_confirm_on_ray)
    inputs = ray.put(shared)
    refs = [remote.remote(k, config, inputs) for config in configs for k in range(n_lists)]
    try:
        pending, done = list(refs), 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            done += len(ready)
            if on_done is not None:
                on_done(done, ray.get(ready[0]))
        return list(ray.get(refs))
    except BaseException:
        for ref in refs:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise


def simulate_all(
    configs: Sequence[Config],
    job_lists: Sequence[Sequence[Job]],
    table: ThroughputTable,
    catalogue: Catalogue,
    cluster: Cluster,
    sim: SimulationConfig,
    *,
    workers: int = 1,
    ray: Any = None,
    on_confirmed: Callable[[int, Confirmed], None] | None = None,
) -> list[Confirmed]:
    """Full simulations of `configs` on every job list (one per seed; their means), in `workers`
    processes or as one-CPU tasks of a connected Ray (`ray`), in the order given. `on_confirmed`
    counts single simulations."""
    tasks = [(jobs, table, catalogue, cluster, config, sim) for config in configs for jobs in job_lists]
    confirmed: list[Confirmed] = []
    if ray is not None:
        shared = (list(job_lists), table, catalogue, cluster, sim)
        confirmed = _simulate_on_ray(ray, configs, shared, len(job_lists), on_confirmed)
    elif workers > 1 and len(tasks) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=multiprocessing.get_context("fork")) as pool:
            for result in pool.map(_confirm_one, tasks):
                confirmed.append(result)
                if on_confirmed is not None:
                    on_confirmed(len(confirmed), result)
    else:
        for task in tasks:
            confirmed.append(_confirm_one(task))
            if on_confirmed is not None:
                on_confirmed(len(confirmed), confirmed[-1])
    k = len(job_lists)
    return [combine(confirmed[i : i + k]) for i in range(0, len(confirmed), k)]


def answer(
    jobs: Sequence[Job],
    table: ThroughputTable,
    catalogue: Catalogue,
    cluster: Cluster,
    question: Question,
    sim: SimulationConfig,
    *,
    top: int = 10,
    workers: int = 1,
    max_screened: int | None = None,
    seed: int = 0,
    job_lists: Sequence[Sequence[Job]] | None = None,
    ray: Any = None,
    on_screened: Callable[[int, Screened], None] | None = None,
    on_confirmed: Callable[[int, Confirmed], None] | None = None,
) -> Answer:
    """Screen every configuration (more than `max_screened`: that many, sampled by a
    multi-objective search), simulate the `top` most promising and the current cluster (in
    `workers` processes) on every job list of `job_lists` (one per seed; default: `jobs`, which
    the screen uses), and choose."""
    screen = Screen(jobs, table, catalogue, cluster, sim.policy)
    screened: list[Screened] = []

    def screened_one(config: Config) -> Screened:
        screened.append(screen(config, question))
        if on_screened is not None:
            on_screened(len(screened), screened[-1])
        return screened[-1]

    space = count_configurations(catalogue, cluster, question)
    sampled = max_screened is not None and space > max_screened
    if max_screened is not None and sampled:
        sample_configurations(catalogue, cluster, question, screened_one, max_screened, seed)
    else:
        for config in configurations(catalogue, cluster, question):
            screened_one(config)
    by_config = {s.config: s for s in screened}
    front_by_cost = screen_front(screened)
    target = question.target
    if target is None:
        chosen = [s.config for s in top_screened(screened, top)]
    else:  # the cheapest way to a target lies along the front, anywhere in its cost range
        chosen = [front_by_cost[i] for i in spread(len(front_by_cost), top)]
    current = screened[0].config  # configurations() yields the current cluster first
    if current not in chosen and math.isfinite(screened[0].est_avg_jct_h):
        chosen.append(current)
    lists = job_lists or [jobs]

    def simulate(configs: list[Config]) -> list[Confirmed]:
        return simulate_all(
            configs, lists, table, catalogue, cluster, sim, workers=workers, ray=ray, on_confirmed=on_confirmed
        )

    confirmed = simulate(chosen)
    if target is not None:  # bisect along the front between the dearest miss and the cheapest hit
        for _ in range(top):
            between = _between(front_by_cost, {c.config: c for c in confirmed}, target)
            if between is None:
                break
            confirmed += simulate([between])
    done = [c for c in confirmed if c.status == "ok" and c.avg_jct_h is not None]
    points = [
        (by_config[c.config].cost if by_config[c.config].cost is not None else math.inf, c.avg_jct_h) for c in done
    ]
    front = [done[i].config for i in pareto(points)]  # type: ignore[arg-type]
    recommended, why = recommend(confirmed, by_config, question)
    baseline = next((c for c in confirmed if c.config == current), None)
    return Answer(screened, confirmed, front, recommended, why, baseline, space if sampled else None)
