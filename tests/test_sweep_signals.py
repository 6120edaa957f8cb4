"""Sweep workers die with the sweep; SIGTERM stops a sweep and keeps what finished.

Real `rota sweep --workers 2` processes on a grid with two quick points (2 jobs)
and two slow ones (200 jobs, several seconds each). The waits below are
generous bounds on correctness checks, not timing targets.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from test_trace import synthetic_table

from planner.formats.table import write_table
from planner.modes.sweep import load_results

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc to find processes")

BOUND_S = 60.0


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[1] == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")  # a zombie has exited; only its reaping is left


def _wait_for(condition, what: str, bound_s: float = BOUND_S):
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"not within {bound_s:.0f} s: {what}")


def _records(out: Path) -> int:
    path = out / "results.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def _start_sweep(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """`rota sweep` in a child process; its stderr goes to tmp_path/stderr (a file, not a pipe:
    a worker left behind would hold a pipe open)."""
    table = tmp_path / "t.csv"
    write_table(synthetic_table(), table)
    out = tmp_path / "sw"
    command = [sys.executable, "-m", "planner.cli", "sweep", "-t", str(table), "-c", "v100=4,k80=4"]
    command += ["-p", "max_min_fairness,max_min_fairness_perf", "--static-jobs", "2,200", "--workers", "2"]
    command += ["--out", str(out), "--no-plots"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with (tmp_path / "stderr").open("w") as stderr:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    return proc, out


def _workers_once_quick_points_are_in(proc: subprocess.Popen, out: Path) -> list[int]:
    """The sweep's child processes, once the two quick points are recorded (the slow ones are then running)."""
    _wait_for(lambda: _records(out) >= 2 or proc.poll() is not None, "the two quick points recorded")
    assert proc.poll() is None, (out.parent / "stderr").read_text()
    workers = _children(proc.pid)
    assert len(workers) >= 2, workers  # --workers 2
    return workers


def test_workers_exit_when_the_sweep_is_killed(tmp_path):
    proc, out = _start_sweep(tmp_path)
    workers: list[int] = []
    try:
        workers = _workers_once_quick_points_are_in(proc, out)
        proc.kill()  # SIGKILL: the sweep gets no chance to clean up
        proc.wait(timeout=BOUND_S)
        _wait_for(lambda: not any(_alive(w) for w in workers), f"workers {workers} gone after the sweep was killed")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for w in workers:  # after a failure: leave nothing running
            if _alive(w):
                os.kill(w, signal.SIGKILL)
    assert len(load_results(out)) == 2  # what finished before the kill is kept


def test_sigterm_stops_the_sweep_and_keeps_what_finished(tmp_path):
    proc, out = _start_sweep(tmp_path)
    try:
        workers = _workers_once_quick_points_are_in(proc, out)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = (tmp_path / "stderr").read_text()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    kept = load_results(out)
    assert 2 <= len(kept) < 4  # the quick points; the slow ones were stopped (one may have just finished)
    assert f"stopped by SIGTERM: {len(kept)} of 4 points are in {out / 'results.jsonl'}" in stderr
    assert "Traceback" not in stderr
    assert not any(_alive(w) for w in workers)  # ended before the sweep exited, not left behind
    lines = (out / "results.jsonl").read_text().splitlines()
    assert all(json.loads(line)["key"] in kept for line in lines)  # every line whole
    assert all((out / "jobs" / f"{key}.csv").exists() for key in kept)


def test_watchdog_ends_a_worker_whose_parent_died(tmp_path):
    """The portable fallback alone (no PR_SET_PDEATHSIG): a grandchild running watch_parent
    exits once its parent is killed."""
    ready = tmp_path / "watching"
    grandchild = (
        "import os, sys, time; from planner.modes.sweep_workers import watch_parent; "
        "watch_parent(os.getppid(), 0.1); open(sys.argv[1], 'w').close(); time.sleep(600)"
    )
    script = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {grandchild!r}, {str(ready)!r}]); time.sleep(600)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        _wait_for(ready.exists, "the grandchild watching its parent")
        (child,) = _children(parent.pid)
        parent.kill()
        parent.wait(timeout=BOUND_S)
        _wait_for(lambda: not _alive(child), "the watching grandchild gone after its parent was killed")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
