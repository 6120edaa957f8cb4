"""Users' own training scripts that cannot be imported (`--command`).

The protocol: after each training step the script prints one line

    ROTA_STEP <n>

on its standard output, `n` being the number of steps completed so far
(1, 2, 3, …; a script that logs every k steps may print k, 2k, 3k, …), and
flushes it. Everything else it prints is ignored. The profiler starts the
command in a new session (no shell: the string is split like a shell would,
`{batch_size}` in it is replaced by the batch size), with these variables set:
ROTA_DEVICE (`cpu` or `cuda:0`; on a GPU, CUDA_VISIBLE_DEVICES picks the one),
ROTA_BATCH_SIZE (when there is one), ROTA_SCALE, and PYTHONUNBUFFERED=1.
CPU workers are pinned as for the reference models.

The reports are timed as the reference models' steps are (`timing.measure`):
the first `--warmup-steps` reports are warm-up, then windows of reports until
the spread is small or the budget is spent; then the command's process group
is stopped. `startup_s` is the time from the start of the command to the end
of its warm-up. A report that is not a whole number, is negative, or does not
advance is an error (never a row); so is a command that reports no step before
the timeout, or exits non-zero (unless it ran out of memory: an `oom` row).
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from models.spec import WorkloadSpec
from planner.errors import InputError
from profiler.timing import Measurement, Solo, TimingConfig, measure
from profiler.worker import WorkerResult
from profiler.workloads import USER_FAMILY, check_name

STEP_LINE = re.compile(r"^ROTA_STEP\s+(?P<n>\S+)\s*$")
_NAMED = re.compile(r"^(?P<name>[^=\s]+)=(?P<command>\S.*)$")
STOP_GRACE_S = 5.0


def parse_command(text: str, batch_sizes: Sequence[int] = ()) -> WorkloadSpec:
    """'[NAME=]program args…' → a single-device spec; NAME defaults to the script's stem."""
    match = _NAMED.match(text.strip())
    name, command = (match["name"], match["command"]) if match else (None, text.strip())
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise InputError(f"cannot split {text!r}: {exc}", field="--command") from None
    if not argv:
        raise InputError("is empty", field="--command")
    if name is None:
        scripts = [a for a in argv if a.endswith(".py")]
        name = Path(scripts[0] if scripts else argv[0]).stem
    check_name(name, "--command")
    joined = shlex.join(argv)
    return WorkloadSpec(name, USER_FAMILY, "", tuple(batch_sizes), (1,), f"command {joined}", {"command": joined})


def is_command(spec: WorkloadSpec) -> bool:
    return spec.family == USER_FAMILY and "command" in spec.options


def command_argv(spec: WorkloadSpec, batch_size: int | None) -> list[str]:
    argv = shlex.split(spec.options["command"])
    size = "" if batch_size is None else str(batch_size)
    return [a.replace("{batch_size}", size) for a in argv]


# --------------------------------------------------------------------------- reading reports


class CommandEnded(Exception):
    """The command closed its output (exited) while the profiler waited for a step."""


@dataclass
class _Reports:
    """A thread reads the command's stdout and queues (time read, step count) per report."""

    name: str
    lines: queue.Queue
    other: deque  # recent non-report lines, for messages

    @classmethod
    def start(cls, name: str, stream) -> _Reports:
        reports = cls(name, queue.Queue(), deque(maxlen=5))
        threading.Thread(target=reports._read, args=(stream,), daemon=True).start()
        return reports

    def _read(self, stream) -> None:
        for line in stream:
            stamp = time.monotonic()
            match = STEP_LINE.match(line.strip())
            if match:
                self.lines.put((stamp, match["n"]))
            elif line.strip():
                self.other.append(line.strip()[:200])
        self.lines.put((time.monotonic(), None))

    def next(self, deadline: float, last: int) -> tuple[float, int]:
        """The next report, validated; CommandEnded at EOF; InputError for a bad one or a timeout."""
        try:
            stamp, text = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise _NoStep from None
        if text is None:
            raise CommandEnded
        try:
            n = int(text)
        except ValueError:
            raise InputError(
                f"{self.name}: reported step {text!r}; expected a whole number", field="--command"
            ) from None
        if n < 0 or n <= last:
            raise InputError(
                f"{self.name}: reported step {n} after step {last}; step counts must be positive and increase",
                field="--command",
            )
        return stamp, n


class _NoStep(Exception):
    """No report before the deadline."""


class ReportClock:
    """A `timing.Clock` over a command's step reports.

    The first `warmup` windows are one report each (the warm-up steps). After
    that a window runs until at least `window_s` seconds and one report have
    passed, whatever n `measure` asks for: reports can arrive in bursts (a
    descheduled script, a busy reader), so n calibrated from a few warm-up
    reports is not to be trusted, while time-long windows average bursts out.
    Windows are back to back, the first one starting at the launch, so nothing
    goes untimed. Every window is kept with the steps the script really
    reported (a script logging every k steps advances k at a time).
    """

    def __init__(self, reports: _Reports, launched_at: float, deadline: float, warmup: int, window_s: float):
        self.reports, self.deadline = reports, deadline
        self.warmup, self.window_s = warmup, window_s
        self.last_at, self.last_n = launched_at, 0
        self.windows: list[tuple[int, float]] = []  # (steps, seconds)

    def window(self, step, n: int) -> float:
        began_at, began_n = self.last_at, self.last_n
        long_enough = 0.0 if len(self.windows) < self.warmup else self.window_s
        while self.last_n == began_n or self.last_at - began_at < long_enough:
            self.last_at, self.last_n = self.reports.next(self.deadline, self.last_n)
        steps, seconds = self.last_n - began_n, self.last_at - began_at
        self.windows.append((steps, seconds))
        return seconds * n / steps  # the time of n steps at this window's rate, as measure() counts them


