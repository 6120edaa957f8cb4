"""`rota run slurm`: a job Slurm starts too late to take the round's SIGTERM is not held against it.

On a busy cluster Slurm can start a job seconds before the round's SIGTERM: it dies of the signal
before its trainer sets a handler (exit 143), or its srun step starts after the signal and it is
killed at the round's end. Either end used to count as a failed round (and `--max-failures` such
rounds gave the job up)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from planner.launch.adapter import JobState
from planner.launch.failures import count_failures
from planner.launch.slurm import SlurmLauncher, started_too_late

SIGNALLED = time.mktime(time.strptime("2026-12-07T12:00:24", "%Y-%m-%dT%H:%M:%S"))
GRACE_S = 8.0


def job(job_id: str, state: str, exit_code: int | None, start: str) -> dict:
    return {
        "job_id": job_id,
        "slurm_job_id": "17",
        "state": state,
        "exit_code": exit_code,
        "slurm_state": state,
        "start_time": start,
    }


def test_a_job_started_within_the_grace_before_the_signal_is_too_late():
    assert started_too_late(job("a", "FAILED", 143, "2026-12-07T12:00:21"), JobState.FAILED, SIGNALLED, GRACE_S) == 3
    assert started_too_late(job("a", "KILLED", None, "2026-12-07T12:00:24"), JobState.KILLED, SIGNALLED, GRACE_S) == 0


def test_any_other_end_stands():
    on_time = job("a", "FAILED", 143, "2026-12-07T12:00:10")  # 14 s before the signal: it had its chance
    assert started_too_late(on_time, JobState.FAILED, SIGNALLED, GRACE_S) is None
    crashed = job("a", "FAILED", 3, "2026-12-07T12:00:22")  # its own exit status, not the signal's
    assert started_too_late(crashed, JobState.FAILED, SIGNALLED, GRACE_S) is None
    done = job("a", "COMPLETED", 0, "2026-12-07T12:00:22")
    assert started_too_late(done, JobState.COMPLETED, SIGNALLED, GRACE_S) is None
    unknown = job("a", "FAILED", 143, "Unknown")
    assert started_too_late(unknown, JobState.FAILED, SIGNALLED, GRACE_S) is None
    late = job("a", "FAILED", 143, "2026-12-07T12:00:22")
    assert started_too_late(late, JobState.FAILED, None, GRACE_S) is None  # the driver never signalled


def test_collect_reads_a_late_start_as_not_run_and_the_failure_count_is_unchanged():
    jobs = [
        job("late", "FAILED", 143, "2026-12-07T12:00:22"),
        job("late-step", "KILLED", None, "2026-12-07T12:00:20"),
        job("ignored-term", "KILLED", None, "2026-12-07T12:00:01"),
        job("crashed", "FAILED", 143, "2026-12-07T12:00:01"),
        job("fine", "COMPLETED", 0, "2026-12-07T12:00:01"),
    ]
    report = {"signalled_at": SIGNALLED, "jobs": jobs}
    handle = SimpleNamespace(
        report=lambda: report, spec={"index": 4}, started_at=SIGNALLED - 24, ended_at=SIGNALLED + 6, error=None
    )
    handle.grace_s = GRACE_S
    result = SlurmLauncher().collect(handle)  # type: ignore[arg-type]
    states = {jid: r.state for jid, r in result.jobs.items()}
    assert states == {
        "late": JobState.NOT_RUN,
        "late-step": JobState.NOT_RUN,
        "ignored-term": JobState.KILLED,
        "crashed": JobState.FAILED,
        "fine": JobState.COMPLETED,
    }
    assert "2 s before the round's SIGTERM" in result.jobs["late"].detail
    update = count_failures({"late": 2, "late-step": 2, "crashed": 0}, result.jobs, reported={"fine"}, max_failures=3)
    assert update.failures.get("late") == 2 and update.failures.get("late-step") == 2  # unchanged
    assert not {"late", "late-step"} & update.give_up.keys()
    assert set(update.faults) == {"ignored-term", "crashed"}
