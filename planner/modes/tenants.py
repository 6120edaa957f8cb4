"""Per-tenant summary of a run (pure): jobs, GPU time, shares, quota use and JCTs per tenant.

A tenant is a job's `entity` (docs/tenants.md); the jobs with no entity are one tenant, named
"(none)". The caller gives one row per job and the GPU-seconds each job received, per worker
type (`gpu_seconds_by_type` adds them up from the rounds' placements), and gets a JSON-ready
mapping tenant -> figures (`tenant_summary`), and table rows to print (`tenant_rows`,
`tenant_table`). `barred_jobs` / `refuse_barred` find the jobs a quota of 0 keeps off every
worker type they could run on.

Figures per tenant:
  jobs, finished          jobs in the rows, and those with a finish time
  weight, weight_share    the tenant's weight in the cluster spec (default weight for entities
                          it does not list), and its share of the weights of the tenants listed
                          here (None when the cluster declares no tenants)
  gpu_s, gpu_s_by_type    GPU-seconds received, in all and per worker type (None when
                          `gpu_seconds` gives some job's as one number: then no per-type
                          figures, no quota use)
  gpu_share               share of all the GPU-seconds the rows' jobs received
  active_s                first arrival to last finish (or to `end_s` when a job is unfinished)
  gpus_by_type            GPUs held on average while active: gpu_s_by_type / active_s
  quota, quota_use        the quota per type, and gpus_by_type / quota (1 = the whole quota,
                          time-averaged; None for a quota of 0 never used; inf if used anyway)
  jct_s                   distribution of the finished jobs' JCTs (planner.modes.metrics)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.table import Table

from planner.errors import InputError
from planner.formats.cluster import Cluster, Tenants, tenant_name
from planner.formats.jobs import Job
from planner.formats.table import ThroughputTable
from planner.modes.metrics import distribution
from planner.rounds.mechanism import Placement

# gpu_seconds value for a job: GPU-seconds in all (no per-type figures), or per worker type
GpuSeconds = Mapping[str, float | Mapping[str, float]]


@dataclass(frozen=True)
class JobRow:
    """What the summary needs of one job (a mapping with these keys works as well)."""

    job_id: str
    entity: str | None
    jct_s: float | None  # None: unfinished
    finish_s: float | None
    arrival_s: float


def gpu_seconds_by_type(
    rounds: Iterable[tuple[float, Sequence[Placement]]], into: dict[str, dict[str, float]] | None = None
) -> dict[str, dict[str, float]]:
    """Job id -> worker type -> GPU-seconds, from (seconds the round ran, its placements): each
    placement's GPUs × seconds, split evenly between the jobs it holds (a co-located pair shares
    its GPUs). `into`: a running tally to add to (returned)."""
    tally = {} if into is None else into
    for seconds, placements in rounds:
        for p in placements:
            share = seconds * len(p.gpus) / len(p.jobs)
            for jid in p.jobs:
                per_type = tally.setdefault(jid, {})
                per_type[p.worker_type] = per_type.get(p.worker_type, 0.0) + share
    return tally


def barred_jobs(jobs: Iterable[Job], table: ThroughputTable, cluster: Cluster) -> dict[str, str]:
    """Job id -> why, for the jobs whose tenant has a quota of 0 on every worker type where the job
    could run (a throughput and enough GPUs): no allocation will ever give them GPU time."""
    tenants = cluster.tenants
    if tenants is None or not tenants.has_quotas:
        return {}
    out = {}
    for job in jobs:
        fits = [w for w in cluster.names if cluster.capacity(w) >= job.scale_factor and table.solo(w, job.job_type) > 0]
        if fits and not any(tenants.allows(job.entity, w) for w in fits):
            out[job.job_id] = (
                f"tenant {tenant_name(job.entity)} has a quota of 0 on {', '.join(fits)}, "
                "every worker type the job can run on"
            )
    return out


def refuse_barred(jobs: Iterable[Job], table: ThroughputTable, cluster: Cluster, path: object = None) -> None:
    """InputError naming the first barred job (`barred_jobs`) and how many there are."""
    barred = barred_jobs(jobs, table, cluster)
    if barred:
        first, why = next(iter(barred.items()))
        more = f" (and {len(barred) - 1} more job(s))" if len(barred) > 1 else ""
        raise InputError(
            f"job {first!r} can never run: {why}{more}; raise the quota in cluster {cluster.path}",
            path=path,
            field="entity",
        )


def _field(row: JobRow | Mapping[str, Any], key: str) -> Any:
    return row.get(key) if isinstance(row, Mapping) else getattr(row, key)


def _number(value: Any) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


def tenant_summary(
    rows: Iterable[JobRow | Mapping[str, Any]],
    gpu_seconds: GpuSeconds,
    tenants: Tenants | None = None,
    *,
    end_s: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Tenant -> figures (module docstring), tenants in order of first appearance in `rows`.

    `rows`: job_id, entity, jct_s, finish_s, arrival_s per job (JobRow or a mapping; a JCT or
    finish of None or NaN: unfinished). `gpu_seconds`: job id -> GPU-seconds, a number or a
    mapping worker type -> number (jobs missing from it received none). `tenants`: the
    cluster's (weights and quotas; None: none declared). `end_s`: when the run ended, the end
    of an unfinished tenant's active span (default: the latest finish or arrival in `rows`)."""
    rows = list(rows)
    groups: dict[str, list[JobRow | Mapping[str, Any]]] = {}
    entity_of: dict[str, str | None] = {}
    for row in rows:
        entity = _field(row, "entity")
        name = tenant_name(entity)
        groups.setdefault(name, []).append(row)
        entity_of.setdefault(name, entity)
    if end_s is None:
        times = [_number(_field(r, "finish_s")) for r in rows] + [_number(_field(r, "arrival_s")) for r in rows]
        end_s = max((t for t in times if t is not None), default=0.0)
    received = {name: _received(group, gpu_seconds) for name, group in groups.items()}
    total = sum(sum(by_type.values()) for by_type, _ in received.values())
    weights = {name: tenants.weight(entity_of[name]) for name in groups} if tenants is not None else None
    weight_sum = sum(weights.values()) if weights else 0.0
    out: dict[str, dict[str, Any]] = {}
    for name, group in groups.items():
        by_type, typed = received[name]
        gpu_s = sum(by_type.values())
        finishes = [_number(_field(r, "finish_s")) for r in group]
        arrivals = [a for a in (_number(_field(r, "arrival_s")) for r in group) if a is not None]
        start = min(arrivals, default=0.0)
        last = end_s if any(f is None for f in finishes) else max((f for f in finishes if f is not None), default=start)
        active_s = max(0.0, last - start)
        gpus = {w: (s / active_s if active_s > 0 else 0.0) for w, s in by_type.items()}
        quota = dict(tenants.quota(entity_of[name])) if tenants is not None else {}
        entry: dict[str, Any] = {
            "jobs": len(group),
            "finished": sum(f is not None for f in finishes),
            "weight": None if weights is None else weights[name],
            "weight_share": None if weights is None or weight_sum <= 0 else weights[name] / weight_sum,
            "gpu_s": gpu_s,
            "gpu_s_by_type": dict(by_type) if typed else None,
            "gpu_share": gpu_s / total if total > 0 else 0.0,
            "active_s": active_s,
            "gpus_by_type": gpus if typed else None,
            "quota": quota or None,
            "quota_use": ({w: _use(gpus.get(w, 0.0), q) for w, q in quota.items()} or None) if typed else None,
            "jct_s": distribution(j for j in (_number(_field(r, "jct_s")) for r in group) if j is not None),
        }
        out[name] = entry
    return out


