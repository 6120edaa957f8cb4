"""Pair orchestration, OOM and crash handling with fake workloads (no torch needed)."""

from __future__ import annotations

import multiprocessing.context
import os
import signal

import pytest

from profiler.processes import run_group
from profiler.timing import TimingConfig
from profiler.worker import WorkerJob, classify_failure

FAST = TimingConfig(warmup_steps=2, window_s=0.05, min_windows=4, budget_s=1.0, target_spread=0.05)


def job(builder: str, **options) -> WorkerJob:
    return WorkerJob(f"profiler.fakes:{builder}", 8, "cpu", FAST, options=options, barrier_timeout_s=30)


def test_solo_reports_the_known_step_time():
    (r,) = run_group([job("build_busy", step_s=0.004)], "solo", timeout_s=60)
    assert r.status == "ok", r.message
    # a busy-wait step never takes less than asked; how much more depends on the machine's load,
    # so the upper bound only catches a unit mistake (a step counted as ms or as a whole window)
    assert 0.004 <= r.step_time_median_s < 1.0
    assert r.samples_per_step == 8 and r.n_steps > 0 and r.windows >= 4


def test_pair_measures_both_sides_while_both_run():
    a, b = run_group([job("build_busy", step_s=0.003), job("build_busy", step_s=0.011)], "pair", timeout_s=60)
    assert a.status == b.status == "ok", (a.message, b.message)
    # A busy-wait step never takes less than asked; it takes more only if descheduled.
    assert 0.003 <= a.step_time_median_s < b.step_time_median_s
    assert b.step_time_median_s >= 0.011
    # One side stopped the pair; the other's windows were cut to the overlap.
    assert {a.stop_reason, b.stop_reason} & {"partner", "converged"}


@pytest.mark.parametrize("at", ["build", "step"])
def test_oom_on_one_side_marks_the_pair_and_stops_the_other(at):
    ok_side, oom_side = run_group([job("build_busy", step_s=0.003), job("build_oom", at=at)], "pair", timeout_s=60)
    assert oom_side.status == "oom" and "out of memory" in oom_side.message
    assert ok_side.status == "failed" and "another process" in ok_side.message


def test_torch_cuda_oom_is_recognised():
    pytest.importorskip("torch")
    (r,) = run_group([job("build_oom", flavour="torch", at="step")], "solo", timeout_s=60)
    assert r.status == "oom" and "OutOfMemoryError" in r.message


def test_a_hard_crash_is_failed_not_fatal(tmp_path):
    crash, other = run_group(
        [job("build_crash", exit_code=7), job("build_busy", step_s=0.003)], "pair", timeout_s=60, log_dir=tmp_path
    )
    assert crash.status == "failed" and "code 7" in crash.message
    assert other.status == "failed"


def test_timeout_stops_the_group():
    (r,) = run_group([job("build_busy", step_s=30.0)], "solo", timeout_s=2)
    assert r.status == "failed" and "timed out" in r.message


@pytest.fixture
def starts(monkeypatch):
    """Run `during(process)` right after each worker process has started (inside run_group's start-up)."""
    started: list = []
    actions: list = []
    real_start = multiprocessing.context.SpawnProcess.start

    def start(self):
        real_start(self)
        started.append(self)
        for action in actions:
            action(self, len(started) - 1)

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start)
    return started, actions


def _sigint_state():
    return signal.getsignal(signal.SIGINT), signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())


@pytest.mark.parametrize("mode,at_rank", [("solo", 0), ("pair", 0), ("pair", 1), ("data_parallel", 1)])
def test_a_ctrl_c_while_a_worker_starts_is_raised_and_stops_every_worker(starts, mode, at_rank):
    """A SIGINT that arrives while a process starts was once ignored (lost); it must come out as
    KeyboardInterrupt once the start is done, with every started process stopped."""
    started, actions = starts
    actions.append(lambda process, rank: rank == at_rank and os.kill(os.getpid(), signal.SIGINT))
    before = _sigint_state()
    jobs = [job("build_busy", step_s=30.0)] * (1 if mode == "solo" else 2)
    with pytest.raises(KeyboardInterrupt):
        run_group(jobs, mode, timeout_s=600)
    assert len(started) == at_rank + 1  # raised at once: no further process was started
    assert all(p.exitcode is not None for p in started)  # stopped, not left running
    assert _sigint_state() == before  # the handler and the signal mask are back as they were


def test_a_ctrl_c_aimed_at_a_starting_worker_does_not_kill_it(starts):
    """A terminal's Ctrl-C reaches every process of the group; a worker still starting must not die of it
    (the parent decides, and stops its workers itself)."""
    started, actions = starts
    actions.append(lambda process, rank: os.kill(process.pid, signal.SIGINT))
    a, b = run_group([job("build_busy", step_s=0.003), job("build_busy", step_s=0.003)], "pair", timeout_s=60)
    assert a.status == b.status == "ok", (a.message, b.message)
    assert [p.exitcode for p in started] == [0, 0]


def test_classify_failure():
    assert classify_failure(MemoryError()) == "oom"
    assert classify_failure(RuntimeError("CUDA out of memory. Tried to allocate")) == "oom"
    assert classify_failure(RuntimeError("DefaultCPUAllocator: can't allocate memory")) == "oom"
    assert classify_failure(ValueError("bad shape")) == "failed"
