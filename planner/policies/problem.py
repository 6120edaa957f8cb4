"""The arrays every policy reads: jobs × worker types, built from validated inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from planner.formats.cluster import Cluster, Tenants
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable


@dataclass
class Problem:
    job_ids: list[str]
    job_types: list[JobType]
    worker_types: list[str]
    capacity: np.ndarray  # (m,) GPUs per worker type
    throughput: np.ndarray  # (n, m) steps/s of the whole job; 0 = cannot run there
    scale: np.ndarray  # (n,) GPUs a job needs at once
    weight: np.ndarray  # (n,) priority weights
    remaining: np.ndarray  # (n,) steps left
    time_since_start: np.ndarray  # (n,) seconds since arrival
    cost: np.ndarray | None = None  # (m,) price per GPU-hour, None if unknown
    entity: list[str | None] = field(default_factory=list)
    slo_left_s: np.ndarray | None = None  # (n,) seconds to deadline, nan = no SLO
    table: ThroughputTable | None = None  # for co-located (pair) throughputs
    tenants: Tenants | None = None  # the cluster's tenants (weights, quotas); None: it declares none

    @property
    def n_jobs(self) -> int:
        return len(self.job_ids)

    def proportional_throughput(self) -> np.ndarray:
        """prop_i = Σ_j T_ij N_j / N (spec §4.0): independent of the number of jobs."""
        return self.throughput @ self.capacity / self.capacity.sum()

    def quotas(self) -> Quotas | None:
        """The tenants' quotas over this problem's jobs and worker types; None when no job's
        tenant has a quota on one of them (then the LP has no quota rows)."""
        if self.tenants is None or not self.tenants.has_quotas:
            return None
        codes: dict[str | None, int] = {}
        tenant = np.array([codes.setdefault(e, len(codes)) for e in self.entity], dtype=np.int64)
        limit = np.full((len(codes), len(self.worker_types)), np.inf)
        for entity, code in codes.items():
            quota = self.tenants.quota(entity)
            for j, w in enumerate(self.worker_types):
                if w in quota:
                    limit[code, j] = quota[w]
        if np.isinf(limit).all():
            return None
        return Quotas(tenant, limit)

    def tenant_weights(self, explicit: Mapping[str, float] | None = None) -> dict[str | None, float] | None:
        """Entity -> weight of every entity among the jobs (None: the jobs with no entity), from
        the cluster's tenants with `explicit` ones (--entity-weights) overriding; None when the
        cluster declares no tenants (then `explicit` alone decides, as before tenants)."""
        if self.tenants is None:
            return None
        weights: dict[str | None, float] = {}
        for entity in self.entity:
            if entity not in weights:
                given = explicit.get(entity) if explicit is not None and entity is not None else None
                weights[entity] = self.tenants.weight(entity) if given is None else given
        return weights


@dataclass(frozen=True)
class Quotas:
    """Tenant quotas as arrays: the LP's quota rows (planner/policies/space.py)."""

    tenant: np.ndarray  # (n,) each job's tenant, numbered in order of first appearance
    limit: np.ndarray  # (tenants, m) GPUs each tenant may hold per worker type; inf: no quota


def build_problem(
    jobs: list[Job],
    table: ThroughputTable,
    cluster: Cluster,
    *,
    now: float = 0.0,
    remaining: dict[str, float] | None = None,
) -> Problem:
    names = cluster.names
    capacity = np.array([cluster.capacity(w) for w in names], dtype=float)
    worker_types = tuple(names)
    solo_row = table.solo_row  # one lookup per job type, kept by the table between problems
    tput = np.array([solo_row(worker_types, job.job_type) for job in jobs], dtype=float).reshape(len(jobs), len(names))
    scale = np.array([job.scale_factor for job in jobs], dtype=float)
    # A job cannot run on a type with fewer GPUs than it needs.
    tput[scale[:, None] > capacity[None, :]] = 0.0
    costs = [cluster.worker_types[w].cost_per_gpu_hour for w in names]
    left = np.array([(remaining or {}).get(j.job_id, j.remaining_steps) for j in jobs], dtype=float)
    slo = np.array([np.nan if j.slo_s is None else j.arrival_s + j.slo_s - now for j in jobs], dtype=float)
    return Problem(
        job_ids=[j.job_id for j in jobs],
        job_types=[j.job_type for j in jobs],
        worker_types=names,
        capacity=capacity,
        throughput=tput,
        scale=scale,
        weight=np.array([j.priority_weight for j in jobs], dtype=float),
        remaining=left,
        time_since_start=np.array([max(0.0, now - j.arrival_s) for j in jobs], dtype=float),
        cost=None if any(c is None for c in costs) else np.array(costs, dtype=float),
        entity=[j.entity for j in jobs],
        slo_left_s=slo,
        table=table,
        tenants=cluster.tenants,
    )
