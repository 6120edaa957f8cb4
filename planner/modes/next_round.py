"""Next-round planning: what a launcher calls at every round boundary.

One call: restore the saved state (or start from the job list), fold in the
progress the launcher reports, submit new jobs, run K rounds of the engine,
and return those rounds as a `rota.schedule/v1` document plus the new state.
With faithful progress, K calls of one round give the rounds of one K-round
plan, bit for bit (tests/test_state.py).

A job the last call planned that the report does not mention did nothing: it
is put back to its steps before those rounds, with a warning naming it (a job
that was killed or never started writes no report). The new state's `version`
is one more than the one planned from, and its `last_plan` and the schedule's
`next_round.plan_id` carry one id, so the pair can be checked.

Every report is also a throughput observation (planner/estimate/observed.py):
the state keeps each job's cell in the planned rounds and the rates reports
showed per cell; cells the table only estimates take the observed median once
they have `observed_min` reports, for the policy and the planned steps alike.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.estimate.observed import (
    DEFAULT_MIN_OBSERVATIONS,
    Decision,
    decision_table,
    observe,
    record,
    window_entries,
)
from planner.estimate.restart_learnt import describe_key, learnt_costs, overhead_stats, overheads, record_overheads
from planner.formats.cluster import Cluster
from planner.formats.files import input_records
from planner.formats.jobs import Job, parse_jobs
from planner.formats.schedule import Schedule, read_schedule
from planner.formats.state import STATE_FORMAT, LastPlan, LaunchEntry, ObservedEntry, RestartEntry, StateDocument
from planner.formats.table import JobType, ThroughputTable
from planner.modes.collector import collector_paused
from planner.modes.plan import build_schedule, check_csv_pair
from planner.modes.round_length import choose_round_length
from planner.modes.state import (
    Progress,
    apply_progress,
    changed_inputs,
    config_from_state,
    put_back_unreported,
    restore_engine,
    state_document,
    submit_new,
)
from planner.policies import REUSE_POLICIES, PolicyOptions, check_reuse, make_policy
from planner.policies.base import Policy
from planner.rounds.engine import DEFAULT_ROUND_S, Engine, EngineConfig, EngineResult, JobOutcome, RoundRecord, Solve
from planner.rounds.restart import (
    RestartCosts,
    charged_restarts,
    held_by,
    planned_restarts,
    unknown_cost_note,
)

DEFAULT_POLICY = "max_min_fairness_perf"
LEARNT_SHOWN = 3  # learnt restart costs a note names (the state and 'rota table observed --restarts' have all)


@dataclass
class NextRound:
    schedule: Schedule
    state: dict[str, Any]  # the state file's JSON (write_state writes it)
    records: list[RoundRecord]
    notes: list[str]
    done: bool  # nothing is left waiting or running
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # what the caller should see on stderr
    provenance: dict[str, int] = field(default_factory=dict)  # table cells: measured, observed, estimated
    restart_note: str | None = None  # "restart cost unknown ...": say it once (rota run: once per run)
    restarts: RestartEntry | None = None  # the state's restart books after this call


def make_policy_options(options: dict[str, Any]) -> PolicyOptions:
    """The saved policy options (method, aggregate, seed, ...); those this version does not know are ignored."""
    known = {f.name for f in dataclasses.fields(PolicyOptions)}
    return PolicyOptions(**{k: v for k, v in options.items() if k in known})


def reuse_option(name: str, options: dict[str, Any], path: object = None) -> str | None:
    """Check the saved or given `reuse_solves` (InputError, one line, naming the file) and drop it
    when `name` has no reuse (the policy changed from LAS): the note to print, if any."""
    value = options.get("reuse_solves", 0)
    if name not in REUSE_POLICIES and value:
        del options["reuse_solves"]
        return f"{name} does not reuse solves: --reuse-solves {value} dropped"
    aggregate = options.get("aggregate", True) is not False
    check_reuse(name, value, aggregate, path=path, field="policy.options.reuse_solves")
    return None


def make_policy_from(name: str, options: dict[str, Any]) -> Policy:
    """A fresh policy from its name and saved options."""
    return make_policy(name, make_policy_options(options))


def next_round(
    table: ThroughputTable,
    cluster: Cluster,
    *,
    state: StateDocument | dict[str, Any] | None = None,
    jobs: list[Job] | None = None,
    progress: Progress | None = None,
    policy: str | None = None,
    policy_options: dict[str, Any] | None = None,
    round_s: float | None = None,
    rounds: int = 1,
    inputs: dict[str, Any] | None = None,
    state_path: object = "<state>",
    progress_path: object = "<progress>",
    config: EngineConfig | None = None,
    observed_min: int | None = DEFAULT_MIN_OBSERVATIONS,
    failed: Mapping[str, str] | None = None,
    retry: Sequence[str] = (),
    launch: LaunchEntry | None = None,
    resolve: str | None = None,
    restart_cost_s: float | None = None,
    migration_aware: bool | None = None,
    round_auto: bool = False,
) -> NextRound:
    """Plan the next `rounds` rounds. `jobs` starts a fresh plan (no state) or, with a
    state, adds the jobs it does not know yet; `policy` / `round_s` None keep the state's.
    `config` is the engine configuration of a fresh plan (a state keeps its own).
    `observed_min`: reports a cell needs before its observed rate replaces an estimate
    (None: observations are still recorded, never used).

    The run loop (`rota run`) also passes: `failed`, jobs to give up on after this report
    (job id -> why; withdrawn and marked failed in the state); `retry`, failed jobs to plan
    again; `launch`, its books to keep in the state (None keeps the saved ones); `resolve`,
    why to re-solve now (e.g. the usable nodes changed).

    `restart_cost_s` (`--restart-cost`) and `migration_aware` are kept in the state; None
    keeps the state's (a fresh plan: no override, not migration-aware). The restarts the
    engine charges are tallied across calls in the state. `round_auto` (`--round-length auto`)
    chooses the round length from the jobs left and their restart costs
    (planner/modes/round_length.py); the state keeps the number chosen."""
    if rounds < 1:
        raise InputError(f"must be at least 1, got {rounds}", field="--rounds")
    with collector_paused():
        started = time.perf_counter()
        if state is None:
            decision = _decide(table, None, observed_min)
            books = _restart_books(None, restart_cost_s, migration_aware, [])
            restart = _restart_costs(books, decision.table, cluster, config or EngineConfig(), observed_min)
            session = _fresh(decision.table, cluster, jobs, policy, policy_options, round_s, config, restart, books)
            session.decision = decision
        else:
            document = state if isinstance(state, StateDocument) else StateDocument.from_json(state, state_path)
            book, learnt = _learn(document, progress, table, cluster)
            decision = _decide(table, book, observed_min)
            changes: list[str] = []
            books = _restart_books(document.restart, restart_cost_s, migration_aware, changes)
            changes += _learn_restarts(document, progress, decision.table, books, observed_min)
            restart = _restart_costs(books, decision.table, cluster, config_from_state(document.config), observed_min)
            session = _resumed(
                decision.table, cluster, document, jobs, policy, policy_options, round_s, state_path, restart, books
            )
            session.notes += changes
            session.book, session.decision = book, decision
            session.warnings += learnt
            session.warnings += changed_inputs(document.inputs, inputs, state_path)
            session.launch = document.launch
            _retry(session, document, retry, state_path)
            before = document.observed.applied if document.observed is not None else {}
            if decision.applied != before:
                session.engine.request_resolve()
                session.notes.append(
                    f"observed throughputs changed ({len(decision.applied)} cell(s) now observed): re-solving"
                )
        if round_auto:
            _choose_round_length(session, decision.table, cluster, restart)
        if launch is not None:
            session.launch = launch
        if resolve:
            session.engine.request_resolve()
            session.notes.append(f"{resolve}: re-solving")
        session.give_up = dict(failed or {})
        return _plan(session, decision.table, cluster, progress, rounds, inputs, progress_path, started)


@dataclass
class _Session:
    """One call's engine and what the state file keeps beside it."""

    engine: Engine
    policy_name: str
    options: dict[str, Any]
    cancelled: set[str]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    version: int = 0  # of the state planned from (0: none)
    last_plan: LastPlan | None = None  # what the call that wrote that state planned
    rounds_before: int = 0  # rounds the state had planned
    book: ObservedEntry = field(default_factory=ObservedEntry)  # observed rates (window: this call's)
    decision: Decision | None = None  # the table decided with, and its cells' provenance
    failed: dict[str, str] = field(default_factory=dict)  # jobs the run loop gave up on -> why
    give_up: dict[str, str] = field(default_factory=dict)  # ... and those it gives up on now
    launch: LaunchEntry | None = None  # the run loop's books, kept in the state
    restart: RestartEntry = field(default_factory=RestartEntry)  # restart options, tally, learnt overheads


