"""Next-round planning between two calls: the engine to and from its state file, and
what the launcher reports in between (progress, finished, cancelled and new jobs).

The engine takes and restores its own snapshot (`Engine.snapshot`,
`Engine.from_snapshot`); this module converts that snapshot to and from the state
document (planner/formats/state.py), checking it against the table and cluster of
this call, and folds the launcher's reports into the engine through its methods.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.formats.cluster import Cluster
from planner.formats.fields import short
from planner.formats.files import file_digest, read_json
from planner.formats.jobs import Job
from planner.formats.progress import (
    PROGRESS_FORMAT,
    JobProgress,
    Progress,
    progress_from_dict,
    read_progress,
)
from planner.formats.state import (
    STATE_FORMAT,
    EngineEntry,
    JobEntry,
    JobStatus,
    LastPlan,
    MechanismEntry,
    PlacementEntry,
    PolicyEntry,
    SolveEntry,
    StateDocument,
    Unencodable,
    check_state,
    decode,
    encode,
    write_state,
)
from planner.formats.table import ThroughputTable
from planner.policies.base import Allocation, Policy, Status
from planner.rounds.engine import Engine, EngineConfig, EngineSnapshot, JobOutcome, Solve
from planner.rounds.mechanism import Gpu, MechanismSnapshot, Placement
from planner.rounds.restart import RestartCosts

__all__ = [
    "PROGRESS_FORMAT",
    "STATE_FORMAT",
    "JobProgress",
    "Progress",
    "Restored",
    "StateDocument",
    "Unencodable",
    "apply_progress",
    "changed_inputs",
    "check_state",
    "config_from_state",
    "decode",
    "encode",
    "engine_snapshot",
    "progress_from_dict",
    "put_back_unreported",
    "read_progress",
    "read_state",
    "restore_engine",
    "save_engine",
    "state_document",
    "submit_new",
    "write_state",
]


def read_state(path: str | os.PathLike) -> dict[str, Any]:
    """The state file's JSON after the format check (next_round reads the rest, naming
    this file in its errors)."""
    path = Path(path)
    data = read_json(path, "state")
    check_state(data, path)
    return data


# --------------------------------------------------------------------------- engine -> document


def state_document(
    snapshot: EngineSnapshot,
    *,
    policy_name: str,
    policy_options: dict[str, Any],
    inputs: dict[str, Any] | None = None,
    cancelled: Iterable[str] = (),
    failed: Iterable[str] = (),
) -> StateDocument:
    """The state document of `snapshot`; `cancelled`: the jobs a launcher withdrew, `failed`:
    those the run loop gave up on (withdrawn too, marked failed)."""
    active, pending, withdrawn, gave_up = set(snapshot.active), set(snapshot.pending), set(cancelled), set(failed)

    def status(jid: str) -> JobStatus:
        if jid in active:
            return JobStatus.ACTIVE
        if jid in pending:
            return JobStatus.PENDING
        if jid in gave_up:
            return JobStatus.FAILED
        return JobStatus.CANCELLED if jid in withdrawn else JobStatus.FINISHED

    mech = snapshot.mechanism
    return StateDocument(
        worker_types=list(snapshot.worker_types),
        inputs=inputs or {},
        policy=PolicyEntry(policy_name, policy_options, snapshot.policy_state),
        config=dataclasses.asdict(snapshot.config),
        rounds_done=snapshot.rounds_done,
        engine=EngineEntry(
            t=snapshot.t,
            need_update=snapshot.need_update,
            order=list(snapshot.order),
            finished=snapshot.finished,
            busy=dict(snapshot.busy),
            round_origin=snapshot.round_origin,
            shuffle=snapshot.shuffle,
            pending=list(snapshot.pending),
            active=list(snapshot.active),
            quota_credit={tenant: dict(left) for tenant, left in snapshot.quota_credit.items()},
        ),
        jobs=[JobEntry(out.job, status(out.job.job_id), out.steps_done, out.finish_s) for out in snapshot.outcomes],
        mechanism=MechanismEntry(
            round_s=mech.round_s,
            last_reset=mech.last_reset,
            worker_time=mech.worker_time,
            job_time=mech.job_time,
            deficit=mech.deficit,
            alloc=mech.alloc,
            previous=[PlacementEntry(key, p.worker_type, p.gpus) for key, p in mech.previous.items()],
        ),
        last_solve=None if snapshot.last_solve is None else _solve_entry(snapshot.last_solve),
    )


def _solve_entry(solve: Solve) -> SolveEntry:
    a = solve.allocation
    return SolveEntry(
        time_s=solve.time_s,
        job_ids=list(solve.job_ids),
        x=a.x,
        objective=a.objective,
        status=str(a.status),
        solver=a.solver,
        build_s=a.build_s,
        solve_s=a.solve_s,
        n_classes=a.n_classes,
        pair_x={pair: row for pair, row in (a.pair_x or {}).items()},
    )


def save_engine(
    engine: Engine,
    *,
    policy_name: str,
    policy_options: dict[str, Any],
    inputs: dict[str, Any] | None = None,
    cancelled: Iterable[str] = (),
) -> dict[str, Any]:
    """The state file's JSON for `engine` (what write_state writes)."""
    snapshot = engine.snapshot()
    document = state_document(
        snapshot, policy_name=policy_name, policy_options=policy_options, inputs=inputs, cancelled=cancelled
    )
    return document.to_json()


