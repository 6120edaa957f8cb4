"""Plan a batch of jobs: read the inputs, allocate with a policy, run rounds, build the schedule.

`plan_batch` is what `rota plan` does, as a library call beside `next_round()`:
the CLI only parses options and prints. `build_schedule` turns an engine run
into the `rota.schedule/v1` document (planner.formats.schedule writes it).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from planner import __version__
from planner.errors import InputError
from planner.estimate.finish import engine_finishes
from planner.formats.atomic import write_together
from planner.formats.cluster import Cluster, read_cluster, require_table_rows
from planner.formats.coverage import MissingCells, missing_cells, refuse_missing
from planner.formats.files import input_records, read_text
from planner.formats.jobs import Job, read_jobs
from planner.formats.json_text import dumps_readable
from planner.formats.schedule import AllocationRecord, Round, Schedule, read_schedule, schedule_csv
from planner.formats.table import JobType, TableRow, ThroughputTable, read_table
from planner.modes.metrics import restart_metrics
from planner.modes.metrics import utilisation as utilisation_since_start
from planner.modes.round_length import RoundLengthChoice, choose_round_length
from planner.modes.tenants import refuse_barred
from planner.policies import PolicyOptions, make_cluster_policy
from planner.policies.lp import DEFAULT_METHOD
from planner.rounds.engine import DEFAULT_ROUND_S, Engine, EngineConfig, EngineResult, RoundRecord
from planner.rounds.restart import charged_restarts, planned_restarts, unknown_cost_note


@dataclass(frozen=True)
class PlanOptions:
    """Everything `rota plan` lets a user choose besides the three input files."""

    policy: str = "max_min_fairness_perf"
    round_s: float = DEFAULT_ROUND_S
    method: str = DEFAULT_METHOD
    aggregate: bool = True
    seed: int = 0
    gavel_compat: bool = False
    entity_weights: dict[str, float] | None = None
    entity_policies: dict[str, str] = field(default_factory=dict)
    rounds: int | None = None  # rounds planned and written (all, until every job finishes, if None)
    until_done: bool = False  # with `rounds`: still simulate to the end, for exact finish times
    restart_cost_s: float | None = None  # --restart-cost (None: the table's, the cluster's, else 0)
    migration_aware: bool = False
    round_auto: bool = False  # --round-length auto: `round_s` is chosen from the jobs (modes/round_length.py)
    horizon_s: float | None = None  # --horizon: `rounds` is this many seconds of rounds, once round_s is known
    strict_cells: bool = False  # --strict-cells: a job type with no row on a worker type is an error
    reuse_solves: int = 0  # --reuse-solves: LAS reuses its last solve this many times in a row at most

    def recorded(self) -> dict[str, Any]:
        """The options as the schedule file records them (restart options and reuse only when given)."""
        restart: dict[str, Any] = {}
        if self.restart_cost_s is not None:
            restart["restart_cost_s"] = self.restart_cost_s
        if self.migration_aware:
            restart["migration_aware"] = True
        if self.round_auto:
            restart["round_length"] = "auto"  # round_s is what auto chose
        if self.reuse_solves:
            restart["reuse_solves"] = self.reuse_solves
        return {
            "solver_method": self.method,
            "aggregate": self.aggregate,
            "seed": self.seed,
            "round_s": self.round_s,
            "gavel_compat": self.gavel_compat,
            "entity_weights": self.entity_weights,
            "entity_policies": self.entity_policies,
        } | restart


@dataclass
class PlanOutcome:
    schedule: Schedule
    result: EngineResult
    jobs: list[Job]
    estimated_used: int  # estimated table rows the plan could have read
    finish_estimated: set[str] = field(default_factory=set)  # jobs whose finish comes from their rate
    restart_note: str | None = None  # "restart cost unknown, assumed 0 s: ..." (None: a cost is known)
    round_choice: RoundLengthChoice | None = None  # what --round-length auto chose, and why
    missing_cells: list[MissingCells] = field(default_factory=list)  # job types with no row on some types


@dataclass(frozen=True)
class PlanInputs:
    """The inputs at a plan's three paths, already read and validated (`rota plan` reads them
    once, to look for scale factors the table lacks): `plan_batch` does not read them again."""

    table: ThroughputTable
    cluster: Cluster
    jobs: list[Job]


def plan_batch(
    table_path: str | os.PathLike,
    jobs_path: str | os.PathLike,
    cluster_path: str | os.PathLike,
    options: PlanOptions,
    on_round: Callable[[RoundRecord, int, int], None] | None = None,
    read: PlanInputs | None = None,
) -> PlanOutcome:
    """Read and validate the inputs (unless `read` holds them), then plan every job to completion."""
    if read is None:
        cluster = read_cluster(cluster_path)
        table = read_table(table_path)
        require_table_rows(cluster, table, table_path)
        jobs = read_jobs(jobs_path, table=table, cluster=cluster)
    else:
        table, cluster, jobs = read.table, read.cluster, list(read.jobs)
    refuse_barred(jobs, table, cluster, jobs_path)  # a quota of 0 everywhere the job could run
    missing = missing_cells(table, jobs, cluster)
    if options.strict_cells:
        refuse_missing(missing, table_path)
    policy = make_cluster_policy(  # refuses a policy that cannot honour the cluster's tenant quotas
        options.policy,
        cluster,
        method=options.method,
        aggregate=options.aggregate,
        seed=options.seed,
        gavel_compat=options.gavel_compat,
        entity_weights=options.entity_weights,
        entity_policies=options.entity_policies,
        reuse_solves=options.reuse_solves,
    )
    restart = charged_restarts(table, cluster, options.restart_cost_s, options.migration_aware, options.gavel_compat)
    config = EngineConfig(round_s=options.round_s)
    choice = None
    if options.round_auto:
        choice = choose_round_length(
            jobs,
            table,
            cluster,
            options.policy,
            restart,
            migration_aware=options.migration_aware,
            policy_options=PolicyOptions(
                method=options.method,
                aggregate=options.aggregate,
                seed=options.seed,
                gavel_compat=options.gavel_compat,
                entity_weights=options.entity_weights,
                entity_policies=dict(options.entity_policies),
                reuse_solves=options.reuse_solves,
            ),
            engine=config,
        )
        config = replace(config, round_s=choice.round_s)
        options = replace(options, round_s=choice.round_s)
    if options.horizon_s is not None:
        options = replace(options, rounds=max(1, math.ceil(options.horizon_s / options.round_s)))
    only_asked = options.rounds is not None and not options.until_done
    if only_asked and options.rounds is not None:
        config = replace(config, max_rounds=options.rounds)
    engine = Engine(table, cluster, policy, config, jobs, restart=restart, migration_aware=options.migration_aware)
    result = engine.run(on_round)
    estimates = estimate_finishes(engine) if only_asked else {}
    schedule = build_schedule(
        result,
        inputs={"table": table_path, "jobs": jobs_path, "cluster": cluster_path},
        policy=options.policy,
        options=options.recorded(),
        config=config,
        rounds=options.rounds,
        estimated_finish=estimates,
    )
    note = None
    if restart is None and not options.gavel_compat:
        planned = planned_restarts(r.placements for r in result.rounds)
        note = unknown_cost_note(planned) if planned.starts else None
    used = estimated_rows_used(table, jobs, cluster)
    return PlanOutcome(schedule, result, jobs, used, set(estimates), note, choice, missing)


def restart_summary(result: EngineResult) -> dict[str, Any]:
    """Restarts charged, GPU-seconds lost to them and the goodput; empty when no cost was charged."""
    tally = result.restarts
    return (
        {} if tally is None else restart_metrics(tally.starts, tally.lost_gpu_s, result.busy_gpu_s, tally.across_types)
    )


def estimate_finishes(engine: Engine) -> dict[str, float]:
    """Expected finish of each job the planned rounds did not finish (running, or yet to arrive):
    the rounds simulated on for a bounded number of job-rounds, then the policy's allocation
    re-solved as jobs finish and arrive, each job at the rate its shares give it
    (planner.estimate.finish). Jobs that can run nowhere get no estimate."""
    return engine_finishes(engine)


def estimated_rows_used(table: ThroughputTable, jobs: list[Job], cluster: Cluster) -> int:
    """Estimated rows (solo or co-located) the plan could read: worker type in the cluster,
    job type and partner job type among the job list's; an estimate clipped to 'failed' counts too."""
    types, workers = {j.job_type for j in jobs}, set(cluster.names)

    def usable(r: TableRow) -> bool:
        if r["worker_type"] not in workers or JobType(r["model"], r["batch_size"], r["scale_factor"]) not in types:
            return False
        if r["partner_model"] is None:
            return True
        return JobType(r["partner_model"], r["partner_batch_size"], r["scale_factor"]) in types

    return len([r for r in table.rows if "estimated" in (r["status"], r["source"]) and usable(r)])


