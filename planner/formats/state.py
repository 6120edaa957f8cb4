"""The planner state file (`rota.state/v1`): what next-round planning keeps between calls.

Everything the engine needs to continue exactly where it stopped: every job
(spec, status, steps done, finish time), which are waiting or running, the
engine's clock, counters and random stream, the mechanism's books (allocation,
received time, deficits, last round's GPUs), the policy's own memory and the
last solve. Floats survive JSON exactly (repr round-trips), so restoring and
stepping gives the same rounds as never stopping.

Layout (keys in this order; `StateDocument.to_json` writes them so):
  format, worker_types, inputs, policy {name, options, memory}, config,
  rounds_done, version, last_plan, engine {t, need_update, order, finished, busy, round_origin,
  shuffle, pending, active, quota_credit (only with tenant quotas)}, jobs [...], mechanism {round_s, last_reset,
  worker_time, job_time, deficit, alloc, previous}, last_solve.
Values that JSON lacks (tuples, arrays, random streams, non-string keys) are
tagged objects (`encode` / `decode`). The policy memory is the policy's
`get_state()`: entries named like private attributes (`_rng`) are written under
`memory.attributes`, the others under `memory.state`, the layout state files
have always had; reading merges the two again.

`version` counts the calls that wrote the state (0: none yet; a state without
the key reads as 0) and `last_plan` records the last call's output: `id` (also
in the schedule it wrote, `next_round.plan_id`), `from_version` (the version it
planned from), `first_round`, `rounds` and `jobs` (job id -> steps done before
those rounds, for every job they list: a job that reports nothing is put back
there). Both are optional for readers; states written before them lack them.

`observed` (optional; older states lack it, older readers ignore it) keeps what
progress reports taught about throughputs (planner/estimate/observed.py):
`window`, the one assignment each job of the last plan had in all its rounds
(cell, seconds run, planned steps, steps before), so the next report becomes an
observation; `cells`, the latest observed rates (steps/s) per table cell; and
`applied`, the cell rates the last plan decided with (a change re-solves).
A cell is a table key: worker_type, model, batch_size, scale_factor,
partner_model, partner_batch_size.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from planner.errors import InputError
from planner.formats.atomic import write_text_atomic
from planner.formats.fields import MAX_STEPS, MAX_TIME_S, short
from planner.formats.files import read_json
from planner.formats.jobs import Job
from planner.formats.table import JobType

STATE_FORMAT = "rota.state/v1"

Key = tuple[str, ...]  # a job alone (one id) or a co-located pair (two ids)
Gpu = tuple[str, int]  # (node name, GPU index on that node)

T = TypeVar("T")

# --------------------------------------------------------------------------- tagged values


class Unencodable(TypeError):
    pass


def encode(value: Any) -> Any:
    """Plain JSON for numbers, strings, lists and str-keyed dicts; tagged objects for the rest."""
    if value is None or isinstance(value, (bool, str, int, float)):
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


# --------------------------------------------------------------------------- records


class JobStatus(StrEnum):
    PENDING = "pending"  # waiting for its arrival time
    ACTIVE = "active"  # admitted, not finished
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"  # failed --max-failures rounds in a row under `rota run`; no longer planned


@dataclass
class JobEntry:
    job: Job  # the job as submitted (job.steps_done: steps done before planning)
    status: JobStatus
    progress: float  # steps done so far
    finish_s: float | None = None


@dataclass
class PolicyEntry:
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] | None = None  # the policy's get_state(); None: it keeps nothing


@dataclass
class EngineEntry:
    t: float | None  # the clock: where the next round starts
    need_update: bool  # the job set changed since the last solve
    order: list[int]  # base worker-type visiting order
    finished: int
    busy: dict[str, float]  # GPU-seconds per worker type
    round_origin: float | None  # end of the previous round (None: the engine's default)
    shuffle: tuple[Any, ...]  # random.Random.getstate() of the per-round shuffle stream
    pending: list[str]  # job ids waiting for their arrival, in arrival order
    active: list[str]  # job ids running or runnable, in admission order
    # tenant -> worker type -> GPUs of quota credit (the cluster's tenant quotas; empty: none)
    quota_credit: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class PlacementEntry:
    jobs: Key
    worker_type: str
    gpus: tuple[Gpu, ...]


@dataclass
class MechanismEntry:
    round_s: float
    last_reset: float | None
    worker_time: np.ndarray
    job_time: dict[Key, np.ndarray]  # entry order: arrival order (the mechanism's tie-break)
    deficit: dict[Key, np.ndarray]
    alloc: dict[Key, np.ndarray]
    previous: list[PlacementEntry]


@dataclass
class LastPlan:
    """What the call that wrote a state planned: the id its schedule carries too, the
    state version it planned from, its rounds, and the steps done before them of every
    job they list (job id -> steps)."""

    id: str
    from_version: int
    first_round: int
    rounds: int
    jobs: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "from_version": self.from_version,
            "first_round": self.first_round,
            "rounds": self.rounds,
            "jobs": dict(self.jobs),
        }


CellKey = tuple[str, str, int | None, int, str | None, int | None]  # a table row's key (table.row_key)


@dataclass(frozen=True)
class WindowEntry:
    """One job's assignment in every round of the last plan that ran it (one cell)."""

    job_id: str
    cell: CellKey
    seconds: float  # planned seconds of those rounds together
    planned_steps: float  # steps the plan expected in them
    steps_before: float  # the job's steps done before them
    starts: int = 0  # (re)starts the plan made in them: each costs startup and checkpoint load
    restart_s: float = 0.0  # seconds of them the plan charged those (re)starts


