"""Pause Python's cycle collector around a bounded batch of work.

Planning a few rounds builds hundreds of thousands of small objects (jobs, rows, keys)
and frees almost none, so each collector pass walks a growing heap for nothing: on
10^5 jobs that was about a quarter of `rota plan --rounds 1`. Work whose size is fixed
by its inputs (a K-round plan, one next-round call) runs with the collector paused; the
collector is restored afterwards, so any cycles left are still reclaimed later. Long
simulations keep it on: their memory would otherwise grow with the number of rounds.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """Run the block with the cycle collector off (when `pause`), then restore its state."""
    collecting = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
