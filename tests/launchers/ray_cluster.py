"""A CPU-only local Ray cluster that stands in for a GPU cluster, for the Ray launcher tests.

One `ray start --block` process per cluster node (the first is the head): each advertises the node's GPU
count (`--num-gpus`; Ray only counts them, nothing touches a GPU), the `accelerator_type:<T>` resource
Ray sets on real GPU nodes, and whatever per-node resources the exporter pins bundles with (by default
`node:<name>`). Every port is a free one and the session lives in a private temp folder, so it runs
beside any other Ray on the machine. `stop()` ends only the processes it started: each `--block`
process and its descendants, by pid (never `ray stop`, which kills every Ray process on the machine).

Each node's processes also see ROTA_TEST_NODE=<name> in their environment (set on its raylet, inherited
by its workers and so by the job commands), which tells a test where a job really ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass(frozen=True)
class FakeNode:
    name: str
    gpus: int
    accelerator: str  # the T of accelerator_type:T
    resources: dict[str, float] = field(default_factory=dict)  # extra custom resources


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    """pid -> child pids, from /proc."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def descendants(pid: int) -> list[int]:
    tree, out, frontier = _children(), [], [pid]
    while frontier:
        nxt = [c for p in frontier for c in tree.get(p, [])]
        out += nxt
        frontier = nxt
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# what `ray start --block` prints once its node is up and registered
READY = b"This command will now block forever"


