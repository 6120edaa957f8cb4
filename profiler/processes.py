"""Start the processes of one measurement, watch them, collect their results.

Every measurement gets fresh spawned processes (spawn, not fork: CUDA cannot
be forked, and a fresh interpreter gives clean memory readings). If one
process of a group fails, dies or the group runs past its timeout, the others
are stopped at once: a pair or a data-parallel job is only measured whole.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from profiler.coordination import new_pair_state
from profiler.worker import WorkerJob, WorkerResult, worker_main

MODES = ("solo", "pair", "data_parallel")
_POLL_S = 0.2


def _context():
    return mp.get_context("spawn")


def _last_line(path: str | None) -> str:
    if not path or not os.path.exists(path):
        return ""
    lines = [line.strip() for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _died(process, log_path: str | None) -> WorkerResult:
    code = process.exitcode
    if code is not None and code == -signal.SIGKILL:
        # Nobody here sent SIGKILL, so it was most likely the kernel's OOM killer.
        return WorkerResult(status="oom", message="killed by SIGKILL (probably the kernel OOM killer)")
    detail = _last_line(log_path)
    return WorkerResult(
        status="failed", message=f"exited with code {code} before reporting" + (f" ({detail})" if detail else "")
    )


def _stop(processes) -> None:
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


class SigintHeld:
    """Hold Ctrl-C while a worker starts, then deliver it: never lost, never mid-start.

    Ignoring SIGINT around the start (as this once did) kept children safe but lost a Ctrl-C
    that came meanwhile. Instead, SIGINT is blocked in this thread: the child inherits the
    block through fork and exec, so it cannot die of a Ctrl-C before `_child_main` ignores
    it (the parent stops its children itself). In the parent a blocked SIGINT stays pending,
    or lands in another thread; a temporary handler records it either way, and on leaving
    it is raised again under the previous handler (KeyboardInterrupt by default), after the
    body has registered the started process, so that the caller's cleanup stops it.
    """

    def __init__(self, block: bool = True) -> None:
        self.block = block  # False for a command started with exec: it must not inherit a blocked SIGINT
        self.caught = False
        self.previous: signal.Handlers | int | Callable | None = None  # None: ours is not installed
        self.mask: set[int | signal.Signals] = set()

    def _record(self, signum, frame) -> None:
        self.caught = True

    def __enter__(self) -> SigintHeld:
        # Not in the main thread (signal.signal refuses), or under a handler set from C (which
        # could not be put back): only block; the signal then waits for the unblock, or goes to
        # the main thread, whose handler runs as it would have.
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not None:
            self.previous = signal.signal(signal.SIGINT, self._record)
        if self.block:
            self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        return self

    def __exit__(self, *exc) -> None:
        if self.block:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)  # a pending SIGINT is recorded here
        if self.previous is None:
            return
        signal.signal(signal.SIGINT, self.previous)
        if self.caught:
            signal.raise_signal(signal.SIGINT)  # as if it came now: KeyboardInterrupt, or what was set


def _child_main(*args) -> None:
    """The worker process's entry: SIGINT arrives blocked (see SigintHeld); ignore it, then unblock."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # discards a Ctrl-C that came while starting
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    worker_main(*args)


def run_group(
    jobs: Sequence[WorkerJob], mode: str, timeout_s: float, log_dir: str | os.PathLike | None = None
) -> list[WorkerResult]:
    """Run one measurement's processes; results in rank order, never raises on
    a worker's failure (KeyboardInterrupt stops the workers and propagates)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    if mode == "pair" and len(jobs) != 2:
        raise ValueError("a pair has exactly two jobs")
    ctx = _context()
    store_dir = tempfile.mkdtemp(prefix="rota-dist-") if mode == "data_parallel" else None
    barrier = ctx.Barrier(2) if mode == "pair" else None
    pair_state = new_pair_state(ctx) if mode == "pair" else None

    processes, conns, logs = [], [], []
    results: list[WorkerResult | None] = [None] * len(jobs)
    try:
        for rank, job in enumerate(jobs):
            log_path = str(Path(log_dir) / f"rank{rank}.log") if log_dir else None
            job = replace(
                job,
                rank=rank,
                world_size=len(jobs) if mode == "data_parallel" else 1,
                dist_init=f"file://{store_dir}/store" if store_dir else None,
                parent_pid=os.getpid(),
                log_path=log_path,
                launched_at=time.monotonic(),  # start-up is measured from here (system-wide clock)
            )
            receive, send = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=_child_main, args=(job, send, barrier, pair_state), name=f"rota-worker-{rank}", daemon=True
            )
            conns.append(receive)
            logs.append(log_path)
            try:
                with SigintHeld():  # a Ctrl-C meanwhile is raised once the process is in `processes`
                    process.start()
                    processes.append(process)
            finally:
                send.close()  # the child's end: a dead child shows up as EOF here
        if _collect(processes, conns, logs, results, timeout_s):
            _let_exit(processes)  # all reported: let them tear down (NCCL, files) on their own
    finally:
        _stop(processes)  # failures, timeouts, Ctrl-C: at once
        for c in conns:
            c.close()
        if store_dir:
            for leftover in Path(store_dir).glob("*"):
                leftover.unlink(missing_ok=True)
            os.rmdir(store_dir)
    return [r if r is not None else WorkerResult(status="failed", message="no result") for r in results]


def _let_exit(processes, grace_s: float = 10.0) -> None:
    deadline = time.monotonic() + grace_s
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))


def _collect(processes, conns, logs, results, timeout_s: float) -> bool:
    """Fill `results`; True when every process reported ok."""
    deadline = time.monotonic() + timeout_s
    while any(r is None for r in results):
        pending = [i for i, r in enumerate(results) if r is None]
        waitables = [conns[i] for i in pending] + [processes[i].sentinel for i in pending]
        mp.connection.wait(waitables, timeout=min(_POLL_S, max(0.0, deadline - time.monotonic())))
        for i in pending:
            if conns[i].poll():
                try:
                    results[i] = conns[i].recv()
                except EOFError:
                    processes[i].join(1.0)
                    results[i] = _died(processes[i], logs[i])
            elif not processes[i].is_alive():
                results[i] = _died(processes[i], logs[i])
        if any(r is not None and r.status != "ok" for r in results):
            _fill_stopped(results, "stopped: another process of this measurement failed")
            return False
        if time.monotonic() >= deadline:
            _fill_stopped(results, f"timed out after {timeout_s:.0f} s")
            return False
    return True


def _fill_stopped(results, message: str) -> None:
    for i, r in enumerate(results):
        if r is None:
            results[i] = WorkerResult(status="failed", message=message)