def _learn(
    document: StateDocument, progress: Progress | None, table: ThroughputTable, cluster: Cluster
) -> tuple[ObservedEntry, list[str]]:
    """The state's observed rates plus what `progress` shows of the last plan's window."""
    saved = document.observed or ObservedEntry()
    if progress is None or not saved.window:
        return ObservedEntry(cells=dict(saved.cells), applied=dict(saved.applied)), []
    skip = {e.job.job_id for e in document.jobs if e.status == "cancelled"} | set(progress.cancelled)
    # A job that reports GPUs of another worker type than planned ran in another cell.
    node_type = {n: w for w, spec in cluster.worker_types.items() for n in spec.nodes}
    planned = {e.job_id: e.cell[0] for e in saved.window}
    skip |= {
        jid
        for jid, report in progress.jobs.items()
        if report.gpus and {node_type.get(n) for n, _ in report.gpus} != {planned.get(jid)}
    }
    found, warnings = observe(saved.window, progress.jobs, table, skip=skip)
    return ObservedEntry(cells=record(saved.cells, found), applied=dict(saved.applied)), warnings


def _choose_round_length(
    session: _Session, table: ThroughputTable, cluster: Cluster, restart: RestartCosts | None
) -> None:
    """--round-length auto: the length `choose_round_length` picks for the jobs not yet done."""
    engine = session.engine
    waiting = [engine.outcomes[jid].job.with_progress(engine.outcomes[jid].steps_done) for jid in engine.active]
    waiting += list(engine.pending)
    choice = choose_round_length(
        waiting,
        table,
        cluster,
        session.policy_name,
        restart,
        migration_aware=session.restart.migration_aware,
        policy_options=make_policy_options(session.options),
        engine=engine.config,
    )
    session.notes.append(choice.reason)
    if choice.round_s != engine.config.round_s:
        engine.set_round_length(choice.round_s)


