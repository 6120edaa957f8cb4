"""How times read in every printed table: one format for a duration, one for a time of day in a run."""

from __future__ import annotations


def duration(seconds: float) -> str:
    """A length of time in the unit that reads best: '45 s', '12.5 min', '8.25 h'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def clock(seconds: float) -> str:
    """A point in time since the schedule's start, as H:MM:SS (round boundaries line up in columns)."""
    h, rest = divmod(int(round(seconds)), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"
