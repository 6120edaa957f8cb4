"""`rota sweep --ray`: the points as Ray tasks give the process pool's records and files.

The cluster is a CPU-only Ray head this module starts (`ray start --head --block` in
its own session, every port chosen free) and stops again by the pids of that session
only: other Ray clusters on the machine are left alone (no `ray stop`).
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT
from test_trace import synthetic_table

from planner.errors import InputError
from planner.formats.table import write_table
from planner.modes.sweep import SweepSpec, run_sweep
from tests.launchers.ray_cluster import without_auth_token

START_BOUND_S = 120.0  # generous: the head starts in ~10 s on an idle 2-core machine
TIMING = ("wall_s", "solver_s", "jobs_per_wall_s")  # measured, so they differ between runs
PORT_OPTIONS = (
    "--port",
    "--ray-client-server-port",
    "--dashboard-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
    "--node-manager-port",
    "--object-manager-port",
)


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _session_pids(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (the head's session: it and what it started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                pids.append(int(entry.name))
    return pids


def _stop(head: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, to each process of the head's own session, by pid."""
    for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):  # a throwaway cluster: no need to wait
        for pid in _session_pids(head.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while _session_pids(head.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if head.poll() is None:
            try:
                head.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        if not _session_pids(head.pid):
            return


@pytest.fixture(scope="module")
def ray_head():
    """The address (HOST:PORT) of a fresh 2-CPU Ray head, stopped after the module."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    if not Path("/proc/self/stat").exists():
        pytest.skip("stopping only this test's Ray processes needs Linux /proc")
    ray_bin = Path(sys.executable).with_name("ray")
    # Short: Ray's unix sockets live under it and their paths must stay under 108 bytes.
    temp_dir = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))
    ports = dict(zip(PORT_OPTIONS, _free_ports(len(PORT_OPTIONS))))
    command = [str(ray_bin), "start", "--head", "--block", f"--temp-dir={temp_dir}", "--num-cpus=2"]
    command += ["--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats"]
    command += [f"{option}={port}" for option, port in ports.items()]
    with without_auth_token():  # a token file left in ~/.ray must not turn auth on
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("RAY_ADDRESS", None)
        log = temp_dir / "start.log"
        with log.open("w") as f:
            head = subprocess.Popen(command, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + START_BOUND_S
            while "Ray runtime started" not in log.read_text(errors="replace"):
                if head.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text(errors="replace")[-2000:]
                    print(f"ray start did not come up (exit {head.poll()}):\n{tail}")
                    pytest.skip("a local Ray head could not be started (its log is printed above)")
                time.sleep(0.2)
            yield f"127.0.0.1:{ports['--port']}"
        finally:
            _stop(head)
            shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def table_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("table") / "t.csv"
    write_table(synthetic_table(), path)
    return str(path)


@pytest.fixture(scope="module")
def pool(table_path, tmp_path_factory) -> Path:
    """The grid swept by two worker processes: what Ray must reproduce."""
    out = tmp_path_factory.mktemp("pool")
    run_sweep(_spec(table_path), out, jobs=2)
    return out


def _spec(table_path: str) -> SweepSpec:
    return SweepSpec(
        table=table_path,
        cluster="v100=4,k80=4",
        policies=["fifo_perf", "max_min_fairness_perf"],
        seeds=[0, 1],
        rates=[0.05, 0.1],
        window=(5, 15),
    )


def _untimed(out: Path) -> dict[str, dict]:
    """The results file's records by key, without their timing fields; every line must parse."""
    records = {}
    for line in (out / "results.jsonl").read_text().split("\n")[:-1]:
        r = json.loads(line)
        for k in TIMING:
            (r["metrics"] or {}).pop(k, None)
        records[r["key"]] = r
    return records


def _jobs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "jobs").iterdir())}


def _rota(args: list[str]) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-m", "planner.cli", *args]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)


def test_ray_sweep_writes_what_the_process_pool_writes(ray_head, table_path, pool, tmp_path):
    grid = ["-t", table_path, "-c", "v100=4,k80=4", "-p", "fifo_perf,max_min_fairness_perf"]
    grid += ["--seeds", "0,1", "--rates", "0.05,0.1", "--window", "5:15", "--no-plots", "--json"]
    on_ray = tmp_path / "ray"
    done = _rota(["sweep", *grid, "--ray", ray_head, "--out", str(on_ray)])
    assert done.returncode == 0, done.stderr
    assert len(_untimed(pool)) == 8
    assert _untimed(on_ray) == _untimed(pool)
    assert _jobs(on_ray) == _jobs(pool)
    assert (on_ray / "sweep.json").read_text() == (pool / "sweep.json").read_text()


def test_ray_sweep_resumes_on_the_cluster_in_ray_address(ray_head, table_path, pool, tmp_path, monkeypatch):
    """In this process, `auto` finds the cluster through RAY_ADDRESS; three records are kept,
    a torn fourth is cut away and its point runs again with the five missing ones."""
    import ray

    out = tmp_path / "ray"
    out.mkdir()
    shutil.copy(pool / "sweep.json", out)
    lines = (pool / "results.jsonl").read_text().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(lines[:3]) + lines[3][:50])
    (out / "jobs").mkdir()
    for line in lines[:3]:
        name = json.loads(line)["key"] + ".csv"
        shutil.copy(pool / "jobs" / name, out / "jobs" / name)
    monkeypatch.setenv("RAY_ADDRESS", ray_head)
    warnings: list[str] = []
    records = run_sweep(_spec(table_path), out, ray_address="auto", on_warning=warnings.append)
    assert not ray.is_initialized()  # connected for the sweep, and disconnected after it
    torn_key = json.loads(lines[3])["key"]
    cut = f"{out / 'results.jsonl'}: line 4 was cut off (a killed run?); removed it, point {torn_key} runs again"
    assert warnings == [cut]
    assert _untimed(out) == _untimed(pool)
    assert list(_untimed(out))[:3] == [json.loads(line)["key"] for line in lines[:3]]  # kept, not rerun
    assert (out / "results.jsonl").read_text().startswith("".join(lines[:3]))
    assert _jobs(out) == _jobs(pool)  # the five points run on Ray wrote the same per-job CSVs
    assert [r["key"] for r in records] == [p.key for p in _spec(table_path).points()]


def test_ray_sweep_uses_the_callers_connection(ray_head, table_path, pool, tmp_path):
    import ray

    ray.init(address=ray_head, log_to_driver=False)
    try:
        run_sweep(_spec(table_path), tmp_path / "ray", ray_address="auto", jobs=1)
        assert ray.is_initialized()  # connected by the caller: left open
    finally:
        ray.shutdown()
    assert _untimed(tmp_path / "ray") == _untimed(pool)
    assert _jobs(tmp_path / "ray") == _jobs(pool)


def test_missing_ray_is_one_line_with_the_install_hint(monkeypatch, table_path, tmp_path):
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(InputError) as info:
        run_sweep(_spec(table_path), tmp_path / "sw", ray_address="auto")
    assert str(info.value) == "field '--ray': --ray needs Ray, which is not installed (pip install 'rota[ray]')"
    assert not (tmp_path / "sw").exists()  # nothing written before the error