@dataclass
class ObservedEntry:
    window: list[WindowEntry] = field(default_factory=list)
    cells: dict[CellKey, list[float]] = field(default_factory=dict)  # oldest first
    applied: dict[CellKey, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "window": [
                {
                    "job_id": w.job_id,
                    "cell": list(w.cell),
                    "seconds": w.seconds,
                    "planned_steps": w.planned_steps,
                    "steps_before": w.steps_before,
                    **({"starts": w.starts} if w.starts else {}),  # older states keep their bytes
                    **({"restart_s": w.restart_s} if w.restart_s else {}),
                }
                for w in self.window
            ],
            "cells": [{"cell": list(cell), "rates": list(rates)} for cell, rates in self.cells.items()],
            "applied": [{"cell": list(cell), "rate": rate} for cell, rate in self.applied.items()],
        }


@dataclass
class LaunchEntry:
    """What `rota run` keeps between rounds and between runs: each job's consecutive failed
    rounds, the jobs it gave up on (job id -> why), the nodes the launcher could not use at
    the last boundary (node -> why), and the last round it launched (a planned round that
    was never launched, because the run stopped first, is launched by the next run)."""

    launcher: str | None = None
    failures: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    unusable: dict[str, str] = field(default_factory=dict)
    launched_round: int | None = None
    launched_at: float | None = None  # time.time() of that launch

    def to_json(self) -> dict[str, Any]:
        return {
            "launched_at": self.launched_at,
            "launcher": self.launcher,
            "failures": dict(self.failures),
            "failed": dict(self.failed),
            "unusable": dict(self.unusable),
            "launched_round": self.launched_round,
        }


RestartKey = tuple[str, str, int | None, int]  # worker type, model, batch size, scale factor


