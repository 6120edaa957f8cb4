"""Run a plan: one task at a time, each finished measurement appended to the
table at once (atomic rewrite), so a run killed at any moment loses at most the
measurement in flight; `resume` skips tasks whose rows are already there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import InputError
from planner.formats.table import append_rows
from profiler.command import CommandJob, free_port, is_command, run_command
from profiler.coordination import HARD_STOP_FACTOR
from profiler.devices import Node
from profiler.plan import Key, Task
from profiler.processes import run_group
from profiler.rows import Provenance, failure_rows, rows_for
from profiler.timing import TimingConfig
from profiler.worker import WorkerJob
from profiler.workloads import is_user

STARTUP_ALLOWANCE_S = 300.0  # imports, build and warm-up of a large model, before timing starts


@dataclass(frozen=True)
class RunOptions:
    out: Path
    timing: TimingConfig = field(default_factory=TimingConfig)
    scale: str = "full"
    resume: bool = False
    timeout_s: float | None = None  # per task; default: allowance + 3 x budget
    restart_cost: bool = True  # solo runs: time a checkpoint save and load after the measurement
    import_from: str | None = None  # folder user workloads are imported from (default: the current one)

    def task_timeout_s(self) -> float:
        return self.timeout_s or STARTUP_ALLOWANCE_S + HARD_STOP_FACTOR * self.timing.budget_s


@dataclass(frozen=True)
class TaskOutcome:
    task: Task
    status: str  # ok | oom | failed | skipped
    rows: list[dict]
    message: str = ""
    seconds: float = 0.0


def _records(path: Path) -> list[dict]:
    if path.suffix.lower() == ".csv":
        import pandas as pd  # here, not at the top: `rota --help` and the planner commands import this module

        return pd.read_csv(path, dtype=str, keep_default_na=False).to_dict(orient="records")
    import pyarrow.parquet as pq

    return [{k: "" if v is None else v for k, v in rec.items()} for rec in pq.read_table(path).to_pylist()]


def _int_or_none(value) -> int | None:
    text = str(value).strip()
    return None if text == "" else int(float(text))


def read_statuses(path: Path) -> dict[Key, str]:
    """Row key → status for a table being written (no cross-row checks: it may be partial)."""
    if not path.exists():
        return {}
    out: dict[Key, str] = {}
    for rec in _records(path):
        key = (
            str(rec["worker_type"]).strip(),
            str(rec["model"]).strip(),
            _int_or_none(rec.get("batch_size", "")),
            _int_or_none(rec.get("scale_factor", "")) or 1,
            str(rec.get("partner_model", "")).strip() or None,
            _int_or_none(rec.get("partner_batch_size", "")),
        )
        out[key] = str(rec.get("status", "")).strip().lower() or "ok"
    return out


def worker_jobs(task: Task, options: RunOptions) -> list[WorkerJob]:
    """One WorkerJob per process. A pair shares device/worker 0 (GPU or CPU cores);
    data-parallel rank r gets device/worker r."""

    def job(ref, rank: int) -> WorkerJob:
        return WorkerJob(
            ref.spec.builder,
            ref.batch_size,
            task.device.device(rank),
            options.timing,
            options.scale,
            dict(ref.spec.options),
            task.device.cpu_set(rank),
            barrier_timeout_s=options.task_timeout_s(),
            restart_cost=options.restart_cost and task.mode == "solo",
            import_from=(options.import_from or os.getcwd()) if is_user(ref.spec) else None,
        )

    if task.is_pair:
        return [job(ref, 0) for ref in task.jobs]
    return [job(task.jobs[0], rank) for rank in range(task.scale_factor)]


def command_job(task: Task, options: RunOptions) -> CommandJob:
    """A command's ranks as worker_jobs places a workload's: rank r on device/worker r."""
    (job,) = task.jobs  # commands are never paired
    ranks = range(task.scale_factor)
    return CommandJob(
        job.spec,
        job.batch_size,
        tuple(task.device.device(r) for r in ranks),
        options.timing,
        options.scale,
        tuple(task.device.cpu_set(r) for r in ranks),
        options.task_timeout_s(),
        master_port=free_port() if task.scale_factor > 1 else 0,
        nodes=_nodes(task) if task.scale_factor > task.device.per_node else (),
    )


def _nodes(task: Task) -> tuple[Node, ...]:
    """Each rank's node, for a gang of several nodes (ranks fill a node before the next)."""
    nodes = tuple(task.device.node_of(r) for r in range(task.scale_factor))
    assert all(n is not None for n in nodes)  # fits() plans gangs beyond one node only across nodes
    return tuple(n for n in nodes if n is not None)


def _solo_status(task: Task, statuses: dict[Key, str]) -> str | None:
    """For a pair: 'oom'/'failed' if a member cannot run alone here, so the pair need not run."""
    bad = []
    for job in task.jobs:
        s = statuses.get((task.device.worker_type, job.model, job.batch_size, 1, None, None))
        if s is not None and s not in ("ok", "estimated"):
            bad.append(s)
    if not bad:
        return None
    return "oom" if "oom" in bad else "failed"


def run_task(task: Task, options: RunOptions, statuses: dict[Key, str]) -> TaskOutcome:
    prov = Provenance.here(task.device, options.scale)
    began = time.monotonic()
    if task.is_pair:
        inherited = _solo_status(task, statuses)
        if inherited:
            rows = failure_rows(task, inherited, prov)
            return TaskOutcome(task, inherited, rows, "a member cannot run alone here", 0.0)
    if is_command(task.jobs[0].spec):
        results = run_command(command_job(task, options))
    else:
        log_dir = tempfile.mkdtemp(prefix="rota-profile-")
        try:
            results = run_group(worker_jobs(task, options), task.mode, options.task_timeout_s(), log_dir)
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
    invalid = [r.message for r in results if r.status == "invalid"]
    if invalid:  # a user factory of the wrong shape: the user's error, not a measurement
        raise InputError(invalid[0], field="--workload")
    rows = rows_for(task, results, prov)
    status = rows[0]["status"]
    message = "; ".join(r.message for r in results if r.status != "ok" and r.message)
    return TaskOutcome(task, status, rows, message, time.monotonic() - began)


def run_plan(
    tasks: Sequence[Task],
    options: RunOptions,
    on_start: Callable[[Task], None] | None = None,
    on_done: Callable[[TaskOutcome], None] | None = None,
) -> list[TaskOutcome]:
    """Measure every task in order; KeyboardInterrupt propagates with the table intact."""
    statuses = read_statuses(options.out)
    outcomes = []
    for task in tasks:
        if options.resume and all(k in statuses for k in task.row_keys()):
            outcome = TaskOutcome(task, "skipped", [])
        else:
            if on_start:
                on_start(task)
            outcome = run_task(task, options, statuses)
            append_rows(options.out, outcome.rows)
            for row, key in zip(outcome.rows, task.row_keys()):
                statuses[key] = row["status"]
        outcomes.append(outcome)
        if on_done:
            on_done(outcome)
    return outcomes