def _restart_books(
    saved: RestartEntry | None, cost_s: float | None, migration_aware: bool | None, notes: list[str]
) -> RestartEntry:
    """The state's restart books with this call's options applied (None keeps the saved one);
    a change is noted."""
    books = dataclasses.replace(saved) if saved is not None else RestartEntry()
    books.lost_gpu_s, books.learnt = dict(books.lost_gpu_s), {k: list(v) for k, v in books.learnt.items()}
    if cost_s is not None and cost_s != books.cost_s:
        if saved is not None:
            notes.append(f"restart cost changed to {cost_s:g} s")
        books.cost_s = cost_s
    if migration_aware is not None and migration_aware != books.migration_aware:
        if saved is not None:
            notes.append(f"migration-aware rounds turned {'on' if migration_aware else 'off'}")
        books.migration_aware = migration_aware
    return books


def _restart_costs(
    books: RestartEntry, table: ThroughputTable, cluster: Cluster, config: EngineConfig, observed_min: int | None
) -> RestartCosts | None:
    """What the engine charges per restart (None: nothing known, nothing charged); learnt
    overheads count once `observed_min` reports exist (None: recorded, not used)."""
    learnt = {} if observed_min is None else learnt_costs(books.learnt, observed_min)
    return charged_restarts(table, cluster, books.cost_s, books.migration_aware, config.gavel_compat, learnt)


