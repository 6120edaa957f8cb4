"""How far a measured row can be trusted: the spread of its step times.

The profiler stores each measurement's median step time and its interquartile
range; their ratio is the relative spread. Above `NOISY_SPREAD` the steps/s of
the row can be off by that much: the machine was busy, or the step time varies
by itself (data-dependent work). Such rows stay usable, but the profiler and
`rota table validate` name them so they can be measured again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

NOISY_SPREAD = 0.10  # IQR / median of the step times

REMEASURE_HINT = (
    "measure them again on an idle machine (stop other jobs first) with a longer --budget, "
    "e.g. rota profile --models NAME --batch-sizes SIZE --budget 30"
)


# --models selects reference models only: a --workload/--command job is measured again by giving
# its option again (NAME= included, so its rows are replaced rather than added under a new name).
USER_REMEASURE_HINT = (
    "measure them again on an idle machine (stop other jobs first) with a longer --budget and the same "
    "--workload/--command options (--models names reference models only), e.g. rota profile "
    "--workload NAME=package.module:factory --batch-sizes SIZE --budget 30"
)
MIXED_REMEASURE_HINT = f"{REMEASURE_HINT}; for --workload/--command jobs give their options again instead of --models"
USER_NOTES = ("workload ", "command ")  # how the profiler's notes start for a user's own job


def remeasure_hint(reference: bool, user: bool) -> str:
    """What to do about noisy rows of reference models, of users' own jobs, or of both."""
    if user and not reference:
        return USER_REMEASURE_HINT
    return MIXED_REMEASURE_HINT if user else REMEASURE_HINT


def is_user_row(row: Mapping[str, Any]) -> bool:
    """A row the profiler measured for a --workload or --command job (its notes say which)."""
    return str(row.get("notes") or "").startswith(USER_NOTES)


def relative_spread(row: Mapping[str, Any]) -> float | None:
    """IQR / median of the row's step times; None when the row has no timings (imported, estimated)."""
    median, iqr = row.get("step_time_median_s"), row.get("step_time_iqr_s")
    if median is None or iqr is None or not median > 0:
        return None
    return float(iqr) / float(median)


def is_noisy(row: Mapping[str, Any], threshold: float = NOISY_SPREAD) -> bool:
    spread = relative_spread(row)
    return spread is not None and spread > threshold


def noisy_rows(rows: Iterable[Mapping[str, Any]], threshold: float = NOISY_SPREAD) -> list[int]:
    """1-based row numbers (as error messages count them) of rows whose spread exceeds the threshold."""
    return [i for i, row in enumerate(rows, start=1) if is_noisy(row, threshold)]
