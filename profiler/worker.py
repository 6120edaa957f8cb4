"""The measuring side: runs in a fresh spawned process per measurement.

A fresh process per measurement isolates crashes and OOMs, gives each run its
own peak-memory reading, and keeps CUDA out of the parent. The worker builds the
workload, wraps it in DistributedDataParallel for data-parallel runs, times it
with `profiler.timing.measure` and sends one `WorkerResult` back over a pipe.

Peak memory: on CUDA, `torch.cuda.max_memory_allocated` (tensors only, after a
reset at start). On CPU, the process's peak resident set size
(`resource.getrusage(RUSAGE_SELF).ru_maxrss`) minus its resident size just
before the workload is built (/proc/self/statm), i.e. what the model, optimizer
state, batch and activations added on top of the interpreter and torch's own
libraries. It counts pages, not tensors, so it is an approximation; compare CPU
numbers with each other, not with CUDA ones.
"""

from __future__ import annotations

import importlib
import os
import resource
import signal
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from models.spec import BuildContext, load_builder
from profiler.restart import checkpoint_round_trip
from profiler.timing import CudaEventClock, HostClock, Solo, TimingConfig, measure
from profiler.workloads import WorkloadShapeError, as_built


@dataclass(frozen=True)
class WorkerJob:
    builder: str
    batch_size: int | None
    device: str  # "cpu" or "cuda:<index>"
    timing: TimingConfig
    scale: str = "full"
    options: Mapping[str, Any] = field(default_factory=dict)
    cpu_set: tuple[int, ...] = ()  # CPU cores to pin to; one thread per core
    rank: int = 0
    world_size: int = 1
    dist_init: str | None = None  # init_method for data-parallel runs
    parent_pid: int = 0
    log_path: str | None = None
    barrier_timeout_s: float = 600.0
    launched_at: float = 0.0  # time.monotonic() in the parent just before the process started
    restart_cost: bool = False  # solo runs: also time a checkpoint save and load
    import_from: str | None = None  # a user workload's folder, searched after the installed packages


@dataclass(frozen=True)
class WorkerResult:
    status: str  # ok | oom | failed | invalid (a user factory of the wrong shape: an error, not a row)
    message: str = ""
    steps_per_s: float = 0.0
    n_steps: int = 0
    step_time_median_s: float | None = None
    step_time_iqr_s: float | None = None
    samples_per_step: int = 0
    peak_memory_bytes: int | None = None
    stop_reason: str = ""
    windows: int = 0
    startup_s: float | None = None  # process start to the first timed step (solo runs)
    checkpoint_save_s: float | None = None
    checkpoint_load_s: float | None = None


