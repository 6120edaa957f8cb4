"""The failure policy of `rota run` (pure): which job-rounds count as failed, and when to give up.

A job fails its round when it exits non-zero, is killed at the round's end (it outlived its
grace: it ignored SIGTERM or took too long to checkpoint), or ends without a fresh progress
report. A round it never got to run (not placed, its node lost, cancelled by someone else, or
started by Slurm too late to take the round's SIGTERM: the adapter reports NOT_RUN) is not its
fault and changes nothing. After `max_failures` failed rounds in a row the job is given
up on: marked failed in the state and no longer planned (`rota run --retry JOB` puts it back).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from planner.launch.adapter import FAULTS, JobResult, JobState

DEFAULT_MAX_FAILURES = 3


def round_fault(result: JobResult | None, reported: bool) -> str | None:
    """Why this job's round counts as failed, or None. `result` None: the launcher does not
    know (a run that died mid-round): only a missing report could say, and it is not held
    against the job then."""
    if result is None:
        return None
    if result.state in FAULTS:
        if result.state == JobState.KILLED:
            return "still running at the round's end (killed; did it ignore SIGTERM?)"
        code = "" if result.exit_code is None else f" {result.exit_code}"
        return f"exited with status{code}"
    if result.state != JobState.COMPLETED:
        return None
    return None if reported else "ended without a progress report"


@dataclass(frozen=True)
class FailureUpdate:
    failures: dict[str, int]  # consecutive failed rounds per job (jobs at 0 are left out)
    faults: dict[str, str]  # this round's failed jobs -> why
    give_up: dict[str, str]  # jobs that reached the limit now -> why


def count_failures(
    previous: Mapping[str, int],
    results: Mapping[str, JobResult],
    reported: Collection[str],
    *,
    max_failures: int,
    finished: Collection[str] = (),
) -> FailureUpdate:
    """Fold one round into the consecutive-failure counts. A job that ran cleanly (or finished)
    starts again from 0; a job the round did not run keeps its count."""
    failures = dict(previous)
    faults: dict[str, str] = {}
    give_up: dict[str, str] = {}
    for jid, result in results.items():
        why = None if jid in finished else round_fault(result, jid in reported)
        if why is None:
            if result.state == JobState.COMPLETED or jid in finished:
                failures.pop(jid, None)
            continue
        faults[jid] = why
        failures[jid] = failures.get(jid, 0) + 1
        if failures[jid] >= max_failures:
            give_up[jid] = f"{failures[jid]} failed rounds in a row, the last: {why}"
    return FailureUpdate(failures, faults, give_up)
