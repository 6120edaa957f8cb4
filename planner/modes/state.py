"""Planner state between rounds (`rota.state/v1`) and the progress a launcher reports.

The state holds everything the engine needs to continue exactly where it
stopped: every job (spec and steps done), which are waiting, running or gone,
the mechanism's books (allocation, received time, deficits, last round's GPUs),
the policy's own memory (FTF history, FIFO's placement and random stream) and
the engine's random stream. Floats survive JSON exactly (repr round-trips), so
restoring and stepping gives the same rounds as never stopping.

Policies keep state through an optional protocol: `get_state() -> dict` and
`set_state(dict)`. Random streams (`random.Random` attributes) are saved for
every policy; a policy without the protocol has its other private attributes
saved when they are plain data.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.formats.atomic import write_text_atomic
from planner.formats.cluster import Cluster
from planner.formats.files import read_json
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.policies.base import Allocation
from planner.rounds.engine import Engine, EngineConfig, JobOutcome, Solve
from planner.rounds.mechanism import Placement

STATE_FORMAT = "rota.state/v1"
PROGRESS_FORMAT = "rota.progress/v1"

# Engine attributes this module saves, and those it rebuilds or drops on purpose.
# tests/test_state.py fails when the engine grows an attribute in neither list.
ENGINE_SAVED = (
    "pending",
    "active",
    "outcomes",
    "busy",
    "need_update",
    "order",
    "finished",
    "t",
    "n_rounds",
    "_round_origin",
    "_shuffle",
    "mech",
)
ENGINE_REBUILT = (
    "table",
    "cluster",
    "policy",
    "config",
    "types",
    "rounds",
    "solves",
    "source",
    "_rates",
    "_runnable",
    "_scale",
    "_type_index",  # caches of table and cluster lookups
    "decision_table",
)  # simulation input (what the policy sees); next rounds use the table


# --------------------------------------------------------------------------- values


class Unencodable(TypeError):
    pass


def encode(value: Any) -> Any:
    """Plain JSON for numbers, strings, lists and str-keyed dicts; tagged objects for the rest."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, random.Random):
        return {"__random__": encode(value.getstate())}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"__items__": [[encode(k), encode(v)] for k, v in value.items()]}
    raise Unencodable(f"cannot save a {type(value).__name__}")


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__ndarray__" in value:
        return np.array(value["__ndarray__"], dtype=value.get("dtype", "float64"))
    if "__random__" in value:
        rng = random.Random()
        rng.setstate(decode(value["__random__"]))
        return rng
    if "__tuple__" in value:
        return tuple(decode(v) for v in value["__tuple__"])
    if "__items__" in value:
        return {_hashable(decode(k)): decode(v) for k, v in value["__items__"]}
    return {k: decode(v) for k, v in value.items()}


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


# --------------------------------------------------------------------------- policy


def policy_state(policy: Any) -> dict:
    out: dict[str, Any] = {}
    getter = getattr(policy, "get_state", None)
    if callable(getter):
        out["state"] = encode(getter())
    attrs = {}
    for name, value in vars(policy).items() if hasattr(policy, "__dict__") else ():
        # Random streams always (get_state rarely includes them); other private data only
        # for policies without the protocol. Unsaveable values are caches (solver models).
        if isinstance(value, random.Random) or (not callable(getter) and name.startswith("_")):
            try:
                attrs[name] = encode(value)
            except Unencodable:
                continue
    if attrs:
        out["attributes"] = attrs
    return out


def restore_policy_state(policy: Any, saved: dict) -> None:
    if "state" in saved:
        setter = getattr(policy, "set_state", None)
        if callable(setter):
            setter(decode(saved["state"]))
    for name, value in saved.get("attributes", {}).items():
        setattr(policy, name, decode(value))


# --------------------------------------------------------------------------- jobs


def job_record(job: Job) -> dict:
    jt = job.job_type
    return {
        "job_id": job.job_id,
        "model": jt.model,
        "batch_size": jt.batch_size,
        "scale_factor": jt.scale_factor,
        "total_steps": job.total_steps,
        "priority_weight": job.priority_weight,
        "arrival_s": job.arrival_s,
        "entity": job.entity,
        "slo_s": job.slo_s,
        "steps_done": job.steps_done,
        "command": getattr(job, "command", None),
    }


