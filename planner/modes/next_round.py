"""Next-round planning: what a launcher calls at every round boundary.

One call: restore the saved state (or start from the job list), fold in the
progress the launcher reports, submit new jobs, run K rounds of the engine,
and return those rounds as a `rota.schedule/v1` document plus the new state.
With faithful progress, K calls of one round give the rounds of one K-round
plan, bit for bit (tests/test_state.py).
"""

from __future__ import annotations

import dataclasses
import gc
import time
from dataclasses import dataclass, field
from typing import Any

from planner.errors import InputError
from planner.formats.cluster import Cluster
from planner.formats.jobs import Job
from planner.formats.table import ThroughputTable
from planner.modes.state import STATE_FORMAT, Progress, apply_progress, restore_engine, save_engine, submit_new
from planner.rounds.engine import Engine, EngineConfig, EngineResult, JobOutcome, RoundRecord

DEFAULT_POLICY = "max_min_fairness_perf"


@dataclass
class NextRound:
    schedule: dict
    state: dict
    records: list[RoundRecord]
    notes: list[str]
    done: bool  # nothing is left waiting or running
    timings: dict[str, float] = field(default_factory=dict)


def make_policy_from(name: str, options: dict) -> Any:
    """A fresh policy from its name and saved options (method, aggregate, seed, ...)."""
    import inspect

    from planner import policies

    options_cls = getattr(policies, "PolicyOptions", None)
    if options_cls is not None:
        known = {f.name for f in dataclasses.fields(options_cls)}
        return policies.make_policy(name, options_cls(**{k: v for k, v in options.items() if k in known}))
    accepted = inspect.signature(policies.make_policy).parameters
    return policies.make_policy(name, **{k: v for k, v in options.items() if k in accepted and k != "name"})


def next_round(
    table: ThroughputTable,
    cluster: Cluster,
    *,
    state: dict | None = None,
    jobs: list[Job] | None = None,
    progress: Progress | None = None,
    policy: str | None = None,
    policy_options: dict | None = None,
    round_s: float | None = None,
    rounds: int = 1,
    inputs: dict | None = None,
    state_path: object = "<state>",
    progress_path: object = "<progress>",
    config: EngineConfig | None = None,
) -> NextRound:
    """Plan the next `rounds` rounds. `jobs` starts a fresh plan (no state) or, with a
    state, adds the jobs it does not know yet; `policy` / `round_s` None keep the state's.
    `config` is the engine configuration of a fresh plan (a state keeps its own)."""
    if rounds < 1:
        raise InputError(f"must be at least 1, got {rounds}", field="--rounds")
    # A call builds many small objects and frees few: collector passes only cost time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _next_round(
            table,
            cluster,
            state=state,
            jobs=jobs,
            progress=progress,
            policy=policy,
            policy_options=policy_options,
            round_s=round_s,
            rounds=rounds,
            inputs=inputs,
            state_path=state_path,
            progress_path=progress_path,
            config=config,
        )
    finally:
        if collecting:
            gc.enable()