def build_schedule(
    result: EngineResult,
    *,
    inputs: dict[str, str | os.PathLike],
    policy: str,
    options: dict[str, Any],
    config: EngineConfig,
    rounds: int | None = None,
    estimated_finish: dict[str, float] | None = None,
) -> Schedule:
    """The schedule document; `rounds` limits how many rounds are written (all if None).

    `estimated_finish` (job id -> seconds) fills the expected finish of jobs the planned rounds
    did not finish; those entries say `finish_estimated: true`, and the makespan is the latest
    expected finish, planned or estimated."""
    estimated = estimated_finish or {}
    first = result.solves[0] if result.solves else None
    allocation: AllocationRecord | None = None
    if first is not None:
        allocation = {
            "worker_types": result.worker_types,
            "jobs": first.job_ids,
            "x": _rounded_rows(first.allocation.x),
        }
    kept = result.rounds if rounds is None else result.rounds[:rounds]
    return Schedule(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        rota_version=__version__,
        inputs=input_records(inputs),  # type: ignore[arg-type]  # plain dicts of the InputRecord shape
        policy={"name": policy, "options": options},
        round_s=config.round_s,
        solver={
            "status": first.allocation.status if first else "no jobs",
            "solver": first.allocation.solver if first else None,
            "objective": first.allocation.objective if first else None,
            "build_s": first.allocation.build_s if first else 0.0,
            "solve_s": first.allocation.solve_s if first else 0.0,
            "n_classes": first.allocation.n_classes if first else None,
            "resolves": [
                {
                    "time_s": s.time_s,
                    "n_jobs": len(s.job_ids),
                    "status": s.allocation.status,
                    "objective": s.allocation.objective,
                    "solve_s": s.allocation.solve_s,
                }
                for s in result.solves
            ],
        },
        allocation=allocation,
        rounds=[_round_record(r) for r in kept],
        rounds_total=len(result.rounds),
        jobs={
            jid: {
                "model": o.job.job_type.model,
                "batch_size": o.job.job_type.batch_size,
                "command": o.job.command,
                "arrival_s": o.job.arrival_s,
                "total_steps": o.job.total_steps,
                "steps_done_at_start": o.job.steps_done,
                "expected_finish_s": o.finish_s if o.finish_s is not None else estimated.get(jid),
                "scale_factor": o.job.scale_factor,
                **({"finish_estimated": True} if o.finish_s is None and jid in estimated else {}),
            }
            for jid, o in result.outcomes.items()
        },
        makespan_s=max([result.makespan_s, *estimated.values()]),
        utilisation=utilisation(result, until=result.rounds[-1].end_s if estimated and result.rounds else None),
    )


