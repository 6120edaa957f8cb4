"""Sweep points as Ray tasks on an existing Ray cluster (`rota sweep --ray ADDRESS|auto`).

The tasks only compute: the table, the cluster and the trace are read here and sent
once to the object store, and each task returns its point's record and per-job rows,
so the nodes need rota installed but none of the sweep's files. This process writes
the per-job CSVs and appends the records as tasks finish, exactly as the process
pool does. Ray is optional and imported only here.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

from planner.errors import InputError
from planner.modes.sweep_workers import P, run_bounded

INSTALL_HINT = "pip install 'rota[ray]'"


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError(f"--ray needs Ray, which is not installed ({INSTALL_HINT})", field="--ray") from None
    return ray


@contextlib.contextmanager
def connected(address: str, connect: Callable[..., str | None] | None = None) -> Iterator[Any]:
    """Ray, connected to the cluster at `address` ('auto': RAY_ADDRESS, else the cluster
    running on this machine). Never starts a cluster; a connection made by the caller is
    used as it is and left open. `connect(address, **ray.init options)`, if given, connects
    instead of ray.init and returns the one line to show when the cluster refuses this process
    (the CLI passes the Ray driver's `connect_ray`, which tells a missing authentication token
    at once; this stage cannot import the export stage)."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    _answers(address)
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    try:
        if connect is None:
            ray.init(address=address, **options)
            refused = None
        else:
            refused = connect(address, **options)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot connect to the Ray cluster at {address!r}: {first}", field="--ray") from None
    if refused:  # a cluster with token authentication, and no token (or a wrong one) here
        raise InputError(refused, field="--ray")
    try:
        yield ray
    finally:
        ray.shutdown()


def _answers(address: str, timeout_s: float = 10.0) -> None:
    """HOST:PORT must accept a connection: ray.init retries an address nobody answers for minutes."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return  # 'auto', a client URL or no port: Ray's own lookup
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"cannot connect to the Ray cluster at {address!r}: {reason}", field="--ray") from None


def cluster_cpus(ray: Any) -> int:
    """How many points the cluster can run at once (one CPU each)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def run_on_ray(
    ray: Any,
    task: Callable[..., Any],
    inputs: object,
    args: Callable[[P], tuple],
    todo: Sequence[P],
    limit: int,
    skip: Callable[[P], bool],
    finish: Callable[[P, Any], None],
) -> None:
    """run_bounded with `task(*args(p), inputs)` as one-CPU Ray tasks; `inputs` goes to the
    object store once. On any exception (SweepInterrupted included) the tasks in flight
    are cancelled."""
    remote = ray.remote(num_cpus=1, max_retries=0)(task)
    shared = ray.put(inputs)
    refs: dict[Future, Any] = {}

    def submit(p: P) -> Future:
        ref = remote.remote(*args(p), shared)
        fut = ref.future()
        refs[fut] = ref
        return fut

    try:
        run_bounded(todo, limit, skip, submit, finish)
    except BaseException:
        for fut, ref in refs.items():
            if not fut.done():
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
        raise
