"""The timing loop against fake workloads whose step time is known."""

from __future__ import annotations

import math
import statistics

import pytest

from profiler.fakes import spin
from profiler.timing import (
    HostClock,
    Measurement,
    Solo,
    TimingConfig,
    Verdict,
    WindowState,
    measure,
    quantile,
    relative_spread,
)


class FakeTime:
    """A clock whose windows take exactly the scripted step times, and a matching `now`."""

    def __init__(self, step_time):
        self.step_time = step_time  # callable: step index -> seconds
        self.t = 0.0
        self.calls = 0

    def window(self, step, n):
        total = 0.0
        for _ in range(n):
            step()
            total += self.step_time(self.calls)
            self.calls += 1
        self.t += total
        return total

    def now(self):
        return self.t


def test_quantile_matches_linear_interpolation():
    values = [4.0, 1.0, 3.0, 2.0]
    assert quantile(values, 0.5) == 2.5
    assert quantile(values, 0.25) == pytest.approx(1.75)
    assert quantile(values, 0.75) == pytest.approx(3.25)
    assert quantile([7.0], 0.9) == 7.0
    assert math.isnan(quantile([], 0.5))
    assert relative_spread([1.0, 1.0, 1.0]) == 0.0


def test_constant_step_time_converges_with_exact_statistics():
    fake = FakeTime(lambda i: 0.01)
    cfg = TimingConfig(warmup_steps=3, window_s=0.1, min_windows=5, budget_s=100)
    m = measure(lambda: None, cfg, clock=fake, now=fake.now)
    assert m.stop_reason == "converged"
    assert len(m.window_steps) == 5  # stops as soon as min_windows agree
    assert set(m.window_steps) == {10}  # 0.1 s windows of 0.01 s steps
    assert m.median == pytest.approx(0.01)
    assert m.iqr == pytest.approx(0.0)
    assert m.steps_per_s == pytest.approx(100.0)
    assert m.n_steps == 50 and fake.calls == 53  # 3 warm-up steps were run but not counted


def test_warmup_is_excluded_from_the_statistics():
    # The first three steps are 50x slower (lazy init, autotuning).
    fake = FakeTime(lambda i: 0.1 if i < 3 else 0.002)
    m = measure(lambda: None, TimingConfig(warmup_steps=3, window_s=0.05, budget_s=100), clock=fake, now=fake.now)
    assert m.median == pytest.approx(0.002)
    assert m.steps_per_s == pytest.approx(500.0)
    assert m.warmup_seconds == pytest.approx(0.3)


def test_noisy_steps_stop_at_the_budget():
    # Alternating windows of very different speed never get under 2 % spread.
    fake = FakeTime(lambda i: 0.001 if (i // 10) % 2 else 0.003)
    cfg = TimingConfig(warmup_steps=1, window_s=0.01, min_windows=4, budget_s=1.0, target_spread=0.02)
    m = measure(lambda: None, cfg, clock=fake, now=fake.now)
    assert m.stop_reason == "budget"
    assert 1.0 <= m.elapsed_s < 1.1
    assert m.relative_spread > 0.02
    # steps/s is the whole run's rate, not the inverse of the median
    assert m.steps_per_s == pytest.approx(m.n_steps / m.elapsed_s)


def test_window_cap():
    fake = FakeTime(lambda i: 0.001 * (1 + i % 3))
    cfg = TimingConfig(warmup_steps=1, window_s=0.001, min_windows=2, max_windows=7, budget_s=100)
    m = measure(lambda: None, cfg, clock=fake, now=fake.now)
    assert m.stop_reason == "max_windows" and len(m.window_steps) == 7


def test_slow_steps_still_fit_min_windows_into_the_budget():
    fake = FakeTime(lambda i: 1.0)
    cfg = TimingConfig(warmup_steps=2, window_s=5.0, min_windows=4, budget_s=8.0)
    m = measure(lambda: None, cfg, clock=fake, now=fake.now)
    assert set(m.window_steps) == {2}  # 8 s budget / 4 windows → 2 one-second steps per window
    assert len(m.window_steps) >= 4


def test_coordinator_can_discard_a_window():
    class DropSecond(Solo):
        def __init__(self):
            self.seen = 0

        def after_window(self, state: WindowState) -> Verdict:
            self.seen += 1
            return Verdict(keep=self.seen != 2, stop=self.seen == 3, reason="partner" if self.seen == 3 else None)

    fake = FakeTime(lambda i: 0.01)
    m = measure(
        lambda: None, TimingConfig(warmup_steps=1, window_s=0.05), clock=fake, coordinator=DropSecond(), now=fake.now
    )
    assert len(m.window_steps) == 2 and m.stop_reason == "partner"


def test_real_clock_against_a_known_step_time():
    cfg = TimingConfig(warmup_steps=2, window_s=0.05, min_windows=5, budget_s=1.5, target_spread=0.05)
    m = measure(lambda: spin(0.004), cfg, clock=HostClock())
    # A busy-waiting step cannot take less than 4 ms, so a clock that under-reads fails here.
    # No upper bound: on a loaded machine a descheduled step takes any time (no wall-clock asserts).
    assert m.median >= 0.004
    assert 0 < m.steps_per_s <= 250


def test_config_validation():
    with pytest.raises(ValueError):
        TimingConfig(warmup_steps=0)
    with pytest.raises(ValueError):
        TimingConfig(budget_s=0)
    with pytest.raises(ValueError):
        TimingConfig(min_windows=5, max_windows=3)


def test_measurement_properties():
    m = Measurement((10, 10, 20), (0.1, 0.2, 0.2), 3, 0.5, "budget")
    assert m.n_steps == 40
    assert m.elapsed_s == pytest.approx(0.5)
    assert m.step_times == pytest.approx([0.01, 0.02, 0.01])
    assert m.median == pytest.approx(statistics.median([0.01, 0.02, 0.01]))
    assert not m.converged
