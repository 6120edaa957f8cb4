"""Running sweep points in parallel, and stopping cleanly.

Points start in grid order with at most `limit` of them in flight, so that a point
can still be skipped when a lighter load of its policy and seed saturated while it
waited. Worker processes die with the sweep: on Linux the kernel kills them when
their parent goes (PR_SET_PDEATHSIG), and everywhere a watchdog thread ends a
worker whose parent changed. SIGTERM or SIGINT to the sweep stops it between
records: the workers are ended, the finished points stay in the results file and
the next run resumes from there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, TypeVar

P = TypeVar("P")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>


class SweepInterrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT reached the sweep; the points finished so far are recorded.
    A KeyboardInterrupt, so that `except Exception` does not swallow it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise SweepInterrupted (once; a second signal
    gets the previous handler). Outside the main thread signals cannot be caught: no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, handler)

    def handler(signum: int, frame: object) -> None:
        restore()
        raise SweepInterrupted(signum)

    for s in STOP_SIGNALS:
        signal.signal(s, handler)
    try:
        yield
    finally:
        restore()


def run_bounded(
    todo: Sequence[P],
    limit: int,
    skip: Callable[[P], bool],
    submit: Callable[[P], Future],
    finish: Callable[[P, Any], None],
) -> None:
    """Start the points of `todo` in order, at most `limit` at once (`skip(p)` is asked just
    before p would start); hand each result to `finish`, in grid order when several end together."""
    order = {id(p): i for i, p in enumerate(todo)}
    queue = deque(todo)
    running: dict[Future, P] = {}
    while queue or running:
        while queue and len(running) < limit:
            p = queue.popleft()
            if not skip(p):
                running[submit(p)] = p
        if not running:
            continue
        ended, _ = wait(running, return_when=FIRST_COMPLETED)
        for fut in sorted(ended, key=lambda f: order[id(running[f])]):
            finish(running.pop(fut), fut.result())


def run_in_processes(
    work: Callable[..., Any],
    args: Callable[[P], tuple],
    todo: Sequence[P],
    limit: int,
    skip: Callable[[P], bool],
    finish: Callable[[P, Any], None],
) -> None:
    """run_bounded with `work(*args(p))` in up to `limit` worker processes that die with this one.
    On any exception (SweepInterrupted included) the workers are ended at once, not awaited."""
    pool = ProcessPoolExecutor(max_workers=limit, initializer=worker_init, initargs=(os.getpid(),))
    try:
        run_bounded(todo, limit, skip, lambda p: pool.submit(work, *args(p)), finish)
    except BaseException:
        end_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def end_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's worker processes (their unfinished points run again on resume)."""
    # The executor has no public call for this before Python 3.14 (terminate_workers).
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        with contextlib.suppress(OSError, ValueError):
            proc.terminate()
    for proc in processes:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            proc.join(timeout=10)


# --------------------------------------------------------------------------- in the worker


def worker_init(sweep_pid: int, watch_interval_s: float = 1.0) -> None:
    """Initializer of every worker process: leave Ctrl-C to the sweep, die with it."""
    # Ctrl-C reaches the whole process group; the sweep decides what happens to its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    watch_parent(sweep_pid, watch_interval_s)


def die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent exits; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def watch_parent(sweep_pid: int, interval_s: float = 1.0) -> threading.Thread:
    """A daemon thread that ends this process once its parent changes (the parent died and
    the process was re-parented) or the sweep process `sweep_pid` is gone. Portable: the
    fallback where PR_SET_PDEATHSIG is missing, and it covers a parent that died before
    the worker could ask for the signal."""
    parent = os.getppid()

    def orphaned() -> bool:
        if os.getppid() != parent:
            return True
        try:
            os.kill(sweep_pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # exists, owned by someone else (a reused pid): the parent check still holds
        return False

    def watch() -> None:
        while not orphaned():
            time.sleep(interval_s)
        os._exit(1)  # the sweep is gone: nobody will read this point's result

    thread = threading.Thread(target=watch, name="rota-sweep-watchdog", daemon=True)
    thread.start()
    return thread