def _measurement(clock: ReportClock, config: TimingConfig, reason: str) -> Measurement:
    warm, timed = clock.windows[: config.warmup_steps], clock.windows[config.warmup_steps :]
    return Measurement(
        tuple(s for s, _ in timed),
        tuple(t for _, t in timed),
        config.warmup_steps,
        sum(t for _, t in warm),
        reason,
    )


# --------------------------------------------------------------------------- running one


@dataclass(frozen=True)
class CommandJob:
    spec: WorkloadSpec
    batch_size: int | None
    device: str  # "cpu" or "cuda:<index>"
    timing: TimingConfig
    scale: str
    cpu_set: tuple[int, ...]
    timeout_s: float


def _environment(job: CommandJob) -> Mapping[str, str]:
    env = {**os.environ, "ROTA_SCALE": job.scale, "PYTHONUNBUFFERED": "1", "ROTA_DEVICE": "cpu"}
    if job.device.startswith("cuda"):
        env.update(CUDA_VISIBLE_DEVICES=job.device.partition(":")[2] or "0", ROTA_DEVICE="cuda:0")
    if job.batch_size is not None:
        env["ROTA_BATCH_SIZE"] = str(job.batch_size)
    if job.cpu_set:
        env["OMP_NUM_THREADS"] = str(len(job.cpu_set))
    return env


def _peak_rss_bytes(pid: int) -> int | None:
    """The command's peak resident set (VmHWM), read before it is stopped; Linux only."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def _tail(path: str) -> str:
    lines = [line.strip() for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _ended(job: CommandJob, process: subprocess.Popen, log: str, clock: ReportClock) -> WorkerResult | None:
    """The command exited on its own: an oom row, an error, or (exit 0 with timed windows) a result."""
    try:
        code = process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:  # closed its output but runs on
        raise InputError(f"{job.spec.model}: closed its standard output but kept running", field="--command") from None
    detail = _tail(log)
    label = job.spec.model
    if code == -signal.SIGKILL or "out of memory" in detail.lower():
        return WorkerResult(status="oom", message=f"{label}: exited with code {code} ({detail})")
    if code != 0:
        why = f": {detail}" if detail else ""
        raise InputError(f"{label}: {job.spec.options['command']} exited with code {code}{why}", field="--command")
    if len(clock.windows) <= job.timing.warmup_steps:
        raise InputError(
            f"{label}: exited after {clock.last_n} steps, before a timed window; "
            f"let it run longer than --warmup-steps {job.timing.warmup_steps} plus --budget",
            field="--command",
        )
    return None


def run_command(job: CommandJob) -> WorkerResult:
    """Start the command, time its step reports, stop it; one WorkerResult (or InputError)."""
    label = job.spec.model
    log = tempfile.NamedTemporaryFile(prefix="rota-command-", suffix=".log", delete=False)
    launched_at = time.monotonic()
    try:
        process = subprocess.Popen(
            command_argv(job.spec, job.batch_size),
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env=dict(_environment(job)),
            text=True,
            start_new_session=True,  # its own process group: stopped whole, and Ctrl-C is ours to handle
        )
    except OSError as exc:
        log.close()
        os.unlink(log.name)
        raise InputError(f"{label}: cannot start {job.spec.options['command']}: {exc}", field="--command") from None
    try:
        if job.cpu_set and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(process.pid, job.cpu_set)  # it has just started: before its thread pools
        reports = _Reports.start(label, process.stdout)
        deadline = launched_at + job.timeout_s
        clock = ReportClock(reports, launched_at, deadline, job.timing.warmup_steps, job.timing.window_s)
        try:
            m = _measurement(clock, job.timing, measure(lambda: None, job.timing, clock, Solo()).stop_reason)
        except CommandEnded:
            early = _ended(job, process, log.name, clock)
            if early is not None:
                return early
            m = _measurement(clock, job.timing, "command ended")
        except _NoStep:
            seen = "no step" if clock.last_n == 0 else f"no step after step {clock.last_n}"
            raise InputError(
                f"{label}: reported {seen} within {job.timeout_s:.0f} s (expected a line 'ROTA_STEP <n>' on stdout "
                "after each step; see docs/profiling.md)",
                field="--command",
            ) from None
        startup_s = sum(t for _, t in clock.windows[: job.timing.warmup_steps])  # launch to the end of warm-up
        peak = _peak_rss_bytes(process.pid) if not job.device.startswith("cuda") else None
    finally:
        _stop(process)
        log.close()
        os.unlink(log.name)
    return WorkerResult(
        status="ok",
        steps_per_s=m.steps_per_s,
        n_steps=m.n_steps,
        step_time_median_s=m.median,
        step_time_iqr_s=m.iqr,
        samples_per_step=job.batch_size or 1,
        peak_memory_bytes=peak,
        stop_reason=m.stop_reason,
        windows=len(m.window_steps),
        startup_s=startup_s,
    )