def job_from_record(rec: dict) -> Job:
    jt = JobType(rec["model"], rec["batch_size"], int(rec["scale_factor"]))
    kwargs = dict(
        total_steps=float(rec["total_steps"]),
        priority_weight=float(rec["priority_weight"]),
        arrival_s=float(rec["arrival_s"]),
        entity=rec.get("entity"),
        slo_s=rec.get("slo_s"),
        steps_done=float(rec.get("steps_done", 0.0)),
    )
    if "command" in {f.name for f in dataclasses.fields(Job)}:
        kwargs["command"] = rec.get("command")
    return Job(str(rec["job_id"]), jt, **kwargs)


# --------------------------------------------------------------------------- engine


def _keyed(items: Iterable[tuple[tuple, Any]]) -> list:
    return [[list(k), v.tolist() if isinstance(v, np.ndarray) else v] for k, v in items]


def save_engine(
    engine: Engine,
    *,
    policy_name: str,
    policy_options: dict,
    inputs: dict | None = None,
    last_solve: Solve | None = None,
    cancelled: Iterable[str] = (),
    rounds_done: int | None = None,
) -> dict:
    """The state document for `engine` (JSON-ready)."""
    mech = engine.mech
    pending = [j.job_id for j in engine.pending]
    active = list(engine.active)
    cancelled = set(cancelled)
    jobs = []
    for jid, out in engine.outcomes.items():
        status = (
            "active"
            if jid in engine.active
            else "pending"
            if jid in set(pending)
            else "cancelled"
            if jid in cancelled
            else "finished"
        )
        jobs.append({**job_record(out.job), "status": status, "progress": out.steps_done, "finish_s": out.finish_s})
    n_rounds = getattr(engine, "n_rounds", None)
    state = {
        "format": STATE_FORMAT,
        "worker_types": list(engine.types),
        "inputs": inputs or {},
        "policy": {"name": policy_name, "options": policy_options, "memory": policy_state(engine.policy)},
        "config": encode(dataclasses.asdict(engine.config)),
        "rounds_done": rounds_done
        if rounds_done is not None
        else (n_rounds if n_rounds is not None else len(engine.rounds)),
        "engine": {
            "t": engine.t,
            "need_update": engine.need_update,
            "order": list(engine.order),
            "finished": engine.finished,
            "busy": dict(engine.busy),
            "round_origin": getattr(engine, "_round_origin", None),
            "shuffle": encode(engine._shuffle.getstate()),
            "pending": pending,
            "active": active,
        },
        "jobs": jobs,
        "mechanism": {
            "round_s": mech.round_s,
            "last_reset": mech.last_reset,
            "worker_time": mech.worker_time.tolist(),
            "job_time": _keyed(mech.job_time.items()),
            "deficit": _keyed(mech.deficit.items()),
            "alloc": _keyed(mech.alloc.items()),
            "previous": [[list(k), p.worker_type, [[n, g] for n, g in p.gpus]] for k, p in mech.previous.items()],
        },
        "last_solve": None if last_solve is None else _solve_record(last_solve),
    }
    return state


def _solve_record(solve: Solve) -> dict:
    a = solve.allocation
    return {
        "time_s": solve.time_s,
        "job_ids": list(solve.job_ids),
        "x": np.asarray(a.x).tolist(),
        "objective": a.objective,
        "status": a.status,
        "solver": a.solver,
        "build_s": a.build_s,
        "solve_s": a.solve_s,
        "n_classes": a.n_classes,
        "pair_x": _keyed((a.pair_x or {}).items()),
    }


def _solve_from(rec: dict | None) -> Solve | None:
    if rec is None:
        return None
    pair_x = {tuple(k): np.array(v, dtype=float) for k, v in rec.get("pair_x", [])}
    x = np.array(rec["x"], dtype=float).reshape(len(rec["job_ids"]), -1)
    alloc = Allocation(
        x,
        objective=rec.get("objective"),
        status=rec.get("status", "restored"),
        solver=rec.get("solver"),
        build_s=rec.get("build_s", 0.0),
        solve_s=rec.get("solve_s", 0.0),
        n_classes=rec.get("n_classes"),
        pair_x=pair_x or None,
    )
    return Solve(rec["time_s"], list(rec["job_ids"]), alloc)