# --------------------------------------------------------------------------- document -> engine


def config_from_state(config: dict[str, Any]) -> EngineConfig:
    """The engine configuration a state was planned with (fields this version lacks are dropped)."""
    known = {f.name for f in dataclasses.fields(EngineConfig)}
    return EngineConfig(**{k: v for k, v in config.items() if k in known})


def engine_snapshot(
    document: StateDocument, *, table: ThroughputTable, cluster: Cluster, path: object = "<state>"
) -> EngineSnapshot:
    """The engine snapshot in `document`, checked against this call's table and cluster."""
    if list(document.worker_types) != cluster.names:
        raise InputError(
            f"the state was planned for worker types {', '.join(document.worker_types)}; "
            f"cluster {cluster.path} has {', '.join(cluster.names)}",
            path=path,
            field="worker_types",
        )
    for row, entry in enumerate(document.jobs, start=1):
        job = entry.job
        if not any(table.has(w, job.job_type) for w in cluster.names):
            raise InputError(
                f"job {short(job.job_id)}: job type {short(job.job_type.label)} is not in the table {table.path}",
                path=path,
                row=row,
                field="jobs",
            )
    saved, mech = document.engine, document.mechanism
    return EngineSnapshot(
        config=config_from_state(document.config),
        worker_types=list(document.worker_types),
        outcomes=[JobOutcome(e.job, finish_s=e.finish_s, steps_done=e.progress) for e in document.jobs],
        pending=list(saved.pending),
        active=list(saved.active),
        t=saved.t,
        need_update=saved.need_update,
        order=list(saved.order),
        finished=saved.finished,
        busy=dict(saved.busy),
        round_origin=0.0 if saved.round_origin is None else saved.round_origin,
        shuffle=saved.shuffle,
        rounds_done=document.rounds_done,
        mechanism=MechanismSnapshot(
            round_s=mech.round_s,
            last_reset=mech.last_reset,
            worker_time=mech.worker_time,
            job_time=mech.job_time,
            deficit=mech.deficit,
            alloc=mech.alloc,
            previous={p.jobs: Placement(p.jobs, p.worker_type, p.gpus) for p in mech.previous},
        ),
        last_solve=None if document.last_solve is None else _solve(document.last_solve, path),
        quota_credit={tenant: dict(left) for tenant, left in saved.quota_credit.items()},
        policy_state=document.policy.memory,
    )


