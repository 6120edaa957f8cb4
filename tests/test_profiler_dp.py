"""Data-parallel measurement: two gloo processes on the CPU "device"."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from models.registry import get  # noqa: E402
from profiler.devices import DeviceType  # noqa: E402
from profiler.plan import JobRef, Task  # noqa: E402
from profiler.processes import run_group  # noqa: E402
from profiler.rows import Provenance, rows_for  # noqa: E402
from profiler.session import RunOptions, worker_jobs  # noqa: E402
from profiler.timing import TimingConfig  # noqa: E402


def test_two_gloo_ranks_give_one_whole_job_row(tmp_path):
    cpu = DeviceType("cpu", "cpu", (0, 1), "test cpu", core_ids=(0, 1))
    task = Task(cpu, (JobRef(get("LM"), 5),), scale_factor=2)
    options = RunOptions(
        out=tmp_path / "t.csv",
        scale="tiny",
        timing=TimingConfig(warmup_steps=2, window_s=0.05, min_windows=3, budget_s=1.0),
    )
    jobs = worker_jobs(task, options)
    assert [j.cpu_set for j in jobs] == [(0,), (1,)]  # one CPU worker (core) per rank
    results = run_group(jobs, "data_parallel", timeout_s=120)
    assert [r.status for r in results] == ["ok", "ok"], [r.message for r in results]
    # Ranks step in lockstep: rank 0 chose the windows and when to stop.
    assert results[0].n_steps == results[1].n_steps
    (row,) = rows_for(task, results, Provenance("test cpu", "host", "x"))
    assert row["scale_factor"] == 2 and row["partner_model"] == ""
    assert row["throughput"] == pytest.approx(results[0].steps_per_s + results[1].steps_per_s)
    assert row["samples_per_s"] == pytest.approx(row["throughput"] * 5)
    assert row["n_steps"] == 2 * results[0].n_steps