@dataclass
class Restored:
    engine: Engine
    policy_name: str
    policy_options: dict
    rounds_done: int
    last_solve: Solve | None
    cancelled: set[str]
    inputs: dict


def config_from_state(state: dict) -> EngineConfig:
    saved = decode(state.get("config", {}))
    known = {f.name for f in dataclasses.fields(EngineConfig)}
    return EngineConfig(**{k: v for k, v in saved.items() if k in known})


def restore_engine(
    state: dict,
    *,
    table: ThroughputTable,
    cluster: Cluster,
    policy: Any,
    config: EngineConfig | None = None,
    path: object = "<state>",
) -> Restored:
    """An Engine in the saved state; `policy` is a fresh object of the saved policy."""
    check_state(state, path)
    if list(state["worker_types"]) != cluster.names:
        raise InputError(
            f"the state was planned for worker types {', '.join(state['worker_types'])}; "
            f"cluster {cluster.path} has {', '.join(cluster.names)}",
            path=path,
            field="worker_types",
        )
    config = config or config_from_state(state)
    engine = Engine(table, cluster, policy, config)
    saved = state["engine"]
    by_id: dict[str, Job] = {}
    cancelled: set[str] = set()
    for row, rec in enumerate(state["jobs"], start=1):
        try:
            job = job_from_record(rec)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"malformed job entry ({exc})", path=path, row=row, field="jobs") from None
        if not any(table.has(w, job.job_type) for w in cluster.names):
            raise InputError(
                f"job {job.job_id!r}: job type {job.job_type.label!r} is not in the table {table.path}",
                path=path,
                row=row,
                field="jobs",
            )
        by_id[job.job_id] = job
        engine.outcomes[job.job_id] = JobOutcome(
            job, finish_s=rec.get("finish_s"), steps_done=float(rec.get("progress", job.steps_done))
        )
        if rec.get("status") == "cancelled":
            cancelled.add(job.job_id)
    try:
        engine.pending = [by_id[j] for j in saved["pending"]]
        engine.active = {j: by_id[j] for j in saved["active"]}
    except KeyError as exc:
        raise InputError(
            f"job {exc.args[0]!r} is listed as waiting or running but has no entry", path=path, field="engine"
        ) from None
    engine.t = saved["t"]
    engine.need_update = bool(saved["need_update"])
    engine.order = [int(j) for j in saved["order"]]
    engine.finished = int(saved["finished"])
    engine.busy = {w: float(saved["busy"].get(w, 0.0)) for w in engine.types}
    if hasattr(engine, "_round_origin") and saved.get("round_origin") is not None:
        engine._round_origin = float(saved["round_origin"])
    engine._shuffle.setstate(decode(saved["shuffle"]))
    rounds_done = int(state.get("rounds_done", 0))
    if hasattr(engine, "n_rounds"):
        engine.n_rounds = rounds_done
    _restore_mechanism(engine, state["mechanism"], cluster, path)
    restore_policy_state(policy, state["policy"].get("memory", {}))
    return Restored(
        engine,
        state["policy"]["name"],
        dict(state["policy"].get("options", {})),
        rounds_done,
        _solve_from(state.get("last_solve")),
        cancelled,
        dict(state.get("inputs", {})),
    )