def _learn_restarts(
    document: StateDocument,
    progress: Progress | None,
    table: ThroughputTable,
    books: RestartEntry,
    observed_min: int | None,
) -> list[str]:
    """Add the restart overheads `progress` shows for the last plan's window to `books`; a note
    for each job type whose learnt cost is used from now on."""
    window = document.observed.window if document.observed is not None else []
    if progress is None or not window:
        return []
    skip = {e.job.job_id for e in document.jobs if e.status == "cancelled"} | set(progress.cancelled)
    minimum = observed_min or DEFAULT_MIN_OBSERVATIONS
    before = learnt_costs(books.learnt, minimum)
    books.learnt = record_overheads(books.learnt, overheads(window, progress.jobs, table, skip=skip))
    if observed_min is None:
        return []
    new = [
        (key, stats)
        for key, stats in overhead_stats(books.learnt).items()
        if stats.count >= minimum and (key[0], JobType(*key[1:])) not in before
    ]
    if not new:
        return []
    shown = ", ".join(f"{describe_key(key)} {stats.median:.0f} s" for key, stats in new[:LEARNT_SHOWN])
    more = f" and {len(new) - LEARNT_SHOWN} more" if len(new) > LEARNT_SHOWN else ""
    return [f"restart cost learnt from reports (median overhead), charged from now on: {shown}{more}"]


def _retry(session: _Session, document: StateDocument, retry: Sequence[str], path: object) -> None:
    """The jobs the state marks failed keep that mark; those in `retry` run again (newcomers
    with the steps they had)."""
    reasons = document.launch.failed if document.launch is not None else {}
    session.failed = {e.job.job_id: reasons.get(e.job.job_id, "failed") for e in document.jobs if e.status == "failed"}
    for jid in retry:
        if jid not in session.failed:
            known = ", ".join(sorted(session.failed)) or "none"
            raise InputError(f"job {jid!r} has not failed (failed jobs: {known})", path=path, field="--retry")
        session.engine.reopen(jid)
        session.cancelled.discard(jid)
        del session.failed[jid]
        session.notes.append(f"{jid}: retried, planned again from {session.engine.outcomes[jid].steps_done:g} steps")


def _give_up(session: _Session) -> None:
    """Withdraw the jobs the run loop gives up on now; they stay in the state, marked failed."""
    for jid, why in session.give_up.items():
        if jid not in session.engine.outcomes or jid in session.cancelled:
            continue
        session.engine.withdraw(jid, finish_s=None)
        session.cancelled.add(jid)
        session.failed[jid] = why
        session.notes.append(f"{jid}: failed ({why}); no longer planned")


def _decide(table: ThroughputTable, book: ObservedEntry | None, observed_min: int | None) -> Decision:
    # observed_min None: observations are recorded, not used (the table as given, its counts still shown)
    return decision_table(table, None if observed_min is None else book, observed_min or DEFAULT_MIN_OBSERVATIONS)


def _fresh(
    table: ThroughputTable,
    cluster: Cluster,
    jobs: list[Job] | None,
    policy: str | None,
    policy_options: dict[str, Any] | None,
    round_s: float | None,
    config: EngineConfig | None,
    restart: RestartCosts | None,
    books: RestartEntry,
) -> _Session:
    if not jobs:
        raise InputError("no state yet: give the job list to start from", field="--jobs")
    name = policy or DEFAULT_POLICY
    options = dict(policy_options or {})
    note = reuse_option(name, options)
    if config is None:
        config = EngineConfig(round_s=round_s or DEFAULT_ROUND_S)
    elif round_s is not None:
        config = dataclasses.replace(config, round_s=round_s)
    policy_object = make_policy_from(name, options)
    engine = Engine(table, cluster, policy_object, config, jobs, restart=restart, migration_aware=books.migration_aware)
    session = _Session(engine, name, options, set(), restart=books)
    session.notes += [note] if note else []
    return session