@dataclass
class RestartEntry:
    """Restart accounting a next-round state keeps across calls: the options it was planned
    with (`--restart-cost`, None: the table's, the cluster's or learnt; `--migration-aware`),
    the restarts charged so far and the GPU-seconds they took per worker type, and the
    per-restart overheads learnt from progress reports (seconds, oldest first) per worker
    type and job type."""

    cost_s: float | None = None
    migration_aware: bool = False
    starts: int = 0
    lost_gpu_s: dict[str, float] = field(default_factory=dict)
    learnt: dict[RestartKey, list[float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "cost_s": self.cost_s,
            "migration_aware": self.migration_aware,
            "starts": self.starts,
            "lost_gpu_s": dict(self.lost_gpu_s),
            "learnt": [{"cell": list(key), "overheads_s": list(values)} for key, values in self.learnt.items()],
        }


@dataclass
class SolveEntry:
    time_s: float
    job_ids: list[str]
    x: np.ndarray  # (jobs, worker types)
    objective: float | None = None
    status: str = "restored"
    solver: str | None = None
    build_s: float = 0.0
    solve_s: float = 0.0
    n_classes: int | None = None
    pair_x: dict[Key, np.ndarray] = field(default_factory=dict)


# --------------------------------------------------------------------------- document


_REQUIRED = ("format", "worker_types", "policy", "engine", "jobs", "mechanism")
_ENGINE_REQUIRED = ("t", "need_update", "order", "finished", "busy", "shuffle", "pending", "active")
_MECHANISM_REQUIRED = ("round_s", "last_reset", "worker_time", "job_time", "deficit", "alloc", "previous")


@dataclass
class StateDocument:
    worker_types: list[str]
    policy: PolicyEntry
    engine: EngineEntry
    jobs: list[JobEntry]
    mechanism: MechanismEntry
    config: dict[str, Any] = field(default_factory=dict)  # the engine configuration's fields
    rounds_done: int = 0
    inputs: dict[str, Any] = field(default_factory=dict)  # name -> {path, digest} of the input files
    last_solve: SolveEntry | None = None
    version: int = 0  # calls that wrote this state
    last_plan: LastPlan | None = None  # what the call that wrote it planned
    observed: ObservedEntry | None = None  # throughputs learnt from progress reports
    launch: LaunchEntry | None = None  # the run loop's books (`rota run`)
    restart: RestartEntry | None = None  # restart options, tally and learnt overheads

    # reading -----------------------------------------------------------------
    @classmethod
    def from_json(cls, data: Any, path: object = "<state>") -> StateDocument:
        """The document in `data` (parsed JSON); InputError naming `path` and the field at fault."""
        check_state(data, path)
        reader = _Reader(path)
        worker_types = reader.get(data, "worker_types", lambda v: [str(w) for w in v])
        in_jobs = reader.at("jobs")
        jobs = [_job_entry(rec, in_jobs, row) for row, rec in enumerate(reader.items(data, "jobs"), 1)]
        engine = _engine_entry(data["engine"], reader.at("engine"))
        known = {entry.job.job_id for entry in jobs}
        missing = [jid for jid in (*engine.pending, *engine.active) if jid not in known]
        if missing:
            raise InputError(
                f"job {short(missing[0])} is listed as waiting or running but has no entry", path=path, field="engine"
            )
        m = len(worker_types)
        return cls(
            worker_types=worker_types,
            policy=_policy_entry(data["policy"], reader.at("policy")),
            engine=engine,
            jobs=jobs,
            mechanism=_mechanism_entry(data["mechanism"], m, reader.at("mechanism")),
            config=reader.get(data, "config", lambda v: dict(decode(v)), default={}),
            rounds_done=reader.get(data, "rounds_done", _count, default=0),
            version=reader.get(data, "version", _count, default=0),
            last_plan=reader.get(data, "last_plan", _last_plan, default=None),
            observed=reader.get(data, "observed", _observed, default=None),
            launch=reader.get(data, "launch", _launch, default=None),
            restart=reader.get(data, "restart", _restart, default=None),
            inputs=reader.get(data, "inputs", dict, default={}),
            last_solve=reader.get(
                data, "last_solve", lambda v: _solve_entry(v, m, reader.at("last_solve")), default=None
            ),
        )

    # writing -----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The JSON object, key for key what `from_json` reads."""
        engine, mech = self.engine, self.mechanism
        data = {
            "format": STATE_FORMAT,
            "worker_types": list(self.worker_types),
            "inputs": self.inputs,
            "policy": {"name": self.policy.name, "options": self.policy.options, "memory": _memory(self.policy.memory)},
            "config": encode(self.config),
            "rounds_done": self.rounds_done,
            "version": self.version,
            "last_plan": None if self.last_plan is None else self.last_plan.to_json(),
            "engine": {
                "t": engine.t,
                "need_update": engine.need_update,
                "order": list(engine.order),
                "finished": engine.finished,
                "busy": dict(engine.busy),
                "round_origin": engine.round_origin,
                "shuffle": encode(engine.shuffle),
                "pending": list(engine.pending),
                "active": list(engine.active),
                **({"quota_credit": engine.quota_credit} if engine.quota_credit else {}),
            },
            "jobs": [_job_record(entry) for entry in self.jobs],
            "mechanism": {
                "round_s": mech.round_s,
                "last_reset": mech.last_reset,
                "worker_time": mech.worker_time.tolist(),
                "job_time": _keyed(mech.job_time),
                "deficit": _keyed(mech.deficit),
                "alloc": _keyed(mech.alloc),
                "previous": [[list(p.jobs), p.worker_type, [[n, g] for n, g in p.gpus]] for p in mech.previous],
            },
            "last_solve": None if self.last_solve is None else _solve_record(self.last_solve),
        }
        if self.observed is not None:  # written only when there is one: older states keep their bytes
            data["observed"] = self.observed.to_json()
        if self.launch is not None:  # likewise: only states `rota run` wrote have it
            data["launch"] = self.launch.to_json()
        if self.restart is not None:  # likewise: only states planned with restart costs have it
            data["restart"] = self.restart.to_json()
        return data


def check_state(data: Any, path: object = "<state>") -> None:
    """The format tag and the required keys (a cheap check before anything is built)."""
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", path=path)
    if data.get("format") != STATE_FORMAT:
        raise InputError(
            f"unsupported format {short(data.get('format'))} (expected {STATE_FORMAT})", path=path, field="format"
        )
    for key in _REQUIRED:
        if key not in data:
            raise InputError("is required", path=path, field=key)
    for section, keys in (("engine", _ENGINE_REQUIRED), ("mechanism", _MECHANISM_REQUIRED)):
        if not isinstance(data[section], dict):
            raise InputError("expected an object", path=path, field=section)
        for key in keys:
            if key not in data[section]:
                raise InputError("is required", path=path, field=f"{section}.{key}")


def read_state(path: str | os.PathLike) -> StateDocument:
    path = Path(path)
    return StateDocument.from_json(read_json(path, "state"), path)


def write_state(state: StateDocument | Mapping[str, Any], path: str | os.PathLike) -> None:
    """Atomically, compact (large states are written at every round boundary)."""
    data = state.to_json() if isinstance(state, StateDocument) else state
    write_text_atomic(path, json.dumps(data, separators=(",", ":")) + "\n", replaces_input=True)  # updated in place


# --------------------------------------------------------------------------- lock

DEFAULT_LOCK_TIMEOUT_S = 60.0
LOCK_POLL_S = 0.1


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file beside a state file: `state.json` -> `state.json.lock`."""
    path = Path(path)
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def state_lock(
    path: str | os.PathLike,
    timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    on_wait: Callable[[Path], None] | None = None,
) -> Iterator[Path]:
    """Hold an exclusive advisory lock (flock) on the lock file beside `path` for a whole
    read-plan-write; a second caller waits up to `timeout_s` seconds (`on_wait` is told
    once), then fails with InputError naming the state. The lock file is left in place:
    removing it would let a third caller lock a new file while the second holds the old.
    The kernel releases the lock when the process ends, however it ends."""
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + timeout_s
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise InputError(
                        f"is being planned by another call (lock {lock} held); gave up after {timeout_s:g} s "
                        "(--lock-timeout)",
                        path=path,
                    ) from None
                if on_wait is not None and not told:
                    on_wait(lock)
                    told = True
                time.sleep(min(LOCK_POLL_S, left))
        yield lock
    finally:
        os.close(fd)  # releases the lock


# --------------------------------------------------------------------------- field readers


REQUIRED: Any = ...  # a field without default
Field = tuple[str, Callable[[Any], Any], Any]  # key, conversion, default


class _Invalid(Exception):
    """A value read from the file is wrong; the message says how (no value repeated)."""


class _Reader:
    """Field access that turns a wrong or missing value into InputError naming the field."""

    def __init__(self, path: object, prefix: str = "", row: int | None = None):
        self.path, self.prefix, self.row = path, prefix, row

    def at(self, section: str, row: int | None = None) -> _Reader:
        return _Reader(self.path, f"{self.prefix}{section}.", row)

    def in_row(self, row: int) -> _Reader:
        return _Reader(self.path, self.prefix, row)

    def error(self, key: str, message: str) -> InputError:
        return InputError(message, path=self.path, row=self.row, field=f"{self.prefix}{key}")

    def get(self, data: Mapping[str, Any], key: str, convert: Callable[[Any], T], default: Any = REQUIRED) -> T:
        if key not in data:
            if default is REQUIRED:
                raise self.error(key, "is required")
            return default
        value = data[key]
        try:
            return convert(value)
        except InputError:
            raise
        except _Invalid as exc:
            raise self.error(key, str(exc)) from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError, RecursionError) as exc:
            raise self.error(key, f"unexpected value {_short(value)} ({exc})") from None

    def fields(self, data: Mapping[str, Any], spec: tuple[Field, ...], row: int | None = None) -> dict[str, Any]:
        """Every field of `spec`, converted. One pass with no bookkeeping (thousands of
        jobs), and field by field only to name the one at fault (in list row `row`)."""
        try:
            return {
                key: convert(data[key]) if key in data or default is REQUIRED else default
                for key, convert, default in spec
            }
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, _Invalid):
            checked = self if row is None else self.in_row(row)
            for key, convert, default in spec:
                checked.get(data, key, convert, default)
            raise

    def items(self, data: Mapping[str, Any], key: str) -> list[Any]:
        value = data.get(key)
        if not isinstance(value, list):
            raise self.error(key, "expected a list")
        return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("expected a number")
    return value  # as written: a state written again keeps its bytes


def _optional_number(value: Any) -> float | None:
    return None if value is None else _number(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Invalid("expected a non-negative integer")
    return value


def _last_plan(value: Any) -> LastPlan | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Invalid("expected an object")
    jobs = value.get("jobs", {})
    if not isinstance(jobs, dict):
        raise _Invalid("jobs: expected an object of job id -> steps")
    plan_id = value.get("id")
    if not isinstance(plan_id, str) or not plan_id:
        raise _Invalid("id: expected a string")
    return LastPlan(
        id=plan_id,
        from_version=_count(value.get("from_version")),
        first_round=_count(value.get("first_round")),
        rounds=_count(value.get("rounds")),
        jobs={str(k): _finite_steps(v) for k, v in jobs.items()},
    )


def _observed(value: Any) -> ObservedEntry | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Invalid("expected an object")
    for key in ("window", "cells", "applied"):
        if not isinstance(value.get(key, []), list):
            raise _Invalid(f"{key}: expected a list")
    window = [
        WindowEntry(
            job_id=_text(w["job_id"]),
            cell=_cell(w["cell"]),
            seconds=_positive(w["seconds"], "window"),
            planned_steps=_finite(w["planned_steps"], "window"),
            steps_before=_finite(w["steps_before"], "window"),
            starts=_count(w.get("starts", 0)),
            restart_s=_SECONDS(w.get("restart_s", 0.0)),
        )
        for w in value.get("window", [])
    ]
    cells = {_cell(c["cell"]): [_positive(r, "cells") for r in c["rates"]] for c in value.get("cells", [])}
    applied = {_cell(a["cell"]): _positive(a["rate"], "applied") for a in value.get("applied", [])}
    return ObservedEntry(window, cells, applied)


def _launch(value: Any) -> LaunchEntry | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Invalid("expected an object")
    for key in ("failures", "failed", "unusable"):
        if not isinstance(value.get(key, {}), dict):
            raise _Invalid(f"{key}: expected an object")
    launched = value.get("launched_round")
    return LaunchEntry(
        launcher=_optional_text(value.get("launcher")),
        failures={str(k): _count(v) for k, v in value.get("failures", {}).items()},
        failed={str(k): _text(v) for k, v in value.get("failed", {}).items()},
        unusable={str(k): _text(v) for k, v in value.get("unusable", {}).items()},
        launched_round=None if launched is None else _count(launched),
        launched_at=_optional_number(value.get("launched_at")),
    )


def _restart(value: Any) -> RestartEntry | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Invalid("expected an object")
    if not isinstance(value.get("lost_gpu_s", {}), dict) or not isinstance(value.get("learnt", []), list):
        raise _Invalid("lost_gpu_s: expected an object; learnt: expected a list")
    aware = value.get("migration_aware", False)
    if not isinstance(aware, bool):
        raise _Invalid("migration_aware: expected true or false")
    learnt: dict[RestartKey, list[float]] = {}
    for entry in value.get("learnt", []):
        if not isinstance(entry, dict) or not isinstance(entry.get("overheads_s"), list):
            raise _Invalid("learnt: expected objects with a cell and a list overheads_s")
        learnt[_restart_key(entry.get("cell"))] = [_SECONDS(v) for v in entry["overheads_s"]]
    return RestartEntry(
        cost_s=_optional_seconds(value.get("cost_s")),
        migration_aware=aware,
        starts=_count(value.get("starts", 0)),
        lost_gpu_s={str(k): _SECONDS(v) for k, v in value.get("lost_gpu_s", {}).items()},
        learnt=learnt,
    )


def _restart_key(value: Any) -> RestartKey:
    if not isinstance(value, list) or len(value) != 4:
        raise _Invalid("learnt cell: expected [worker_type, model, batch_size, scale_factor]")
    worker_type, model, batch, scale, _, _ = _cell([*value, None, None])
    return worker_type, model, batch, scale


def _cell(value: Any) -> CellKey:
    if not isinstance(value, list) or len(value) != 6:
        raise _Invalid(
            "cell: expected [worker_type, model, batch_size, scale_factor, partner_model, partner_batch_size]"
        )
    worker_type, model, batch, scale, partner, partner_batch = value
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise _Invalid("cell: expected a positive integer scale factor")
    return (
        _text(worker_type),
        _text(model),
        _optional_batch(batch),
        scale,
        _optional_text(partner),
        _optional_batch(partner_batch),
    )


def _bounded(limit: float, what: str, *, positive: bool = False) -> Callable[[Any], float]:
    """A conversion: a number in [0, limit] (or (0, limit]), kept as written."""

    def convert(value: Any) -> float:
        number = _number(value)
        if not 0 <= number <= limit or (positive and number == 0):
            low = "above 0" if positive else "at least 0"
            raise _Invalid(f"expected {what} {low} and at most {limit:g}, got {short(number)}")
        return number

    return convert


_STEPS = _bounded(MAX_STEPS, "steps")
_SECONDS = _bounded(MAX_TIME_S, "seconds")
_TOTAL = _bounded(MAX_STEPS, "steps", positive=True)
_ROUND = _bounded(MAX_TIME_S, "a round length in seconds", positive=True)
_WEIGHT = _bounded(float("inf"), "a weight", positive=True)


def _optional_seconds(value: Any) -> float | None:
    return None if value is None else _SECONDS(value)


def _finite_array(value: Any) -> np.ndarray:
    array = np.array(value, dtype=float)
    if not np.isfinite(array).all():
        raise _Invalid("expected finite numbers (NaN or infinity found)")
    return array


def _finite(value: Any, where: str) -> float:
    number = _number(value)
    if not 0 <= number < float("inf"):
        raise _Invalid(f"{where}: expected a finite number, not negative")
    return number


def _positive(value: Any, where: str) -> float:
    number = _finite(value, where)
    if number <= 0:
        raise _Invalid(f"{where}: expected a positive number")
    return number


def _finite_steps(value: Any) -> float:
    steps = _number(value)
    if not 0 <= steps < float("inf"):
        raise _Invalid("jobs: expected steps that are finite and not negative")
    return steps


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _job_entry(rec: Any, reader: _Reader, row: int) -> JobEntry:
    if not isinstance(rec, dict):
        raise reader.in_row(row).error("job_id", "expected a job object")
    v = reader.fields(rec, _JOB_FIELDS, row)
    job = Job(
        v["job_id"],
        JobType(v["model"], v["batch_size"], v["scale_factor"]),
        total_steps=v["total_steps"],
        priority_weight=v["priority_weight"],
        arrival_s=v["arrival_s"],
        entity=v["entity"],
        slo_s=v["slo_s"],
        steps_done=v["steps_done"],
        command=v["command"],
    )
    progress = job.steps_done if v["progress"] is None else v["progress"]
    for key, steps in (("steps_done", job.steps_done), ("progress", progress)):
        if steps > job.total_steps * 1.01 + 1:  # the engine may end a step or a rounding past the total
            raise reader.in_row(row).error(
                key, f"{steps:g} steps, more than the job's total_steps ({job.total_steps:g}) (job {short(job.job_id)})"
            )
    return JobEntry(job, v["status"], progress, v["finish_s"])


def _job_status(value: Any) -> JobStatus:
    try:
        return JobStatus(value)
    except ValueError:
        raise _Invalid(f"expected one of {', '.join(JobStatus)}, got {_short(value)}") from None


def _optional_batch(value: Any) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise TypeError("expected an integer or null")


# key, conversion, default (REQUIRED: none). Values are kept as written where the
# engine takes them as they are, so a state read and written again keeps its bytes.
_JOB_FIELDS: tuple[Field, ...] = (
    ("job_id", str, REQUIRED),
    ("model", _text, REQUIRED),
    ("batch_size", _optional_batch, None),
    ("scale_factor", int, REQUIRED),
    ("total_steps", lambda v: float(_TOTAL(v)), REQUIRED),
    ("priority_weight", lambda v: float(_WEIGHT(v)), REQUIRED),
    ("arrival_s", lambda v: float(_SECONDS(v)), REQUIRED),
    ("entity", _optional_text, None),
    ("slo_s", _optional_seconds, None),
    ("steps_done", lambda v: float(_STEPS(v)), 0.0),
    ("command", _optional_text, None),
    ("status", _job_status, JobStatus.FINISHED),
    ("progress", lambda v: float(_STEPS(v)), None),  # None: the job's steps_done
    ("finish_s", _optional_seconds, None),
)


def _job_record(entry: JobEntry) -> dict[str, Any]:
    job, jt = entry.job, entry.job.job_type
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
        "command": job.command,
        "status": str(entry.status),
        "progress": entry.progress,
        "finish_s": entry.finish_s,
    }


def _engine_entry(data: Mapping[str, Any], reader: _Reader) -> EngineEntry:
    return EngineEntry(
        t=reader.get(data, "t", _optional_seconds),
        need_update=reader.get(data, "need_update", bool),
        order=reader.get(data, "order", lambda v: [int(j) for j in v]),
        finished=reader.get(data, "finished", _count),
        busy=reader.get(
            data, "busy", lambda v: {str(w): float(_bounded(1e30, "GPU-seconds")(s)) for w, s in v.items()}
        ),
        round_origin=reader.get(
            data, "round_origin", lambda v: None if v is None else float(_SECONDS(v)), default=None
        ),
        shuffle=reader.get(data, "shuffle", _random_state),
        pending=reader.get(data, "pending", lambda v: [str(j) for j in v]),
        active=reader.get(data, "active", lambda v: [str(j) for j in v]),
        quota_credit=reader.get(data, "quota_credit", _quota_credit, default={}),
    )


def _quota_credit(value: Any) -> dict[str, dict[str, float]]:
    """tenant -> worker type -> GPUs: finite, not negative."""
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise _Invalid("expected an object of objects (tenant -> worker type -> GPUs)")
    out = {}
    for tenant, per_type in value.items():
        out[str(tenant)] = {str(w): float(_bounded(1e9, "GPUs")(g)) for w, g in per_type.items()}
    return out


def _random_state(value: Any) -> tuple[Any, ...]:
    state = decode(value)
    random.Random().setstate(state)  # raises on anything getstate() cannot have returned
    return state


def _policy_entry(data: Any, reader: _Reader) -> PolicyEntry:
    if not isinstance(data, dict):
        raise InputError("expected an object", path=reader.path, field="policy")
    memory = reader.get(data, "memory", dict, default={})
    merged = {**decode(memory.get("state", {})), **decode(memory.get("attributes", {}))}
    return PolicyEntry(
        name=reader.get(data, "name", _text),
        options=reader.get(data, "options", dict, default={}),
        memory=merged if memory else None,
    )


def _memory(memory: dict[str, Any] | None) -> dict[str, Any]:
    if not memory:
        return {}
    public = {k: v for k, v in memory.items() if not k.startswith("_")}
    private = {k: v for k, v in memory.items() if k.startswith("_")}
    out: dict[str, Any] = {}
    if public:
        out["state"] = encode(public)
    if private:
        out["attributes"] = encode(private)
    return out


def _vectors(m: int) -> Callable[[Any], dict[Key, np.ndarray]]:
    def convert(rows: Any) -> dict[Key, np.ndarray]:
        out = {}
        for key, vec in rows:
            if len(vec) != m:
                raise _Invalid(f"entry {key} has {len(vec)} values for {m} worker types")
            out[tuple(key)] = _finite_array(vec)
        return out

    return convert


def _placements(rows: Any) -> list[PlacementEntry]:
    return [
        PlacementEntry(tuple(str(k) for k in key), str(worker_type), tuple((str(n), int(g)) for n, g in gpus))
        for key, worker_type, gpus in rows
    ]


def _mechanism_entry(data: Mapping[str, Any], m: int, reader: _Reader) -> MechanismEntry:
    return MechanismEntry(
        round_s=reader.get(data, "round_s", lambda v: float(_ROUND(v))),
        last_reset=reader.get(data, "last_reset", _optional_seconds),
        worker_time=reader.get(data, "worker_time", _finite_array),
        job_time=reader.get(data, "job_time", _vectors(m)),
        deficit=reader.get(data, "deficit", _vectors(m)),
        alloc=reader.get(data, "alloc", _vectors(m)),
        previous=reader.get(data, "previous", _placements),
    )


def _keyed(vectors: Mapping[Key, np.ndarray]) -> list[list[Any]]:
    return [[list(k), v.tolist()] for k, v in vectors.items()]


def _solve_entry(data: Any, m: int, reader: _Reader) -> SolveEntry | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError("expected an object")
    job_ids = reader.get(data, "job_ids", lambda v: [str(j) for j in v])
    return SolveEntry(
        time_s=reader.get(data, "time_s", _number),
        job_ids=job_ids,
        x=reader.get(data, "x", lambda v: np.array(v, dtype=float).reshape(len(job_ids), m)),
        objective=reader.get(data, "objective", _optional_number, default=None),
        status=reader.get(data, "status", _text, default="restored"),
        solver=reader.get(data, "solver", _optional_text, default=None),
        build_s=reader.get(data, "build_s", _number, default=0.0),
        solve_s=reader.get(data, "solve_s", _number, default=0.0),
        n_classes=reader.get(data, "n_classes", lambda v: None if v is None else int(v), default=None),
        pair_x=reader.get(data, "pair_x", _vectors(m), default={}),
    )


def _solve_record(solve: SolveEntry) -> dict[str, Any]:
    return {
        "time_s": solve.time_s,
        "job_ids": list(solve.job_ids),
        "x": solve.x.tolist(),
        "objective": solve.objective,
        "status": str(solve.status),
        "solver": solve.solver,
        "build_s": solve.build_s,
        "solve_s": solve.solve_s,
        "n_classes": solve.n_classes,
        "pair_x": _keyed(solve.pair_x),
    }