def _restore_mechanism(engine: Engine, saved: dict, cluster: Cluster, path: object) -> None:
    mech = engine.mech
    m = len(engine.types)

    def vectors(name):
        out = {}
        for key, vec in saved[name]:
            if len(vec) != m:
                raise InputError(
                    f"entry {key} has {len(vec)} values for {m} worker types", path=path, field=f"mechanism.{name}"
                )
            out[tuple(key)] = np.array(vec, dtype=float)
        return out

    mech.round_s = float(saved["round_s"])
    mech.last_reset = saved["last_reset"]
    mech.worker_time = np.array(saved["worker_time"], dtype=float)
    mech.job_time = vectors("job_time")
    mech.deficit = vectors("deficit")
    mech.alloc = vectors("alloc")
    nodes = {w: set(spec.nodes) for w, spec in cluster.worker_types.items()}
    mech.previous = {}
    for key, worker_type, gpus in saved["previous"]:
        # A node that left the cluster spec only costs the lease extension.
        if worker_type in nodes and all(n in nodes[worker_type] for n, _ in gpus):
            mech.previous[tuple(key)] = Placement(tuple(key), worker_type, tuple((n, int(g)) for n, g in gpus))


_STATE_KEYS = ("format", "worker_types", "policy", "engine", "jobs", "mechanism")


def check_state(state: Any, path: object = "<state>") -> None:
    if not isinstance(state, dict):
        raise InputError("expected a JSON object", path=path)
    if state.get("format") != STATE_FORMAT:
        raise InputError(
            f"unsupported format {state.get('format')!r} (expected {STATE_FORMAT})", path=path, field="format"
        )
    for key in _STATE_KEYS:
        if key not in state:
            raise InputError("is required", path=path, field=key)
    for key in ("t", "need_update", "order", "finished", "busy", "shuffle", "pending", "active"):
        if key not in state["engine"]:
            raise InputError("is required", path=path, field=f"engine.{key}")
    for key in ("round_s", "last_reset", "worker_time", "job_time", "deficit", "alloc", "previous"):
        if key not in state["mechanism"]:
            raise InputError("is required", path=path, field=f"mechanism.{key}")


def read_state(path: str | os.PathLike) -> dict:
    path = Path(path)
    state = read_json(path)
    check_state(state, path)
    return state


def write_state(state: dict, path: str | os.PathLike) -> None:
    write_text_atomic(path, json.dumps(state, separators=(",", ":")) + "\n")


# --------------------------------------------------------------------------- progress


@dataclass
class JobProgress:
    steps_done: float | None = None
    finished: bool = False
    gpus: tuple[tuple[str, int], ...] | None = None  # what the job actually held (lease extension)


@dataclass
class Progress:
    """What the launcher saw since the last call."""

    time_s: float | None = None  # the round boundary now (default: end of the planned round)
    round: int | None = None  # the round these reports are for (checked: the last planned one)
    jobs: dict[str, JobProgress] = field(default_factory=dict)
    new_jobs: list[dict] = field(default_factory=list)  # job-list records (same columns)
    cancelled: list[str] = field(default_factory=list)


def _float(value: Any, *, path, row, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"expected a number, got {value!r}", path=path, row=row, field=name) from None
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise InputError(f"must be a non-negative finite number, got {value!r}", path=path, row=row, field=name)
    return number


def _flag(value: Any, *, path, row, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "y"):
        return True
    if text in ("", "0", "false", "no", "n"):
        return False
    raise InputError(f"expected true or false, got {value!r}", path=path, row=row, field=name)


def _job_progress(raw: Any, *, path, row) -> tuple[str, JobProgress]:
    if not isinstance(raw, dict) or not str(raw.get("job_id", "")).strip():
        raise InputError("expected an object with job_id", path=path, row=row, field="job_id")
    unknown = set(raw) - {"job_id", "steps_done", "finished", "gpus"}
    if unknown:
        raise InputError(
            "unknown key (expected job_id, steps_done, finished, gpus)", path=path, row=row, field=sorted(unknown)[0]
        )
    steps = raw.get("steps_done")
    steps = (
        None
        if steps is None or (isinstance(steps, str) and not steps.strip())
        else _float(steps, path=path, row=row, name="steps_done")
    )
    gpus = raw.get("gpus")
    if gpus is not None:
        try:
            gpus = tuple((str(g["node"]), int(g["gpu"])) for g in gpus)
        except (TypeError, KeyError, ValueError):
            raise InputError("expected a list of {node, gpu}", path=path, row=row, field="gpus") from None
    return str(raw["job_id"]).strip(), JobProgress(
        steps, _flag(raw.get("finished", False), path=path, row=row, name="finished"), gpus
    )