def _solve(entry: SolveEntry, path: object) -> Solve:
    try:
        status = Status(entry.status)
    except ValueError:
        raise InputError(
            f"unknown allocation status {short(entry.status)}", path=path, field="last_solve.status"
        ) from None
    allocation = Allocation(
        entry.x,
        objective=entry.objective,
        status=status,
        solver=entry.solver,
        build_s=entry.build_s,
        solve_s=entry.solve_s,
        n_classes=entry.n_classes,
        pair_x={(key[0], key[1]): row for key, row in entry.pair_x.items()} or None,
    )
    return Solve(entry.time_s, list(entry.job_ids), allocation)


@dataclass
class Restored:
    engine: Engine
    policy_name: str
    policy_options: dict[str, Any]
    cancelled: set[str]
    inputs: dict[str, Any]


def restore_engine(
    state: StateDocument | dict[str, Any],
    *,
    table: ThroughputTable,
    cluster: Cluster,
    policy: Policy,
    path: object = "<state>",
    restart: RestartCosts | None = None,
    migration_aware: bool = False,
) -> Restored:
    """An Engine in the saved state; `policy` is a fresh object of the saved policy (or of
    the one replacing it: it gets the saved memory for what it knows of it). `restart` and
    `migration_aware`: the restart costs it charges (see `Engine`)."""
    document = state if isinstance(state, StateDocument) else StateDocument.from_json(state, path)
    snapshot = engine_snapshot(document, table=table, cluster=cluster, path=path)
    return Restored(
        Engine.from_snapshot(snapshot, table, cluster, policy, restart=restart, migration_aware=migration_aware),
        document.policy.name,
        dict(document.policy.options),
        {e.job.job_id for e in document.jobs if e.status in (JobStatus.CANCELLED, JobStatus.FAILED)},
        dict(document.inputs),
    )


# --------------------------------------------------------------------------- merging progress


# Plausibility of a report against the plan it reports on (docs: README "Input rules"): a job may
# report up to PLAN_TOLERANCE times the steps planned for it (more if the round boundary came
# later than planned, in proportion) plus a slack of max(SLACK_STEPS, SLACK_FRACTION of its
# total); beyond that the report is refused. An unfinished job above WARN_TOLERANCE times the
# plan is a warning (a job that finished early is news, not a doubt: its note says so). Observed
# rates of estimated table cells can differ from the table several times over, hence 8x.
PLAN_TOLERANCE = 8.0
WARN_TOLERANCE = 1.5
SLACK_STEPS = 10.0
SLACK_FRACTION = 0.01


def apply_progress(
    engine: Engine,
    progress: Progress,
    *,
    cluster: Cluster,
    cancelled: set[str],
    path: object = "<progress>",
    last_plan: LastPlan | None = None,
    warnings: list[str] | None = None,
) -> list[str]:
    """Fold what the launcher reported into the engine; returns one note per change.

    Reported steps replace the planned ones (a job that did fewer steps simply has
    more left). A job the plan expected to finish but that reports fewer steps than
    its total runs again; a job reported finished or cancelled leaves at once.
    Faithful reports (the planned steps) change nothing. `cancelled` grows by the
    jobs cancelled now.

    With `last_plan` (what the call that wrote the state planned), a report far above
    the planned steps is an InputError naming the job (see PLAN_TOLERANCE), a report
    somewhat above them a warning (appended to `warnings`); steps above a job's total
    are counted as its total, with a warning.
    """
    warned = warnings if warnings is not None else []
    stretch = _time_stretch(engine, progress.time_s, last_plan)
    notes = _move_clock(engine, progress.time_s, path)
    waiting = {j.job_id for j in engine.pending}
    for jid, report in progress.jobs.items():
        if jid not in engine.outcomes:
            raise InputError(
                f"unknown job {short(jid)} (new jobs go under new_jobs or into the job list)", path=path, field="job_id"
            )
        if jid in cancelled:
            continue
        report = _plausible(engine, jid, report, last_plan, stretch, path, warned)
        notes += _fold_report(engine, jid, report, waiting)
        if report.gpus and jid in engine.active:
            engine.move_lease(jid, _reported_type(jid, report.gpus, cluster, path), report.gpus)
    for jid in progress.cancelled:
        if jid not in engine.outcomes:
            raise InputError(f"unknown job {short(jid)}", path=path, field="cancelled")
        if jid in cancelled:
            continue
        engine.withdraw(jid, finish_s=None)
        waiting.discard(jid)
        cancelled.add(jid)
        notes.append(f"{jid}: cancelled")
    return notes


