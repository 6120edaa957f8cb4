"""A job Slurm starts too late to take the round's SIGTERM is not held against it.

On a busy cluster Slurm can start a job seconds before the round's SIGTERM: it dies of the signal
before its trainer sets a handler (exit 143), or its srun step starts after the signal and it is
killed at the round's end. Either end used to count as a failed round (and `--max-failures` such
rounds gave the job up). The Slurm driver reads it NOT_RUN, with `late_start_s`; `rota run slurm`
keeps the job's failure count."""

from __future__ import annotations

import time
from types import SimpleNamespace

from planner.export.slurm_driver import Round, started_too_late
from planner.launch.adapter import JobState
from planner.launch.failures import count_failures
from planner.launch.slurm import SlurmLauncher

SIGNALLED = time.mktime(time.strptime("2026-12-07T12:00:24", "%Y-%m-%dT%H:%M:%S"))
GRACE_S = 8.0


def state(name: str, exit_code: int | None, start: str) -> dict:
    return {"state": name, "exit_code": exit_code, "signal": 0, "start_time": start}


def test_a_job_started_within_the_grace_before_the_signal_is_too_late():
    assert started_too_late(state("FAILED", 143, "2026-12-07T12:00:21"), SIGNALLED, GRACE_S) == 3
    assert started_too_late(state("KILLED", None, "2026-12-07T12:00:24"), SIGNALLED, GRACE_S) == 0


def test_any_other_end_stands():
    on_time = state("FAILED", 143, "2026-12-07T12:00:10")  # 14 s before the signal: it had its chance
    assert started_too_late(on_time, SIGNALLED, GRACE_S) is None
    crashed = state("FAILED", 3, "2026-12-07T12:00:22")  # its own exit status, not the signal's
    assert started_too_late(crashed, SIGNALLED, GRACE_S) is None
    assert started_too_late(state("COMPLETED", 0, "2026-12-07T12:00:22"), SIGNALLED, GRACE_S) is None
    assert started_too_late(state("CANCELLED", 0, "2026-12-07T12:00:22"), SIGNALLED, GRACE_S) is None
    assert started_too_late(state("FAILED", 143, "Unknown"), SIGNALLED, GRACE_S) is None
    late = state("FAILED", 143, "2026-12-07T12:00:22")
    assert started_too_late(late, None, GRACE_S) is None  # the driver never signalled


def late_round() -> Round:
    """A finished round as the driver saw it: the Slurm states are given, not asked of Slurm."""
    ends = {
        "late": state("FAILED", 143, "2026-12-07T12:00:22"),
        "late-step": state("CANCELLED", 0, "2026-12-07T12:00:20"),  # killed by the driver at the end
        "ignored-term": state("CANCELLED", 0, "2026-12-07T12:00:01"),
        "crashed": state("FAILED", 143, "2026-12-07T12:00:01"),
        "fine": state("COMPLETED", 0, "2026-12-07T12:00:01"),
    }
    rnd = Round({"dir": "round-0004", "index": 4, "scripts": []}, round_s=32.0, grace_s=GRACE_S)
    for n, (jid, end) in enumerate(ends.items()):
        slurm_id = str(20 + n)
        rnd.submitted.append(({"jobs": [jid], "script": f"round-0004/{jid}.sbatch"}, slurm_id))
        rnd.states[slurm_id] = end
    rnd.killed.update({"21", "22"})
    rnd.started_at, rnd.signalled_at, rnd.ended_at = SIGNALLED - 24, SIGNALLED, SIGNALLED + 8
    return rnd


def test_the_driver_reports_a_late_start_as_not_run():
    jobs = {j["job_id"]: j for j in late_round().report()["jobs"]}
    assert {jid: j["state"] for jid, j in jobs.items()} == {
        "late": "NOT_RUN",
        "late-step": "NOT_RUN",
        "ignored-term": "KILLED",
        "crashed": "FAILED",
        "fine": "COMPLETED",
    }
    assert jobs["late"]["late_start_s"] == 2 and jobs["late-step"]["late_start_s"] == 4
    assert jobs["late"]["slurm_state"] == "FAILED" and jobs["late"]["exit_code"] == 143  # Slurm's own, kept
    assert all(jobs[j]["late_start_s"] is None for j in ("ignored-term", "crashed", "fine"))


def test_rota_run_keeps_the_failure_count_of_a_late_start():
    rnd = late_round()
    handle = SimpleNamespace(
        report=rnd.report, spec=rnd.spec, started_at=rnd.started_at, ended_at=rnd.ended_at, error=None
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