def progress_from_dict(data: Any, path: object = "<progress>") -> Progress:
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", path=path)
    if data.get("format", PROGRESS_FORMAT) != PROGRESS_FORMAT:
        raise InputError(
            f"unsupported format {data.get('format')!r} (expected {PROGRESS_FORMAT})", path=path, field="format"
        )
    unknown = set(data) - {"format", "round", "time_s", "jobs", "new_jobs", "cancelled"}
    if unknown:
        raise InputError(
            "unknown key (expected format, round, time_s, jobs, new_jobs, cancelled)",
            path=path,
            field=sorted(unknown)[0],
        )
    rnd = data.get("round")
    if rnd is not None and (isinstance(rnd, bool) or not isinstance(rnd, int) or rnd < 0):
        raise InputError(f"expected a round index, got {rnd!r}", path=path, field="round")
    time_s = data.get("time_s")
    time_s = None if time_s is None else _float(time_s, path=path, row=None, name="time_s")
    raw_jobs = data.get("jobs", [])
    if isinstance(raw_jobs, dict):  # {"id": {"steps_done": ..}} or {"id": steps}
        raw_jobs = [{"job_id": k, **(v if isinstance(v, dict) else {"steps_done": v})} for k, v in raw_jobs.items()]
    if not isinstance(raw_jobs, list):
        raise InputError("expected a list of job progress objects", path=path, field="jobs")
    jobs = {}
    for row, raw in enumerate(raw_jobs, start=1):
        jid, prog = _job_progress(raw, path=path, row=row)
        if jid in jobs:
            raise InputError(f"job {jid!r} reported twice", path=path, row=row, field="job_id")
        jobs[jid] = prog
    new_jobs = data.get("new_jobs", [])
    if not isinstance(new_jobs, list) or not all(isinstance(r, dict) for r in new_jobs):
        raise InputError("expected a list of job objects (job-list columns)", path=path, field="new_jobs")
    cancelled = data.get("cancelled", [])
    if not isinstance(cancelled, list):
        raise InputError("expected a list of job ids", path=path, field="cancelled")
    return Progress(time_s, rnd, jobs, list(new_jobs), [str(c) for c in cancelled])