def classify_failure(exc: BaseException) -> str:
    """'oom' for any out-of-memory flavour (CUDA, CPU allocator, MemoryError)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return "oom"
    text = str(exc).lower()
    return "oom" if ("out of memory" in text or "can't allocate memory" in text) else "failed"


def cpu_peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def cpu_current_rss_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0  # no /proc: report the whole peak


def worker_main(job: WorkerJob, conn, barrier=None, pair_state=None) -> None:
    """Process entry point. Never raises: every outcome becomes a WorkerResult."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and stops us
    if job.cpu_set and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, job.cpu_set)  # before torch starts its thread pools
    if job.log_path:
        log = os.open(job.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
    try:
        result = _run(job, barrier, pair_state)
    except WorkloadShapeError as exc:
        result = WorkerResult(status="invalid", message=str(exc)[:500])
    except BaseException as exc:  # noqa: BLE001 - reported, not raised
        traceback.print_exc()
        result = WorkerResult(status=classify_failure(exc), message=f"{type(exc).__name__}: {exc}"[:500])
    try:
        conn.send(result)
    except (BrokenPipeError, OSError):
        pass  # parent gone
    finally:
        conn.close()


def _coordinator(job: WorkerJob, barrier, pair_state, device):
    if pair_state is not None:
        from profiler.coordination import PairCoordinator

        return PairCoordinator(job.rank, barrier, pair_state, job.timing.budget_s, job.barrier_timeout_s)
    if job.world_size > 1:
        from profiler.coordination import DistributedCoordinator

        return DistributedCoordinator(device)
    return Solo()


def _run(job: WorkerJob, barrier, pair_state) -> WorkerResult:
    if job.import_from and job.import_from not in sys.path:
        sys.path.append(job.import_from)
    builder = load_builder(job.builder)  # imports torch for real workloads, not for fakes
    cuda = job.device.startswith("cuda")
    # None for torch-free workloads (the tests' fakes) on the CPU; a GPU always needs it, also
    # for a workload whose module imports torch only inside its builder.
    torch: Any = importlib.import_module("torch") if cuda else sys.modules.get("torch")
    if torch is not None:
        if job.cpu_set:
            torch.set_num_threads(len(job.cpu_set))
        torch.manual_seed(0)
    if torch is not None and not cuda:
        importlib.import_module("torch._dynamo")  # optimizers import it on first use; keep it out of the peak
    if cuda:
        torch.cuda.set_device(torch.device(job.device))
        torch.backends.cudnn.benchmark = True
        torch.cuda.reset_peak_memory_stats()
    baseline = 0 if cuda else cpu_current_rss_bytes()
    distributed = job.world_size > 1
    solo = not distributed and pair_state is None
    if distributed:
        import torch.distributed as dist

        place = GangPlace(job.rank, job.world_size, job.rank, job.world_size)
        os.environ.update(torchrun_environment(place))  # as a launcher's ranks see it
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            init_method=job.dist_init,
            rank=job.rank,
            world_size=job.world_size,
            timeout=timedelta(seconds=job.barrier_timeout_s),
        )
    try:
        ctx = BuildContext(job.batch_size, job.device, job.scale, dict(job.options))
        built = as_built(builder(ctx), ctx, job.builder)
        model = built.model
        if distributed and model is not None:  # a step callable does its own gradient exchange
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model, device_ids=[torch.device(job.device).index] if cuda else None)
        batch = built.make_batch()  # built once and reused: input-pipeline cost is not measured

        def step():
            built.train_step(model, batch)

        clock = CudaEventClock(job.device) if cuda else HostClock()
        parent = job.parent_pid
        m = measure(
            step,
            job.timing,
            clock,
            _coordinator(job, barrier, pair_state, job.device),
            abort=lambda: bool(parent) and os.getppid() != parent,
        )
        peak = torch.cuda.max_memory_allocated() if cuda else max(0, cpu_peak_rss_bytes() - baseline)
        restart = _restart_cost(job, built, m.began_at) if m.n_steps and solo else {}
    finally:
        if distributed:
            dist.destroy_process_group()  # `torch` may be None here: a workload that imports it lazily
    if m.n_steps == 0:
        return WorkerResult(
            status="failed", message="no timed window completed while all sides ran", stop_reason=m.stop_reason
        )
    return WorkerResult(
        status="ok",
        steps_per_s=m.steps_per_s,
        n_steps=m.n_steps,
        step_time_median_s=m.median,
        step_time_iqr_s=m.iqr,
        samples_per_step=built.samples_per_step,
        peak_memory_bytes=int(peak),
        stop_reason=m.stop_reason,
        windows=len(m.window_steps),
        **restart,
    )


@dataclass(frozen=True)
class GangPlace:
    """Where one rank of a gang sits, in torchrun's terms."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    group_rank: int = 0  # the node's number in the gang
    master_addr: str = "127.0.0.1"
    master_port: int | None = None  # None: no store to find (the profiler formed the group itself)


def torchrun_environment(place: GangPlace) -> dict[str, str]:
    """The variables torchrun gives a rank."""
    env = {
        "RANK": str(place.rank),
        "LOCAL_RANK": str(place.local_rank),
        "WORLD_SIZE": str(place.world_size),
        "LOCAL_WORLD_SIZE": str(place.local_world_size),
        "GROUP_RANK": str(place.group_rank),
        "MASTER_ADDR": place.master_addr,
    }
    if place.master_port is not None:
        env["MASTER_PORT"] = str(place.master_port)
    return env


def _restart_cost(job: WorkerJob, built, timing_began: float) -> dict:
    """startup_s always (solo); the checkpoint round trip when asked and there is state to save."""
    out: dict = {"startup_s": timing_began - job.launched_at} if job.launched_at else {}
    if job.restart_cost:
        torch: Any = sys.modules.get("torch")
        sync = torch.cuda.synchronize if job.device.startswith("cuda") else None
        times = checkpoint_round_trip(built.model, built.optimizer, job.device, sync=sync) if torch else None
        if times is not None:
            out.update(checkpoint_save_s=times.save_s, checkpoint_load_s=times.load_s)
    return out


__all__ = ["WorkerJob", "WorkerResult", "classify_failure", "worker_main"]