def _next_round(
    table,
    cluster,
    *,
    state,
    jobs,
    progress,
    policy,
    policy_options,
    round_s,
    rounds,
    inputs,
    state_path,
    progress_path,
    config,
) -> NextRound:
    started = time.perf_counter()
    notes: list[str] = []
    if state is None:
        if not jobs:
            raise InputError("no state yet: give the job list to start from", field="--jobs")
        name = policy or DEFAULT_POLICY
        options = dict(policy_options or {})
        if config is None:
            config = EngineConfig(round_s=round_s or 360.0)
        elif round_s is not None:
            config = dataclasses.replace(config, round_s=round_s)
        engine = Engine(table, cluster, make_policy_from(name, options), config, jobs)
        base, last_solve, cancelled = 0, None, set()
    else:
        saved_name = state.get("policy", {}).get("name", DEFAULT_POLICY)
        options = dict(state.get("policy", {}).get("options", {}))
        if policy_options:
            options.update(policy_options)
        name = policy or saved_name
        restored = restore_engine(
            state, table=table, cluster=cluster, policy=make_policy_from(name, options), path=state_path
        )
        engine = restored.engine
        if name != saved_name:
            engine.need_update = True  # the new policy starts with no memory
            notes.append(f"policy changed from {saved_name} to {name}: re-solving")
        if round_s is not None and round_s != engine.config.round_s:
            engine.config.round_s = engine.mech.round_s = round_s
            notes.append(f"round length changed to {round_s:g} s")
        base, last_solve, cancelled = restored.rounds_done, restored.last_solve, restored.cancelled
        if jobs:
            notes += submit_new(engine, jobs, strict=False)
    loaded = time.perf_counter()
    if progress is not None and progress.round is not None and progress.round != base - 1:
        expected = f"round {base - 1}" if base else "no round (nothing was planned yet)"
        raise InputError(
            f"reports progress of round {progress.round}, but the last planned round is {expected}; "
            "was this progress applied already?",
            path=progress_path,
            field="round",
        )
    if progress is not None:
        notes += apply_progress(engine, progress, cluster=cluster, cancelled=cancelled, path=progress_path)
        if progress.new_jobs:
            from planner.formats.jobs import parse_jobs

            records = [dict(r) for r in progress.new_jobs]
            for r in records:
                if r.get("arrival_s") in (None, ""):
                    r["arrival_s"] = engine.t or 0.0
            notes += submit_new(
                engine,
                parse_jobs(records, table=table, cluster=cluster, path=progress_path),
                strict=True,
                path=progress_path,
            )
    in_play = [jid for jid in engine.outcomes if jid in engine.active] + [j.job_id for j in engine.pending]
    at_start = {jid: engine.outcomes[jid].steps_done for jid in in_play}
    busy_before = dict(engine.busy)
    solves_before = len(engine.solves)
    merged = time.perf_counter()

    records: list[RoundRecord] = []
    for k in range(rounds):
        record = engine.step()
        if record is None:
            break
        if not hasattr(engine, "n_rounds"):
            record.index = base + k  # older engines number rounds from their own start
        records.append(record)
    stepped = time.perf_counter()

    if len(engine.solves) > solves_before:
        last_solve = engine.solves[-1]
    rounds_done = base + len(records)
    schedule = _schedule(
        engine, records, in_play, at_start, busy_before, last_solve, name, options, inputs or {}, base, rounds_done
    )
    new_state = save_engine(
        engine,
        policy_name=name,
        policy_options=options,
        inputs=_input_paths(inputs),
        last_solve=last_solve,
        cancelled=cancelled,
        rounds_done=rounds_done,
    )
    done = not engine.active and not engine.pending
    schedule["next_round"]["done"] = done
    finished = time.perf_counter()
    timings = {
        "restore_s": loaded - started,
        "progress_s": merged - loaded,
        "step_s": stepped - merged,
        "save_s": finished - stepped,
        "total_s": finished - started,
    }
    return NextRound(schedule, new_state, records, notes, done, timings)


def _input_paths(inputs: dict | None) -> dict:
    from planner.formats.schedule import file_digest

    out = {}
    for name, path in (inputs or {}).items():
        try:
            out[name] = {"path": str(path), "digest": file_digest(path)}
        except OSError:
            out[name] = {"path": str(path), "digest": None}
    return out


def _schedule(
    engine: Engine,
    records: list[RoundRecord],
    in_play: list[str],
    at_start: dict[str, float],
    busy_before: dict[str, float],
    last_solve,
    policy: str,
    options: dict,
    inputs: dict,
    base: int,
    rounds_done: int,
) -> dict:
    from planner.formats.schedule import build_schedule

    outcomes = {
        jid: JobOutcome(
            engine.outcomes[jid].job.with_progress(at_start[jid]),
            engine.outcomes[jid].finish_s,
            engine.outcomes[jid].steps_done,
        )
        for jid in in_play
    }
    finishes = [o.finish_s for o in outcomes.values()]
    end = records[-1].end_s if records else (engine.t or 0.0)
    makespan = max(finishes) if finishes and all(f is not None for f in finishes) else end
    busy = {w: engine.busy[w] - busy_before.get(w, 0.0) for w in engine.types}
    capacity = {w: cluster_gpus for w, cluster_gpus in ((w, engine.cluster.capacity(w)) for w in engine.types)}
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
    window = (records[-1].end_s - records[0].start_s) if records else 0.0
    schedule["utilisation"] = {
        w: (busy[w] / (capacity[w] * window) if window > 0 and capacity[w] else 0.0) for w in engine.types
    }
    for jid, entry in schedule["jobs"].items():
        job = engine.outcomes[jid].job
        entry.update(
            model=job.job_type.model,
            batch_size=job.job_type.batch_size,
            command=getattr(job, "command", None),
            steps_done_after=engine.outcomes[jid].steps_done,
        )
    schedule["next_round"] = {
        "state_format": STATE_FORMAT,
        "first_round": base,
        "rounds_done": rounds_done,
        "time_s": engine.t,
        "active_jobs": len(engine.active),
        "waiting_jobs": len(engine.pending),
    }
    return schedule