def _round_record(r: RoundRecord) -> Round:
    rnd: Round = {
        "index": r.index,
        "start_s": r.start_s,
        "end_s": r.end_s,
        "assignments": [
            {
                "jobs": list(p.jobs),
                "worker_type": p.worker_type,
                "node": _nodes(p.gpus),
                "gpus": [{"node": n, "gpu": g} for n, g in p.gpus],
                "planned_steps": {jid: r.planned_steps[jid] for jid in p.jobs},
                **r.domains.get(p.jobs, {}),  # type: ignore[typeddict-item]  # switch, nvlink_domain: str
            }
            for p in r.placements
        ],
    }
    if r.unplaced:  # chosen, but no whole nodes had room: they wait this round
        rnd["unplaced"] = [u.to_json() for u in r.unplaced]
    return rnd


def _rounded_rows(x: Any) -> list[list[float]]:
    """The allocation rows rounded to 12 decimals, as `round(v, 12)` per value. Jobs of one class
    share their values, so each distinct value (bit pattern: -0.0 stays -0.0) is rounded once."""
    values = np.ascontiguousarray(x, dtype=float)
    bits, where = np.unique(values.view(np.int64), return_inverse=True)
    rounded = np.array([round(v, 12) for v in bits.view(float).tolist()], dtype=float)
    return rounded[where.reshape(values.shape)].tolist()