def changed_inputs(saved: Any, inputs: Any, path: object = "<state>") -> list[str]:
    """One warning per input (table, cluster) whose bytes differ from the digest the state
    recorded when it was planned. A warning, not an error: a re-profiled table or a cluster
    with other nodes is a legitimate change between rounds, but the user should know the
    plan continues from a state made with other inputs."""
    warnings: list[str] = []
    if not isinstance(saved, dict) or not inputs:
        return warnings
    for name in ("table", "cluster"):
        entry, now = saved.get(name), inputs.get(name)
        recorded = entry.get("digest") if isinstance(entry, dict) else None
        if not isinstance(recorded, str) or now is None:
            continue
        try:
            current = file_digest(now)
        except (InputError, OSError):
            continue  # reading it for planning reports the problem
        if current != recorded:
            warnings.append(
                f"{path}: the {name} {now} changed since the state was planned (its sha256 differs from "
                f"inputs.{name}.digest); planning with it as it is now"
            )
    return warnings


def _time_stretch(engine: Engine, time_s: float | None, last_plan: LastPlan | None) -> float:
    """How much longer than planned the reported rounds lasted (1: as planned or shorter)."""
    if last_plan is None or time_s is None or engine.t is None or last_plan.rounds <= 0:
        return 1.0
    window = last_plan.rounds * engine.config.round_s
    if window <= 0 or time_s <= engine.t:
        return 1.0
    return (time_s - (engine.t - window)) / window


def _plausible(
    engine: Engine,
    jid: str,
    report: JobProgress,
    last_plan: LastPlan | None,
    stretch: float,
    path: object,
    warnings: list[str],
) -> JobProgress:
    """`report`, checked against the last plan and the job's total (see apply_progress)."""
    steps = report.steps_done
    if steps is None:
        return report
    out = engine.outcomes[jid]
    total = out.job.total_steps
    if last_plan is not None:
        before = last_plan.jobs.get(jid, out.steps_done)
        planned = max(0.0, out.steps_done - before)
        slack = max(SLACK_STEPS, SLACK_FRACTION * total)
        limit = before + PLAN_TOLERANCE * planned * stretch + slack
        if steps > limit:
            raise InputError(
                f"job {short(jid)} reports {steps:g} steps done, but it had {before:g} before the reported rounds and "
                f"{planned:g} more were planned (at most {limit:g} is plausible: {PLAN_TOLERANCE:g}x the plan plus "
                f"{slack:g}); a report of another job, or a counter in other units?",
                path=path,
                field="steps_done",
            )
        if not report.finished and steps < total and steps > before + WARN_TOLERANCE * planned * stretch + slack:
            warnings.append(
                f"{jid}: reports {steps - before:g} steps in the reported rounds, {planned:g} were planned "
                f"(more than {WARN_TOLERANCE:g}x); check its throughput or its report"
            )
    if steps > total:
        warnings.append(f"{jid}: reports {steps:g} steps done, more than its total {total:g}; counted as {total:g}")
        return dataclasses.replace(report, steps_done=total)
    return report


def put_back_unreported(
    engine: Engine, progress: Progress, last_plan: LastPlan, *, cancelled: set[str], path: object = "<progress>"
) -> list[str]:
    """Jobs the last call planned that `progress` does not mention made no progress: a job
    killed at the deadline, or cancelled before it started, writes no report. Each goes
    back to its steps before those rounds (one that was planned to finish runs again),
    never on to its planned steps. Returns one warning per job, then a count."""
    waiting = {j.job_id for j in engine.pending}
    missing = [
        jid for jid in last_plan.jobs if jid not in progress.jobs and jid not in cancelled and jid in engine.outcomes
    ]
    first, last = last_plan.first_round, last_plan.first_round + last_plan.rounds - 1
    rounds = f"round {first}" if first == last else f"rounds {first}-{last}"
    warnings = []
    for jid in missing:
        before = last_plan.jobs[jid]
        planned = engine.outcomes[jid].steps_done - before
        _fold_report(engine, jid, JobProgress(steps_done=before), waiting)
        warnings.append(f"{jid}: no progress report for {rounds}; counted as 0 steps, not the {planned:g} planned")
    if missing:
        where = "" if str(path).startswith("<") else f" in {path}"
        warnings.append(f"{len(missing)} job(s) of {rounds} sent no progress report{where}; counted as no progress")
    return warnings


