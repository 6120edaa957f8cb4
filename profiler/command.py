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

Data-parallel (scale factor k > 1): k copies start at once, with the
variables torchrun gives its ranks (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and ROTA_DIST_BACKEND (`nccl` on
GPUs, `gloo` on the CPU), so `torch.distributed.init_process_group(backend)`
with its default env:// rendezvous forms the gang. On GPUs the gang's GPUs are
visible in rank order (rank r uses `cuda:<LOCAL_RANK>`, as ROTA_DEVICE says).
Rank 0's reports are timed (the ranks of a synchronous data-parallel job step
together; the others' output is read and dropped) and the row's throughput is
k times that rate, as Gavel sums its workers' rates. Any rank that exits ends
the measurement: a failure names the first rank that failed.

The reports are timed as the reference models' steps are (`timing.measure`):
the first `--warmup-steps` reports are warm-up, then windows of reports until
the spread is small or the budget is spent; then the command's process group
is stopped. `startup_s` is the time from the start of the command to the end
of its warm-up. A report that is not a whole number, is negative, or does not
advance is an error (never a row); so is a command that reports no step before
the timeout, or exits non-zero (unless it ran out of memory: an `oom` row).
"""

from __future__ import annotations

import math
import os
import queue
import re
import shlex
import signal
import socket
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
from profiler.devices import Node
from profiler.processes import SigintHeld
from profiler.ray_nodes import ray_rank_prefix
from profiler.slurm_nodes import srun_prefix
from profiler.timing import Measurement, Solo, TimingConfig, measure
from profiler.worker import GangPlace, WorkerResult, torchrun_environment
from profiler.workloads import USER_FAMILY, check_name, user_scale_factors

STEP_LINE = re.compile(r"^ROTA_STEP\s+(?P<n>\S+)\s*$")
_NAMED = re.compile(r"^(?P<name>[^=\s]+)=(?P<command>\S.*)$")
STOP_GRACE_S = 5.0


def parse_command(text: str, batch_sizes: Sequence[int] = (), scale_factors: Sequence[int] = (1,)) -> WorkloadSpec:
    """'[NAME=]program args…' → a spec measured at `batch_sizes` and `scale_factors` (k ranks started
    as torchrun starts them); NAME defaults to the script's stem."""
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
    scales = user_scale_factors(scale_factors)
    return WorkloadSpec(name, USER_FAMILY, "", tuple(batch_sizes), scales, f"command {joined}", {"command": joined})


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


# --------------------------------------------------------------------------- running a gang


@dataclass(frozen=True)
class CommandJob:
    """One measurement of a command: `len(devices)` ranks (1: alone; k: data-parallel)."""

    spec: WorkloadSpec
    batch_size: int | None
    devices: tuple[str, ...]  # per rank: "cpu" or "cuda:<index>"
    timing: TimingConfig
    scale: str
    cpu_sets: tuple[tuple[int, ...], ...]  # per rank (empty tuples for GPUs)
    timeout_s: float
    master_port: int = 0  # data-parallel rendezvous (MASTER_PORT); 0: alone, none needed
    nodes: tuple[Node, ...] = ()  # per rank, in a multi-node allocation (rank 0's is this host)

    @property
    def world_size(self) -> int:
        return len(self.devices)

    def place(self, rank: int) -> GangPlace:
        """Rank `rank` among the ranks of its node, and the node among the gang's."""
        if not self.nodes:
            return GangPlace(rank, self.world_size, rank, self.world_size, 0, "127.0.0.1", self.master_port)
        order = list(dict.fromkeys(self.nodes))
        mates = [r for r, node in enumerate(self.nodes) if node == self.nodes[rank]]
        return GangPlace(
            rank,
            self.world_size,
            mates.index(rank),
            len(mates),
            order.index(self.nodes[rank]),
            self.nodes[0].address,
            self.master_port,
        )

    def is_remote(self, rank: int) -> bool:
        return bool(self.nodes) and self.nodes[rank] != self.nodes[0]


def rank_environment(job: CommandJob, rank: int) -> Mapping[str, str]:
    """ROTA_* for every rank; torchrun's variables for a gang (its GPUs visible in rank order, so
    LOCAL_RANK indexes them as torchrun's ranks do, and ROTA_DEVICE names the rank's own)."""
    env = {**os.environ, "ROTA_SCALE": job.scale, "PYTHONUNBUFFERED": "1", "ROTA_DEVICE": "cpu"}
    place = job.place(rank)
    mates = [r for r in range(job.world_size) if not job.nodes or job.nodes[r] == job.nodes[rank]]
    gpus = [job.devices[r].partition(":")[2] or "0" for r in mates if job.devices[r].startswith("cuda")]
    if gpus:
        env.update(CUDA_VISIBLE_DEVICES=",".join(gpus), ROTA_DEVICE=f"cuda:{place.local_rank}")
    if job.batch_size is not None:
        env["ROTA_BATCH_SIZE"] = str(job.batch_size)
    if job.cpu_sets[rank]:
        env["OMP_NUM_THREADS"] = str(len(job.cpu_sets[rank]))
    if job.world_size > 1:
        env.update(torchrun_environment(place))
        env["ROTA_DIST_BACKEND"] = "nccl" if gpus else "gloo"
    return env


def free_port() -> int:
    """A TCP port nobody listens on now, for a gang's rendezvous (as torchrun's --standalone picks one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _peak_rss_bytes(pid: int) -> int | None:
    """The command's peak resident set (VmHWM), read before it is stopped; Linux only."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _stop_all(processes: Sequence[subprocess.Popen]) -> None:
    """SIGTERM to every rank's process group at once, then SIGKILL to those still there after the grace."""
    for process in processes:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def _tail(path: str) -> str:
    lines = [line.strip() for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


@dataclass
class _Rank:
    rank: int
    process: subprocess.Popen
    log: str  # its standard error
    exited_at: float = math.inf  # when the watcher saw it exit: the first to fail is the one to name

    def outcome(self, label: str, command: str) -> WorkerResult | None:
        """Once it has exited: an oom result, None for exit 0; InputError for another failure."""
        try:
            code = self.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:  # closed its output but runs on
            raise InputError(f"{label}: closed its standard output but kept running", field="--command") from None
        detail = _tail(self.log)
        who = f"{label}" + (f" rank {self.rank}" if self.rank else "")
        if code == -signal.SIGKILL or "out of memory" in detail.lower():
            return WorkerResult(status="oom", message=f"{who}: exited with code {code} ({detail})")
        if code != 0:
            why = f": {detail}" if detail else ""
            raise InputError(f"{who}: {command} exited with code {code}{why}", field="--command")
        return None


def _watch(ranks: Sequence[_Rank], reports: _Reports) -> None:
    """Note when each rank exits. One other than 0 that exits ends the measurement: rank 0 would
    wait in its collectives until the backend's timeout, so its report stream is closed for it."""

    def watch(rank: _Rank) -> None:
        rank.process.wait()
        rank.exited_at = time.monotonic()
        if rank.rank:
            reports.lines.put((rank.exited_at, None))

    for rank in ranks:
        threading.Thread(target=watch, args=(rank,), daemon=True).start()


def _drain(stream) -> None:
    for _ in stream:  # ranks above 0: their reports are not timed (the gang steps together)
        pass


def _remote_prefix(job: CommandJob, rank: int) -> list[str]:
    """How rank `rank` starts on its node: nothing on this one, srun or a Ray task on another."""
    if not job.is_remote(rank):
        return []
    node = job.nodes[rank]
    if node.launcher == "ray":
        return ray_rank_prefix(node, 1 if job.devices[rank].startswith("cuda") else 0)
    return srun_prefix(node)


def _launch(job: CommandJob, rank: int) -> _Rank:
    label = job.spec.model
    log = tempfile.NamedTemporaryFile(prefix=f"rota-command-{rank}-", suffix=".log", delete=False)
    try:
        process = subprocess.Popen(
            [*_remote_prefix(job, rank), *command_argv(job.spec, job.batch_size)],
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env=dict(rank_environment(job, rank)),
            text=True,
            start_new_session=True,  # its own process group: stopped whole, and Ctrl-C is ours to handle
        )
    except OSError as exc:
        log.close()
        os.unlink(log.name)
        raise InputError(f"{label}: cannot start {job.spec.options['command']}: {exc}", field="--command") from None
    log.close()
    if job.cpu_sets[rank] and not job.is_remote(rank) and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(process.pid, job.cpu_sets[rank])  # it has just started: before its thread pools
        except OSError:  # already gone: its exit status says why
            pass
    return _Rank(rank, process, log.name)


def run_command(job: CommandJob) -> list[WorkerResult]:
    """Start the command's ranks, time rank 0's step reports, stop them all; one WorkerResult per rank
    (a data-parallel gang steps together, so each rank's rate is rank 0's), or InputError."""
    label = job.spec.model
    launched_at = time.monotonic()
    ranks: list[_Rank] = []
    try:
        for rank in range(job.world_size):
            with SigintHeld(block=False):  # a Ctrl-C while it starts waits until it is in `ranks` (stopped below)
                ranks.append(_launch(job, rank))
        reports = _Reports.start(label, ranks[0].process.stdout)
        for other in ranks[1:]:
            threading.Thread(target=_drain, args=(other.process.stdout,), daemon=True).start()
        _watch(ranks, reports)
        deadline = launched_at + job.timeout_s
        clock = ReportClock(reports, launched_at, deadline, job.timing.warmup_steps, job.timing.window_s)
        try:
            m = _measurement(clock, job.timing, measure(lambda: None, job.timing, clock, Solo()).stop_reason)
        except CommandEnded:
            early = _ended(job, ranks, clock)
            if early is not None:
                return [early] * job.world_size
            m = _measurement(clock, job.timing, "command ended")
        except _NoStep:
            seen = "no step" if clock.last_n == 0 else f"no step after step {clock.last_n}"
            raise InputError(
                f"{label}: reported {seen} within {job.timeout_s:.0f} s (expected a line 'ROTA_STEP <n>' on stdout "
                "after each step; see docs/profiling.md)",
                field="--command",
            ) from None
        startup_s = sum(t for _, t in clock.windows[: job.timing.warmup_steps])  # launch to the end of warm-up
        gpu = job.devices[0].startswith("cuda")
        peaks = [None if gpu or job.is_remote(r.rank) else _peak_rss_bytes(r.process.pid) for r in ranks]
    finally:
        _stop_all([r.process for r in ranks])
        for r in ranks:
            os.unlink(r.log)
    return [
        WorkerResult(
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
        for peak in peaks
    ]


def _ended(job: CommandJob, ranks: Sequence[_Rank], clock: ReportClock) -> WorkerResult | None:
    """A rank exited on its own: an oom result, an error, or (all exited 0 after timed windows) None."""
    label, command = job.spec.model, job.spec.options["command"]
    failed = [r for r in ranks if r.process.poll() not in (None, 0)]
    if not failed:  # a clean exit: the others should follow it within the grace time
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and any(r.process.poll() is None for r in ranks):
            time.sleep(0.05)
        failed = [r for r in ranks if r.process.poll() != 0]
    for rank in sorted(failed, key=lambda r: (r.exited_at, r.rank)):
        if rank.process.poll() is not None:
            result = rank.outcome(label, command)
            if result is not None:
                return result
    if failed:  # some ranks finished and the others ran on: not a whole-gang measurement
        running = ", ".join(str(r.rank) for r in failed)
        raise InputError(f"{label}: rank(s) {running} ran on after the others exited", field="--command")
    if len(clock.windows) <= job.timing.warmup_steps:
        raise InputError(
            f"{label}: exited after {clock.last_n} steps, before a timed window; "
            f"let it run longer than --warmup-steps {job.timing.warmup_steps} plus --budget",
            field="--command",
        )
    return None