def _resumed(
    table: ThroughputTable,
    cluster: Cluster,
    document: StateDocument,
    jobs: list[Job] | None,
    policy: str | None,
    policy_options: dict[str, Any] | None,
    round_s: float | None,
    state_path: object,
    restart: RestartCosts | None,
    books: RestartEntry,
) -> _Session:
    saved_name = document.policy.name
    options = {**document.policy.options, **(policy_options or {})}
    name = policy or saved_name
    note = reuse_option(name, options, state_path)
    restored = restore_engine(
        document,
        table=table,
        cluster=cluster,
        policy=make_policy_from(name, options),
        path=state_path,
        restart=restart,
        migration_aware=books.migration_aware,
    )
    session = _Session(restored.engine, name, options, restored.cancelled, restart=books)
    session.version, session.last_plan, session.rounds_before = (
        document.version,
        document.last_plan,
        document.rounds_done,
    )
    engine = session.engine
    if name != saved_name:
        engine.request_resolve()
        session.notes.append(f"policy changed from {saved_name} to {name}: re-solving")
    session.notes += [note] if note else []
    if round_s is not None and round_s != engine.config.round_s:
        engine.set_round_length(round_s)
        session.notes.append(f"round length changed to {round_s:g} s")
    if jobs:
        session.notes += submit_new(engine, jobs, strict=False)
    return session


def _merge_progress(
    session: _Session, progress: Progress, table: ThroughputTable, cluster: Cluster, path: object
) -> list[str]:
    """The launcher's report on the last planned round, then the jobs it adds."""
    engine = session.engine
    base = engine.n_rounds
    if progress.round is not None and progress.round != base - 1:
        expected = f"round {base - 1}" if base else "no round (nothing was planned yet)"
        raise InputError(
            f"reports progress of round {progress.round}, but the last planned round is {expected}; "
            "was this progress applied already?",
            path=path,
            field="round",
        )
    notes = apply_progress(
        engine,
        progress,
        cluster=cluster,
        cancelled=session.cancelled,
        path=path,
        last_plan=session.last_plan,
        warnings=session.warnings,
    )
    if session.last_plan is not None:
        session.warnings += put_back_unreported(
            engine, progress, session.last_plan, cancelled=session.cancelled, path=path
        )
    elif session.rounds_before:
        session.warnings.append(
            f"{path}: the state does not record which jobs its last round listed (written by an older rota): "
            "jobs without a report keep their planned steps"
        )
    if progress.new_jobs:
        records = [dict(r) for r in progress.new_jobs]
        for r in records:
            if r.get("arrival_s") in (None, ""):
                r["arrival_s"] = engine.t or 0.0
        fresh = parse_jobs(records, table=table, cluster=cluster, path=path)
        notes += submit_new(engine, fresh, strict=True, path=path)
    return notes


def _steps(engine: Engine, rounds: int) -> list[RoundRecord]:
    records: list[RoundRecord] = []
    for _ in range(rounds):
        record = engine.step()
        if record is None:
            break
        records.append(record)
    return records


