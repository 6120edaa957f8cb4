"""Restart (preemption) cost: the seconds a job loses each time it starts on GPUs it did not hold.

On a real launcher every start of a job on new GPUs is a checkpoint save, a process
start, a model build, warm-up and a checkpoint load. The round engine charges that
time (see `Engine`); this module only says how many seconds a job of a given type
loses on a given worker type. Where the number comes from, first match wins:

1. `--restart-cost SECONDS` (the `override`): every job, every worker type;
2. the table's solo row of the job on that worker type, when all three of
   `checkpoint_save_s`, `startup_s` and `checkpoint_load_s` are filled: their sum;
3. what progress reports taught (the median overhead of the job type's restarts on that
   worker type, planner/estimate/restart_learnt.py), once enough reports exist;
4. the cluster spec's `restart_s` of that worker type;
5. 0 (nothing known: today's behaviour, no charge).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from planner.errors import InputError
from planner.formats.cluster import Cluster
from planner.formats.table import RESTART_COLUMNS, JobType, ThroughputTable
from planner.rounds.mechanism import Gpu, Placement

Held = Mapping[str, tuple[str, frozenset[Gpu]]]  # job id -> worker type and GPUs it held last round


@dataclass(frozen=True)
class RestartCosts:
    """Seconds per (re)start of a job type on a worker type; see the module docstring for the order."""

    override: float | None = None
    measured: Mapping[tuple[str, JobType], float] = field(default_factory=dict)  # from the table's columns
    per_type: Mapping[str, float] = field(default_factory=dict)  # the cluster's restart_s
    learnt: Mapping[tuple[str, JobType], float] = field(default_factory=dict)  # from progress reports

    def cost(self, worker_type: str, job_type: JobType) -> float:
        if self.override is not None:
            return self.override
        for source in (self.measured, self.learnt):
            seconds = source.get((worker_type, job_type))
            if seconds is not None:
                return seconds
        return self.per_type.get(worker_type, 0.0)

    @property
    def known(self) -> bool:
        """Whether any source gave a number (even 0): the run reports restart accounting."""
        return self.override is not None or bool(self.measured) or bool(self.per_type) or bool(self.learnt)


def restart_costs(
    table: ThroughputTable,
    cluster: Cluster,
    override: float | None = None,
    learnt: Mapping[tuple[str, JobType], float] | None = None,
) -> RestartCosts:
    """The restart costs the inputs give (the table's restart columns, the cluster's restart_s)
    and what reports taught (`learnt`)."""
    measured: dict[tuple[str, JobType], float] = {}
    for r in table.rows:
        if r["partner_model"] is not None or r["worker_type"] not in cluster.worker_types:
            continue
        parts = [r[name] for name in RESTART_COLUMNS]  # type: ignore[literal-required]
        if all(part is not None for part in parts):
            measured[(r["worker_type"], JobType(r["model"], r["batch_size"], r["scale_factor"]))] = float(sum(parts))
    per_type = {w: spec.restart_s for w, spec in cluster.worker_types.items() if spec.restart_s is not None}
    return RestartCosts(override, measured, per_type, dict(learnt or {}))


def charged_restarts(
    table: ThroughputTable,
    cluster: Cluster,
    override: float | None,
    migration_aware: bool,
    gavel_compat: bool,
    learnt: Mapping[tuple[str, JobType], float] | None = None,
) -> RestartCosts | None:
    """The restart costs a run charges; None (no charge, no restart metrics) when nothing gives any.

    Gavel's simulator charged nothing: with --gavel-compat a cost or the migration-aware mechanism
    is refused, and the table's or cluster's restart times are not read."""
    if override is not None and not (override >= 0 and math.isfinite(override)):
        raise InputError(f"must be a non-negative number of seconds, got {override}", field="--restart-cost")
    if gavel_compat:
        if migration_aware:
            raise InputError("Gavel's mechanism has no migration-aware mode", field="--migration-aware")
        if override:
            raise InputError("Gavel's simulator charges no restart cost", field="--restart-cost")
        return None
    costs = restart_costs(table, cluster, override, learnt)
    return costs if costs.known or migration_aware else None


@dataclass(frozen=True)
class PlannedRestarts:
    """(Re)starts in planned rounds: starts on GPUs a job did not hold the round before (first
    starts included, as `Engine` charges them), and those on another worker type than the one
    the job last ran on."""

    starts: int = 0
    across_types: int = 0


def held_by(placements: Iterable[Placement]) -> dict[str, tuple[str, frozenset[Gpu]]]:
    """Per job of `placements` (one round's): its worker type and GPUs."""
    return {jid: (p.worker_type, frozenset(p.gpus)) for p in placements for jid in p.jobs}


def planned_restarts(rounds: Iterable[Sequence[Placement]], held: Held | None = None) -> PlannedRestarts:
    """Count the (re)starts of consecutive rounds' placements; `held`: what ran the round before."""
    before = dict(held or {})
    last_type = {jid: worker_type for jid, (worker_type, _) in before.items()}
    starts = across = 0
    for placements in rounds:
        now = held_by(placements)
        for jid, where in now.items():
            if before.get(jid) != where:
                starts += 1
                across += jid in last_type and last_type[jid] != where[0]
            last_type[jid] = where[0]
        before = now
    return PlannedRestarts(starts, across)


def unknown_cost_note(planned: PlannedRestarts) -> str:
    """What a plan says once when nothing gave a restart cost (see `charged_restarts`)."""
    return (
        f"restart cost unknown, assumed 0 s: {planned.starts} (re)start(s) planned, "
        f"{planned.across_types} across GPU types (give --restart-cost SECONDS, the cluster's restart_s "
        "or the table's startup and checkpoint columns)"
    )
