"""The timing loop, after torch.utils.benchmark's `adaptive_autorange`.

Warm-up steps are run and thrown away (lazy init, allocator growth, cuDNN
autotuning). Then steps run in windows of n steps, n chosen so a window lasts
about `window_s`; the clock synchronises the device only at window edges, so
the loop adds a few microseconds per window, not per step. Windows repeat until
the relative spread (IQR / median of the per-window step times) is small or the
time budget is spent. Statistics are over windows, as a Measurement in
torch.utils.benchmark is over blocks of runs.

A `Coordinator` lets several processes share one measurement: a co-located
pair counts only the windows during which both were running; data-parallel
ranks agree on window sizes and stop together. Nothing here imports torch.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

Step = Callable[[], object]


@dataclass(frozen=True)
class TimingConfig:
    warmup_steps: int = 3  # at least 1; the first step is never timed
    window_s: float = 0.25  # target length of one timed window
    min_windows: int = 6  # before the spread is trusted
    max_windows: int = 2000
    target_spread: float = 0.02  # stop when IQR / median <= this
    budget_s: float = 10.0  # timed seconds per measurement (warm-up excluded)

    def __post_init__(self) -> None:
        if self.warmup_steps < 1:
            raise ValueError("warmup_steps must be >= 1 (the first step calibrates the window)")
        if self.window_s <= 0 or self.budget_s <= 0:
            raise ValueError("window_s and budget_s must be positive")
        if self.min_windows < 1 or self.max_windows < self.min_windows:
            raise ValueError("need 1 <= min_windows <= max_windows")


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), for small samples."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class Measurement:
    window_steps: tuple[int, ...]
    window_seconds: tuple[float, ...]
    warmup_steps: int
    warmup_seconds: float
    stop_reason: str  # converged | budget | max_windows | partner
    began_at: float = 0.0  # `now()` when the first timed window began: warm-up is over

    @property
    def n_steps(self) -> int:
        return sum(self.window_steps)

    @property
    def elapsed_s(self) -> float:
        return sum(self.window_seconds)

    @property
    def steps_per_s(self) -> float:
        return self.n_steps / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def step_times(self) -> list[float]:
        return [t / n for t, n in zip(self.window_seconds, self.window_steps)]

    @property
    def median(self) -> float:
        return quantile(self.step_times, 0.5)

    @property
    def iqr(self) -> float:
        times = self.step_times
        return quantile(times, 0.75) - quantile(times, 0.25)

    @property
    def relative_spread(self) -> float:
        return relative_spread(self.step_times)

    @property
    def converged(self) -> bool:
        return self.stop_reason == "converged"


def relative_spread(step_times: Sequence[float]) -> float:
    mid = quantile(step_times, 0.5)
    if not step_times or mid <= 0:
        return math.inf
    return (quantile(step_times, 0.75) - quantile(step_times, 0.25)) / mid


# --------------------------------------------------------------------------- clocks


class Clock(Protocol):
    def window(self, step: Step, n: int) -> float:
        """Run `step` n times; return the seconds they took on the device."""


class HostClock:
    """Wall clock; `sync` (e.g. torch.cuda.synchronize) brackets each window."""

    def __init__(self, sync: Callable[[], None] | None = None):
        self.sync = sync or (lambda: None)

    def window(self, step: Step, n: int) -> float:
        self.sync()
        start = time.perf_counter()
        for _ in range(n):
            step()
        self.sync()
        return time.perf_counter() - start


class CudaEventClock:
    """CUDA events around the window; waiting on the end event synchronises."""

    def __init__(self, device):
        import torch  # only ever built inside a CUDA worker

        self.device = device
        self.torch = torch

    def window(self, step: Step, n: int) -> float:
        cuda = self.torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0  # ms → s


# --------------------------------------------------------------------------- coordination


@dataclass(frozen=True)
class WindowState:
    ended_at: float  # time.monotonic() when the window ended (system-wide clock)
    elapsed_s: float  # since the timed phase began
    converged: bool  # this process alone would stop: spread small enough
    out_of_time: bool  # budget or window cap reached


@dataclass(frozen=True)
class Verdict:
    keep: bool  # count this window
    stop: bool
    reason: str | None = None  # why a coordinator stopped us, if not our own criteria


class Coordinator(Protocol):
    def agree_steps(self, n: int) -> int: ...
    def start(self) -> None: ...
    def after_window(self, state: WindowState) -> Verdict: ...


class Solo:
    """One process: stop when converged or out of time."""

    def agree_steps(self, n: int) -> int:
        return n

    def start(self) -> None:
        pass

    def after_window(self, state: WindowState) -> Verdict:
        return Verdict(keep=True, stop=state.converged or state.out_of_time)


class Aborted(RuntimeError):
    """The parent went away; stop without a result."""


def measure(
    step: Step,
    config: TimingConfig,
    clock: Clock | None = None,
    coordinator: Coordinator | None = None,
    abort: Callable[[], bool] | None = None,
    now: Callable[[], float] = time.monotonic,
) -> Measurement:
    """Time `step` until stable or out of budget; `now` is injectable for tests."""
    clock = clock or HostClock()
    coordinator = coordinator or Solo()
    abort = abort or (lambda: False)

    warm = [clock.window(step, 1) for _ in range(config.warmup_steps)]
    estimate = statistics.median(warm[1:] or warm)
    n = max(1, int(config.window_s / max(estimate, 1e-9)))
    # Keep at least min_windows inside the budget even when steps are slow to settle.
    n = max(1, min(n, int(config.budget_s / config.min_windows / max(estimate, 1e-9))))
    n = coordinator.agree_steps(n)
    if abort():
        raise Aborted("parent process is gone")

    coordinator.start()
    began = now()
    steps: list[int] = []
    seconds: list[float] = []
    reason = "budget"
    while True:
        seconds.append(clock.window(step, n))
        steps.append(n)
        ended = now()
        if abort():
            raise Aborted("parent process is gone")
        converged = (
            len(seconds) >= config.min_windows
            and relative_spread([t / k for t, k in zip(seconds, steps)]) <= config.target_spread
        )
        hit_cap = len(seconds) >= config.max_windows
        out_of_time = ended - began >= config.budget_s or hit_cap
        verdict = coordinator.after_window(WindowState(ended, ended - began, converged, out_of_time))
        if not verdict.keep:
            seconds.pop()
            steps.pop()
        if verdict.stop:
            if verdict.reason:
                reason = verdict.reason
            elif converged:
                reason = "converged"
            elif hit_cap:
                reason = "max_windows"
            break
    return Measurement(tuple(steps), tuple(seconds), config.warmup_steps, sum(warm), reason, began)