def _plan(
    session: _Session,
    table: ThroughputTable,
    cluster: Cluster,
    progress: Progress | None,
    rounds: int,
    inputs: dict[str, Any] | None,
    progress_path: object,
    started: float,
) -> NextRound:
    engine = session.engine
    base = engine.n_rounds
    loaded = time.perf_counter()
    if progress is None and (session.last_plan is not None or session.rounds_before):
        progress = Progress()  # no report at all: no job reported, none is credited its plan
    if progress is not None:
        session.notes += _merge_progress(session, progress, table, cluster, progress_path)
    _give_up(session)
    in_play = [jid for jid in engine.outcomes if jid in engine.active] + [j.job_id for j in engine.pending]
    at_start = {jid: engine.outcomes[jid].steps_done for jid in in_play}
    busy_before = dict(engine.busy)
    held_before = held_by(engine.mech.previous.values())  # (re)starts count from what ran last round
    merged = time.perf_counter()

    records = _steps(engine, rounds)
    stepped = time.perf_counter()
    restart_note = _tally_restarts(session, records, held_before)

    name, options = session.policy_name, session.options
    window = _Window(records, in_play, at_start, busy_before, base, engine.n_rounds)
    schedule = _schedule(engine, window, engine.last_solve, name, options, inputs or {})
    document = state_document(
        engine.snapshot(),
        policy_name=name,
        policy_options=options,
        inputs=input_records(inputs),
        cancelled=session.cancelled,
        failed=session.failed,
    )
    document.launch = session.launch
    books = session.restart
    if engine.restart is not None or books.cost_s is not None or books.migration_aware or books.learnt:
        document.restart = books
    if document.launch is not None:
        document.launch.failed = {jid: session.failed[jid] for jid in session.failed}
    document.version = session.version + 1
    document.last_plan = LastPlan(
        id=plan_id(schedule.rounds, session.version),
        from_version=session.version,
        first_round=base,
        rounds=len(records),
        jobs={jid: at_start[jid] for jid in dict.fromkeys(j for r in records for j in r.planned_steps)},
    )
    document.observed = ObservedEntry(
        window=window_entries(
            ((r.end_s - r.start_s, p.jobs, p.worker_type) for r in records for p in r.placements),
            {jid: _type_of(engine, jid) for r in records for p in r.placements for jid in p.jobs},
            {jid: sum(r.planned_steps.get(jid, 0.0) for r in records) for jid in in_play},
            at_start,
            *_window_restarts(engine, records, held_before),
        ),
        cells=session.book.cells,
        applied=session.decision.applied if session.decision is not None else {},
    )
    done = not engine.active and not engine.pending
    if schedule.next_round is not None:
        schedule.next_round["done"] = done
        schedule.next_round["state_version"] = document.version
        schedule.next_round["plan_id"] = document.last_plan.id
    new_state = document.to_json()
    finished = time.perf_counter()
    timings = {
        "restore_s": loaded - started,
        "progress_s": merged - loaded,
        "step_s": stepped - merged,
        "save_s": finished - stepped,
        "total_s": finished - started,
    }
    provenance = {} if session.decision is None else _provenance(session.decision)
    return NextRound(
        schedule,
        new_state,
        records,
        session.notes,
        done,
        timings,
        session.warnings,
        provenance,
        restart_note,
        document.restart,
    )


def _tally_restarts(
    session: _Session, records: Sequence[RoundRecord], held: Mapping[str, tuple[str, frozenset]]
) -> str | None:
    """Add this call's charged restarts to the state's books; with no cost known, the note
    that says how many restarts were planned at 0 s (None when there were none)."""
    engine, books = session.engine, session.restart
    tally = engine.restart_tally
    if tally is not None:
        books.starts += tally.starts
        for w, lost in tally.lost_gpu_s.items():
            books.lost_gpu_s[w] = books.lost_gpu_s.get(w, 0.0) + lost
        return None
    planned = planned_restarts((r.placements for r in records), held)
    return unknown_cost_note(planned) if planned.starts else None


def _window_restarts(
    engine: Engine, records: Sequence[RoundRecord], held: Mapping[str, tuple[str, frozenset]]
) -> tuple[dict[str, int], dict[str, float]]:
    """Per job: its (re)starts in the planned rounds and the seconds the engine charged them."""
    before = dict(held)
    starts: dict[str, int] = {}
    charged: dict[str, float] = {}
    for planned in records:
        now = held_by(planned.placements)
        for p in planned.placements:
            for jid in p.jobs:
                if before.get(jid) != now[jid]:
                    starts[jid] = starts.get(jid, 0) + 1
                    cost = min(engine.restart_cost(jid, p.worker_type), engine.config.round_s)
                    charged[jid] = charged.get(jid, 0.0) + cost
        before = now
    return starts, charged


def _type_of(engine: Engine, jid: str) -> tuple[str, int | None, int]:
    jt = engine.outcomes[jid].job.job_type
    return (jt.model, jt.batch_size, jt.scale_factor)


def _provenance(decision: Decision) -> dict[str, int]:
    return {"measured": decision.measured, "observed": decision.observed, "estimated": decision.estimated}