class LocalRayCluster:
    def __init__(
        self,
        nodes: list[FakeNode],
        *,
        ray_bin: str | None = None,
        node_resource: str = "node:",
        env: dict[str, str] | None = None,
    ):
        self.nodes = nodes
        self.env = env or {}  # more environment for every node (RAY_AUTH_MODE=token and its token)
        self.ray = ray_bin or str(Path(sys.executable).with_name("ray"))
        self.node_resource = node_resource
        self.temp_dir = tempfile.mkdtemp(prefix="rota-ray-")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.known: set[int] = set()  # every pid seen under our processes, for stop()

    def _command(self, node: FakeNode, head: bool) -> list[str]:
        resources = {f"accelerator_type:{node.accelerator}": 1, f"{self.node_resource}{node.name}": 1, **node.resources}
        cmd = [self.ray, "start", "--block", "--disable-usage-stats", "--num-cpus", "2"]
        cmd += ["--num-gpus", str(node.gpus), "--resources", json.dumps(resources)]
        cmd += ["--object-store-memory", str(80 * 1024 * 1024), "--node-ip-address", "127.0.0.1"]
        for option in (
            "--node-manager-port",
            "--object-manager-port",
            "--metrics-export-port",
            "--dashboard-agent-listen-port",
            "--dashboard-agent-grpc-port",
            "--runtime-env-agent-port",
        ):
            cmd += [option, str(free_port())]
        if head:
            cmd += ["--head", "--port", str(self.port), "--include-dashboard", "false", "--temp-dir", self.temp_dir]
            cmd += ["--ray-client-server-port", str(free_port())]
        else:
            cmd += ["--address", self.address]
        return cmd

    def _start_node(self, node: FakeNode, head: bool) -> None:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "ROTA_TEST_NODE": node.name, **self.env}
        env.pop("RAY_ADDRESS", None)
        log = open(Path(self.temp_dir) / f"start-{node.name}.log", "wb")  # noqa: SIM115 (closed with the process)
        self.procs.append(
            subprocess.Popen(
                self._command(node, head), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.temp_dir
            )
        )
        log.close()

    def start(self, timeout_s: float = 120) -> None:
        """One node after the other (all at once overloads a small machine's GCS)."""
        for k, node in enumerate(self.nodes):
            self._start_node(node, head=k == 0)
            self._wait(node, timeout_s)

    def _wait(self, node: FakeNode, timeout_s: float) -> None:
        """Until `ray start --block` says its node is up (it prints READY once the node has joined)."""
        proc, log = self.procs[-1], Path(self.temp_dir) / f"start-{node.name}.log"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._remember()
            if proc.poll() is not None:
                raise RuntimeError(f"ray start for {node.name} exited with {proc.returncode}: {self.log_tail()}")
            if READY in log.read_bytes():
                return
            time.sleep(0.5)
        raise RuntimeError(f"Ray node {node.name} did not come up in {timeout_s:g} s: {self.log_tail()}")

    def log_tail(self) -> str:
        tails = []
        for path in sorted(Path(self.temp_dir).glob("start-*.log")):
            tails.append(f"{path.name}: {path.read_text(errors='replace')[-800:]}")
        return "\n".join(tails)

    def _remember(self) -> None:
        for p in self.procs:
            self.known.add(p.pid)
            self.known.update(descendants(p.pid))

    def stop(self) -> None:
        """SIGTERM to each `ray start --block` (it stops its own daemons), then SIGKILL to whatever of
        ours is left: the pids started here and every descendant seen while they ran."""
        self._remember()
        for p in reversed(self.procs):  # workers before the head
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for _ in range(3):
            self._remember_orphans()
            left = [pid for pid in self.known if _alive(pid)]
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        for p in self.procs:
            if p.poll() is None:
                p.wait(timeout=5)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def raylet_pid(self, name: str) -> int:
        """The pid of node `name`'s raylet (a descendant of its `ray start --block`)."""
        proc = self.procs[[n.name for n in self.nodes].index(name)]
        for pid in descendants(proc.pid):
            try:
                argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if argv0.endswith(b"/raylet"):
                return pid
        raise RuntimeError(f"no raylet found under node {name}")

    def kill_raylet(self, name: str) -> int:
        """SIGKILL node `name`'s raylet (a node lost mid-round); returns its pid."""
        self._remember()
        pid = self.raylet_pid(name)
        os.kill(pid, signal.SIGKILL)
        return pid

    def _remember_orphans(self) -> None:
        """Descendants of known pids that are still alive (workers whose raylet just went)."""
        for pid in list(self.known):
            if _alive(pid):
                self.known.update(descendants(pid))

    def __enter__(self) -> LocalRayCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def running_cluster(nodes: list[FakeNode], what: str, env: dict[str, str] | None = None) -> Iterator[LocalRayCluster]:
    """The body of a module's `ray_cluster` fixture: a started cluster of `nodes` (`env`: more
    environment for its nodes), stopped after the module; the module's tests skip, saying why
    (`what`: "the Ray launcher tests"), where ray cannot be imported or the cluster does not start."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        print(f"skipping {what}: ray cannot be imported ({exc})")
        pytest.skip(f"ray cannot be imported: {exc}")
    with without_auth_token():
        cluster = LocalRayCluster(nodes, env=env)
        started = time.monotonic()
        try:
            cluster.start()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            cluster.stop()
            print(f"skipping {what}: a local Ray cluster did not start ({exc})")
            pytest.skip(f"a local Ray cluster did not start: {exc}")
        print(f"local Ray cluster of {len(nodes)} nodes up in {time.monotonic() - started:.1f} s")
        try:
            yield cluster
        finally:
            cluster.stop()


@contextlib.contextmanager
def without_auth_token() -> Iterator[None]:
    """No token authentication for the test cluster, said in this process's environment (the
    cluster's nodes and every client the tests start inherit it). Left to itself, a `ray start`
    head turns token authentication on when it finds ~/.ray/auth_token (one that an earlier local
    `ray.init()` on the machine wrote), while clients stay without a token: every connection was
    refused. A client's mode is read once per process, so the tests' own clients stay as they are."""
    saved = {key: os.environ.get(key) for key in AUTH_VARIABLES}
    for key in AUTH_VARIABLES:
        os.environ.pop(key, None)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def processes_with_env(key: str, value: str) -> list[int]:
    """Pids of the live processes whose environment holds key=value (a test's marker), from /proc."""
    needle = f"{key}={value}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(int(entry)):
            out.append(int(entry))
    return out