def _nodes(gpus: Any) -> str:
    """The node of a gang, or several joined by '+' when it straddles nodes."""
    if len(gpus) == 1:
        return gpus[0][0]
    seen: list[str] = []
    for node, _ in gpus:
        if node not in seen:
            seen.append(node)
    return "+".join(seen)


def utilisation(result: EngineResult, until: float | None = None) -> dict[str, float]:
    """Per worker type, busy GPU-seconds over GPU-seconds available until the makespan
    (or `until`: the end of the planned rounds when the plan stops before the jobs finish)."""
    present = {w: n for w, n in result.capacity.items() if n}
    if not present:
        return {w: 0.0 for w in result.worker_types}
    per_type = utilisation_since_start(result.busy_gpu_s, present, result.makespan_s if until is None else until)
    return {w: per_type.get(w, 0.0) for w in result.worker_types}


# --------------------------------------------------------------------------- writing

CSV_DIGEST_KEY = "csv_sha256"  # in a schedule JSON written with its CSV view: that CSV's digest


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def schedule_files(
    schedule: Schedule | Mapping[str, Any],
    path: str | os.PathLike,
    csv_path: str | os.PathLike | None = None,
    *,
    compact: bool = False,
) -> list[tuple[Path, str]]:
    """The (path, text) pairs of a schedule and its CSV view, in commit order: the CSV
    first, then the JSON, which records the CSV's digest (so a CSV left from another
    plan, or by a write cut between the two renames, is seen: `check_csv_pair`)."""
    data = dict(schedule.to_json() if isinstance(schedule, Schedule) else schedule)
    files: list[tuple[Path, str]] = []
    if csv_path is not None:
        csv = schedule_csv(data)
        data[CSV_DIGEST_KEY] = text_digest(csv)
        files.append((Path(csv_path), csv))
    text = json.dumps(data, separators=(",", ":")) if compact else dumps_readable(data)
    files.append((Path(path), text + "\n"))
    return files


def write_plan_outputs(
    schedule: Schedule | Mapping[str, Any], path: str | os.PathLike, csv_path: str | os.PathLike | None = None
) -> None:
    """`rota plan`'s schedule JSON and CSV view, together or not at all."""
    write_together(schedule_files(schedule, path, csv_path))


def check_csv_pair(path: str | os.PathLike, csv_path: str | os.PathLike) -> None:
    """InputError unless the CSV at `csv_path` is the view written with the schedule at `path`."""
    data = read_schedule(path)
    recorded = data.get(CSV_DIGEST_KEY)
    if recorded is None:
        raise InputError(f"records no CSV view, so {csv_path} cannot be checked against it", path=path)
    read_text(csv_path)  # missing, a folder, unreadable: one line naming it
    if hashlib.sha256(Path(csv_path).read_bytes()).hexdigest() != recorded:
        raise InputError(
            f"is not the CSV view of {path} (another plan's, or a write was cut short); plan again",
            path=csv_path,
        )