def plan_id(rounds: Sequence[Mapping[str, Any]], from_version: int) -> str:
    """The id a round file and the state written with it share: the same call planned
    again from the same state gets the same id."""
    text = json.dumps({"from_version": from_version, "rounds": rounds}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class _Window:
    """The rounds this call planned and what the jobs in play had before them."""

    records: list[RoundRecord]
    in_play: list[str]  # jobs running or waiting when the call started planning
    at_start: dict[str, float]  # their steps done then
    busy_before: dict[str, float]  # GPU-seconds per type then
    first_round: int
    rounds_done: int


def _schedule(
    engine: Engine,
    window: _Window,
    last_solve: Solve | None,
    policy: str,
    options: dict[str, Any],
    inputs: dict[str, Any],
) -> Schedule:
    """The `rota.schedule/v1` document of this call's rounds (jobs in play only)."""
    records = window.records
    outcomes = {
        jid: JobOutcome(
            engine.outcomes[jid].job.with_progress(window.at_start[jid]),
            engine.outcomes[jid].finish_s,
            engine.outcomes[jid].steps_done,
        )
        for jid in window.in_play
    }
    end = records[-1].end_s if records else (engine.t or 0.0)
    finishes = [o.finish_s for o in outcomes.values() if o.finish_s is not None]
    makespan = max(finishes) if finishes and len(finishes) == len(outcomes) else end
    busy = {w: engine.busy[w] - window.busy_before.get(w, 0.0) for w in engine.types}
    capacity = {w: engine.cluster.capacity(w) for w in engine.types}
    result = EngineResult(
        rounds=records,
        outcomes=outcomes,
        solves=[last_solve] if last_solve else [],
        busy_gpu_s=busy,
        makespan_s=makespan,
        worker_types=list(engine.types),
        capacity=capacity,
    )
    schedule = build_schedule(
        result,
        inputs=inputs,
        policy=policy,
        options={**options, "round_s": engine.config.round_s},
        config=engine.config,
    )
    span = (records[-1].end_s - records[0].start_s) if records else 0.0
    schedule.utilisation = {
        w: (busy[w] / (capacity[w] * span) if span > 0 and capacity[w] else 0.0) for w in engine.types
    }
    for jid, entry in schedule.jobs.items():
        job = engine.outcomes[jid].job
        entry["model"] = job.job_type.model
        entry["batch_size"] = job.job_type.batch_size
        entry["command"] = job.command
        entry["steps_done_after"] = engine.outcomes[jid].steps_done
    schedule.next_round = {
        "state_format": STATE_FORMAT,
        "first_round": window.first_round,
        "rounds_done": window.rounds_done,
        "time_s": engine.t,
        "active_jobs": len(engine.active),
        "waiting_jobs": len(engine.pending),
    }
    return schedule


def replayed_round(
    document: StateDocument | None,
    state_path: object,
    asked: int,
    out_path: str | os.PathLike,
    csv_path: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """The round file of the call that already planned from state version `asked`.

    A launcher that retries a call whose answer it never saw must get the round that
    call planned (the state already counts it), not the round after it and not an
    error: the round file at `out_path` is returned if it is that call's (same plan id
    as the state's `last_plan`, and its CSV view matches). Anything else is refused."""
    version = 0 if document is None else document.version
    last = None if document is None else document.last_plan
    if last is None or last.from_version != asked or version != asked + 1:
        state = "does not exist yet" if document is None else f"is at version {version}"
        raise InputError(
            f"{state}; --state-version {asked} cannot be planned from"
            + (
                " (the launcher is behind: use the latest round file's next_round.state_version)"
                if asked < version
                else ""
            ),
            path=state_path,
            field="version",
        )
    where = f"state version {asked} was planned already (plan {last.id})"
    if not Path(out_path).exists():
        raise InputError(f"{where}, but its round file {out_path} is gone; cannot return it", path=state_path)
    data = read_schedule(out_path)
    found = (data.get("next_round") or {}).get("plan_id") if isinstance(data.get("next_round"), dict) else None
    if found != last.id:
        raise InputError(
            f"is not the round file of {state_path} (plan {found!r}, the state's last plan is {last.id!r}): "
            "the pair does not match",
            path=out_path,
        )
    if csv_path is not None:
        check_csv_pair(out_path, csv_path)
    return data