def _move_clock(engine: Engine, time_s: float | None, path: object) -> list[str]:
    """The launcher's clock at this boundary; it may be later than planned, never earlier."""
    planned = engine.t
    if time_s is None:
        return []
    if planned is not None and time_s < planned - 1e-6:
        raise InputError(
            f"time_s {time_s:g} is before the end of the last planned round ({planned:g})", path=path, field="time_s"
        )
    notes = []
    if planned is None:
        notes.append(f"clock set to {time_s:g} s")
    elif time_s > planned:
        notes.append(f"clock moved to {time_s:g} s (plan said {planned:g} s)")
    engine.move_clock(time_s)
    return notes


def _fold_report(engine: Engine, jid: str, report: JobProgress, waiting: set[str]) -> list[str]:
    """One job's report; `waiting` (ids of jobs not yet arrived) loses a job that leaves."""
    notes = []
    out = engine.outcomes[jid]
    total = out.job.total_steps
    done = report.finished or (report.steps_done is not None and report.steps_done >= total - 1e-9)
    if report.steps_done is not None and report.steps_done != out.steps_done:
        notes.append(f"{jid}: {report.steps_done:g} steps done (plan said {out.steps_done:g})")
        engine.set_steps_done(jid, report.steps_done)
    gone = jid not in engine.active and jid not in waiting
    if done:
        if report.steps_done is None:
            engine.set_steps_done(jid, max(out.steps_done, total))
        if not gone:
            engine.withdraw(jid, finish_s=engine.t)
            waiting.discard(jid)
            notes.append(f"{jid}: finished")
    elif gone:
        # The plan expected it to finish; it did not: it runs again (as a newcomer).
        engine.reopen(jid)
        notes.append(f"{jid}: not finished after all, {total - out.steps_done:g} steps left")
    return notes


def _reported_type(jid: str, gpus: tuple[Gpu, ...], cluster: Cluster, path: object) -> str:
    """The worker type of the GPUs a job reports; they must be real GPUs of one type."""
    node_type = {n: w for w, spec in cluster.worker_types.items() for n in spec.nodes}
    types = {node_type.get(n) for n, _ in gpus}
    bad = [n for n, g in gpus if n not in node_type or not 0 <= g < cluster.worker_types[node_type[n]].gpus_per_node]
    if bad or len(types) != 1:
        raise InputError(
            f"job {short(jid)}: reported GPUs are not on one worker type of the cluster "
            f"({', '.join(f'{n}:{g}' for n, g in gpus)})",
            path=path,
            field="gpus",
        )
    return node_type[gpus[0][0]]


def submit_new(engine: Engine, jobs: Iterable[Job], *, strict: bool, path: object = "<jobs>") -> list[str]:
    """Submit jobs the engine does not know yet. A job cannot arrive before now: earlier
    arrival times become the current boundary. `strict`: a known id is an error."""
    notes = []
    fresh = []
    now = engine.t
    for job in jobs:
        if job.job_id in engine.outcomes:
            if strict:
                raise InputError(f"job id {short(job.job_id)} is already known", path=path, field="job_id")
            continue
        if now is not None and job.arrival_s < now:
            job = dataclasses.replace(job, arrival_s=now)
        fresh.append(job)
        notes.append(f"{job.job_id}: new job, arrives at {job.arrival_s:g} s")
    if fresh:
        engine.submit(fresh)
    return notes
