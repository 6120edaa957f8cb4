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
