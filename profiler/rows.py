"""Worker results → throughput-table rows (planner.formats.table.COLUMNS).

Conventions, matching Gavel's table so imported and measured rows mix:
* data-parallel throughput is the sum of the ranks' steps/s (Gavel sums
  per-worker rates), and `batch_size` is the per-process batch;
* a job type co-located with itself is one row holding the mean of both sides
  (Gavel halves the sum);
* a failed measurement has throughput 0 and blank statistics.
"""

from __future__ import annotations

import importlib.metadata
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from planner.formats.quality import NOISY_SPREAD, relative_spread
from profiler.devices import DeviceType
from profiler.plan import Task
from profiler.worker import WorkerResult
from profiler.workloads import is_user


@dataclass(frozen=True)
class Provenance:
    device_name: str
    host: str
    torch_version: str

    @classmethod
    def here(cls, device: DeviceType, scale: str) -> Provenance:
        name = device.device_name + (f" [{scale} scale]" if scale != "full" else "")
        return cls(name, socket.gethostname(), torch_version())


def torch_version() -> str:
    try:
        return importlib.metadata.version("torch")  # without importing torch
    except importlib.metadata.PackageNotFoundError:
        return ""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _base(task: Task, index: int, prov: Provenance) -> dict:
    job = task.jobs[index]
    partner = task.jobs[1 - index] if task.is_pair else None
    return {
        "worker_type": task.device.worker_type,
        "model": job.model,
        "batch_size": "" if job.batch_size is None else job.batch_size,
        "scale_factor": task.scale_factor,
        "partner_model": partner.model if partner else "",
        "partner_batch_size": "" if partner is None or partner.batch_size is None else partner.batch_size,
        "source": "measured",
        "device_name": prov.device_name,
        "host": prov.host,
        "torch_version": prov.torch_version,
        "measured_at": _now(),
        "notes": job.spec.description if is_user(job.spec) else "",  # which workload or command it was
    }


def _values(results: Sequence[WorkerResult]) -> dict:
    throughput = sum(r.steps_per_s for r in results)
    return {
        "throughput": throughput,
        "status": "ok",
        "samples_per_s": throughput * results[0].samples_per_step,
        # every result here is "ok", so each carries its timings
        "step_time_median_s": max(r.step_time_median_s or 0.0 for r in results),
        "step_time_iqr_s": max(r.step_time_iqr_s or 0.0 for r in results),
        "n_steps": sum(r.n_steps for r in results),
        "peak_memory_bytes": max(r.peak_memory_bytes or 0 for r in results),
    }


def _restart(result: WorkerResult) -> dict:
    """A solo run's restart cost (blank where not measured)."""
    return {
        "startup_s": _blank(result.startup_s),
        "checkpoint_save_s": _blank(result.checkpoint_save_s),
        "checkpoint_load_s": _blank(result.checkpoint_load_s),
    }


def _blank(value: float | None) -> float | str:
    return "" if value is None else value


def _failed(status: str) -> dict:
    return {
        "throughput": 0.0,
        "status": status,
        "samples_per_s": "",
        "step_time_median_s": "",
        "step_time_iqr_s": "",
        "n_steps": "",
        "peak_memory_bytes": "",
    }


def group_status(results: Sequence[WorkerResult]) -> str:
    statuses = {r.status for r in results}
    if statuses == {"ok"}:
        return "ok"
    return "oom" if "oom" in statuses else "failed"


def rows_for(task: Task, results: Sequence[WorkerResult], prov: Provenance) -> list[dict]:
    status = group_status(results)
    if status != "ok":
        return failure_rows(task, status, prov)
    return [mark_noisy(row) for row in _ok_rows(task, results, prov)]


def mark_noisy(row: dict) -> dict:
    """The row, with a note when its step times spread more than NOISY_SPREAD: the mark stays in the
    table (and `rota table validate` finds it) after the run's warning has scrolled away."""
    spread = relative_spread(row)
    if spread is None or not spread > NOISY_SPREAD:
        return row
    mark = f"noisy: step-time IQR {100 * spread:.0f} % of the median (above {100 * NOISY_SPREAD:.0f} %)"
    return {**row, "notes": "; ".join(part for part in (row.get("notes"), mark) if part)}


def _ok_rows(task: Task, results: Sequence[WorkerResult], prov: Provenance) -> list[dict]:
    if not task.is_pair:
        restart = _restart(results[0]) if task.scale_factor == 1 else {}
        return [{**_base(task, 0, prov), **_values(results), **restart}]
    a, b = results
    if len(task.row_keys()) == 1:  # same job type on both sides
        both = _values([a, b])
        both["throughput"] /= 2
        both["samples_per_s"] /= 2
        return [{**_base(task, 0, prov), **both}]
    return [{**_base(task, 0, prov), **_values([a])}, {**_base(task, 1, prov), **_values([b])}]


def failure_rows(task: Task, status: str, prov: Provenance) -> list[dict]:
    return [{**_base(task, i, prov), **_failed(status)} for i in range(len(task.row_keys()))]