def read_progress(path: str | os.PathLike) -> Progress:
    """A progress file (JSON, or CSV with job_id, steps_done[, finished]) or a folder of
    one JSON object per job (what each job wrote at its checkpoint)."""
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=path)
    if path.is_dir():
        jobs = {}
        for item in sorted(path.glob("*.json")):
            try:
                raw = json.loads(item.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise InputError(f"cannot parse: {exc}", path=item) from None
            if isinstance(raw, dict):
                raw.setdefault("job_id", item.stem)
            jid, prog = _job_progress(raw, path=item, row=None)
            jobs[jid] = prog
        return Progress(jobs=jobs)
    if path.suffix.lower() == ".csv":
        import pandas as pd

        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        except Exception as exc:
            raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None
        frame.columns = [str(c).strip() for c in frame.columns]
        records = [
            {k: v for k, v in rec.items() if not (k in ("finished", "gpus") and str(v).strip() == "")}
            for rec in frame.to_dict(orient="records")
        ]
        if any("gpus" in r for r in records):
            raise InputError("gpus can only be reported in JSON progress files", path=path, field="gpus")
        return progress_from_dict({"jobs": records}, path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"cannot parse: {exc}", path=path) from None
    return progress_from_dict(data, path)


# --------------------------------------------------------------------------- merging progress


def apply_progress(
    engine: Engine, progress: Progress, *, cluster: Cluster, cancelled: set[str], path: object = "<progress>"
) -> list[str]:
    """Fold what the launcher reported into the engine; returns one note per change.

    Reported steps replace the planned ones (a job that did fewer steps simply has
    more left). A job the plan expected to finish but that reports fewer steps than
    its total runs again; a job reported finished or cancelled leaves at once.
    Faithful reports (the planned steps) change nothing.
    """
    notes: list[str] = []
    if progress.time_s is not None:
        if engine.t is not None and progress.time_s < engine.t - 1e-6:
            raise InputError(
                f"time_s {progress.time_s:g} is before the end of the last planned round ({engine.t:g})",
                path=path,
                field="time_s",
            )
        if engine.t is None or progress.time_s > engine.t:
            notes.append(
                f"clock moved to {progress.time_s:g} s (plan said {engine.t:g} s)"
                if engine.t is not None
                else f"clock set to {progress.time_s:g} s"
            )
        engine.t = progress.time_s
    now = engine.t
    node_type = {n: w for w, spec in cluster.worker_types.items() for n in spec.nodes}
    waiting = {j.job_id for j in engine.pending}
    for jid, prog in progress.jobs.items():
        out = engine.outcomes.get(jid)
        if out is None:
            raise InputError(
                f"unknown job {jid!r} (new jobs go under new_jobs or into the job list)", path=path, field="job_id"
            )
        if jid in cancelled:
            continue
        total = out.job.total_steps
        done = prog.finished or (prog.steps_done is not None and prog.steps_done >= total - 1e-9)
        if prog.steps_done is not None and prog.steps_done != out.steps_done:
            notes.append(f"{jid}: {prog.steps_done:g} steps done (plan said {out.steps_done:g})")
            out.steps_done = prog.steps_done
        gone = jid not in engine.active and jid not in waiting
        if done:
            if prog.steps_done is None:
                out.steps_done = max(out.steps_done, total)
            if not gone:
                _leave(engine, jid)
                waiting.discard(jid)
                out.finish_s = now
                notes.append(f"{jid}: finished")
        elif gone:
            # The plan expected it to finish; it did not: it runs again (as a newcomer).
            out.finish_s = None
            engine.active[jid] = out.job
            engine.mech.add((jid,))
            engine.need_update = True
            engine.finished -= 1
            notes.append(f"{jid}: not finished after all, {total - out.steps_done:g} steps left")
        if prog.gpus and jid in engine.active and (jid,) in engine.mech.job_time:
            types = {node_type.get(n) for n, _ in prog.gpus}
            bad = [
                n
                for n, g in prog.gpus
                if n not in node_type or not 0 <= g < cluster.worker_types[node_type[n]].gpus_per_node
            ]
            if bad or len(types) != 1:
                raise InputError(
                    f"job {jid!r}: reported GPUs are not on one worker type of the cluster "
                    f"({', '.join(f'{n}:{g}' for n, g in prog.gpus)})",
                    path=path,
                    field="gpus",
                )
            mech = engine.mech
            for key in [k for k in mech.previous if jid in k]:
                del mech.previous[key]
            mech.previous[(jid,)] = Placement((jid,), types.pop(), tuple(prog.gpus))
    for jid in progress.cancelled:
        if jid not in engine.outcomes:
            raise InputError(f"unknown job {jid!r}", path=path, field="cancelled")
        if jid in cancelled:
            continue
        if jid in engine.active or jid in waiting:
            _leave(engine, jid)
            waiting.discard(jid)
        engine.outcomes[jid].finish_s = None
        cancelled.add(jid)
        notes.append(f"{jid}: cancelled")
    return notes


def _leave(engine: Engine, jid: str) -> None:
    if jid in engine.active:
        engine._complete(jid)  # the engine's own bookkeeping for a job that left
        return
    engine.pending = [j for j in engine.pending if j.job_id != jid]
    engine.finished += 1


def submit_new(engine: Engine, jobs: Iterable[Job], *, strict: bool, path: object = "<jobs>") -> list[str]:
    """Submit jobs the engine does not know yet. A job cannot arrive before now: earlier
    arrival times become the current boundary. `strict`: a known id is an error."""
    notes = []
    fresh = []
    now = engine.t
    for job in jobs:
        if job.job_id in engine.outcomes:
            if strict:
                raise InputError(f"job id {job.job_id!r} is already known", path=path, field="job_id")
            continue
        if now is not None and job.arrival_s < now:
            job = dataclasses.replace(job, arrival_s=now)
        fresh.append(job)
        notes.append(f"{job.job_id}: new job, arrives at {job.arrival_s:g} s")
    if fresh:
        engine.submit(fresh)
    return notes