def _received(group: list[JobRow | Mapping[str, Any]], gpu_seconds: GpuSeconds) -> tuple[dict[str, float], bool]:
    """(worker type -> GPU-seconds the group's jobs received, whether every job's were given per
    type); a job given as a number counts under "all"."""
    by_type: dict[str, float] = {}
    typed = True
    for row in group:
        got = gpu_seconds.get(str(_field(row, "job_id")))
        if got is None:
            continue
        typed = typed and isinstance(got, Mapping)
        items = got.items() if isinstance(got, Mapping) else [("all", got)]
        for w, s in items:
            by_type[w] = by_type.get(w, 0.0) + float(s)
    # by name: the order (and so the total, summed in it) must not depend on which type a job
    # happened to be placed on first, nor on the round loop that booked it
    return dict(sorted(by_type.items())), typed


def _use(gpus: float, quota: float) -> float | None:
    if quota > 0:
        return gpus / quota
    return None if gpus <= 0 else math.inf


def _percent(value: float | None) -> str:
    return "-" if value is None else "inf" if math.isinf(value) else f"{100 * value:.1f} %"


def _peak(use: Mapping[str, float | None]) -> str:
    """The most used quota of a tenant, e.g. '95 % v100' ('-' without quotas)."""
    used = {w: u for w, u in use.items() if u is not None}
    if not used:
        return "-"
    w = max(used, key=lambda k: used[k])
    return f"{used[w] * 100:.0f} % {w}" if math.isfinite(used[w]) else f"inf {w}"


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


# Short headers: the table fits 80 columns (a pipe, a CI log); times in hours (the caption says so).
TENANT_COLUMNS = (
    "tenant",
    "jobs",
    "done",
    "weight",
    "GPU-h",
    "GPU %",
    "peak quota",
    "avg JCT",
    "p90 JCT",
)


def tenant_rows(summary: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """One row of text per tenant, in TENANT_COLUMNS order. 'peak quota' is the quota most used,
    e.g. '95 % v100' (every type's is in the summary's quota_use)."""
    rows = []
    for name, t in summary.items():
        use = t.get("quota_use") or {}
        rows.append(
            [
                name,
                str(t["jobs"]),
                str(t["finished"]),
                _percent(t.get("weight_share")),
                f"{t['gpu_s'] / 3600:,.0f}",
                _percent(t["gpu_share"]),
                _peak(use),
                _hours(t["jct_s"]["mean"]),
                _hours(t["jct_s"]["p90"]),
            ]
        )
    return rows


def tenant_table(summary: Mapping[str, Mapping[str, Any]], title: str = "tenants") -> Table:
    """The summary as a rich table (print it with a rich Console)."""
    table = Table(
        title=title,
        caption="weight: share of the weights; GPU %: share of the GPU time; JCT in hours",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 0, 0, 1),
    )
    for column in TENANT_COLUMNS:
        table.add_column(column, justify="left" if column in ("tenant", "peak quota") else "right", no_wrap=True)
    for row in tenant_rows(summary):
        table.add_row(*row)
    return table
