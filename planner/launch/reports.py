"""The progress reports of one round, from the progress folder the jobs write into.

Before a round starts, the reports of earlier rounds are moved aside (into `.rota-read/`), and
after it only reports written since the round started are read: a file left from an earlier
round is never taken for this round's report (it would credit nothing and hide a failure). A
report that cannot be read is a warning and counts as no report: a trainer's bad file must not
stop the loop that runs everybody else's jobs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import InputError
from planner.export.common import progress_file_name
from planner.formats.files import read_json
from planner.formats.progress import JobProgress, job_progress

READ_DIR = ".rota-read"
# A report's time stamp may lag the round start by the file system's granularity (1-2 s on some
# network file systems) but never by a whole round.
CLOCK_SLACK_S = 2.0


@dataclass
class RoundReports:
    jobs: dict[str, JobProgress] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)  # files older than the round: ignored
    problems: list[str] = field(default_factory=list)  # unreadable reports: ignored, one line each


def set_aside(folder: Path, round_index: int) -> int:
    """Move the reports in `folder` into `.rota-read/round-NNNN/` (kept for the record); returns how many."""
    moved = 0
    if not folder.is_dir():
        return 0
    target = folder / READ_DIR / f"round-{round_index:04d}"
    for item in folder.glob("*.json"):
        if not item.is_file():
            continue
        target.mkdir(parents=True, exist_ok=True)
        os.replace(item, target / item.name)
        moved += 1
    return moved


def read_round(folder: Path, job_ids: Iterable[str], since: float) -> RoundReports:
    """The reports of `job_ids` written at or after `since` (time.time() of the round start)."""
    out = RoundReports()
    for jid in job_ids:
        path = folder / progress_file_name(jid)
        try:
            info = path.stat()
        except OSError:
            continue
        if not path.is_file():
            out.problems.append(f"{path}: not a regular file; ignored")
            continue
        if info.st_mtime < since - CLOCK_SLACK_S:
            out.stale.append(str(path))
            continue
        try:
            raw = read_json(path, "progress")  # the input layer: regular files, size cap, no key twice
            if isinstance(raw, dict):
                raw.setdefault("job_id", jid)
            found, report = job_progress(raw, path=path, row=None)
        except InputError as exc:
            out.problems.append(f"{exc}; ignored")
            continue
        except (OSError, ValueError, RecursionError) as exc:
            out.problems.append(
                f"{path}: cannot read: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; ignored"
            )
            continue
        if found != jid:
            out.problems.append(f"{path}: reports job {found!r}, not {jid!r}; ignored")
            continue
        out.jobs[jid] = report
    return out
