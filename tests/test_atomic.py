"""Atomic writes: nothing partial on failure, and the permissions the umask allows; files written
together; no temp file left by an exception or a signal (real signals to a real process)."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest
from conftest import DATA
from paused_process import PAUSED, Running, debris, python, rota

from planner.formats.atomic import HANDLED_SIGNALS, atomic_path, write_text_atomic, write_together, write_with


@pytest.fixture
def umask():
    def use(mask: int) -> None:
        os.umask(mask)

    old = os.umask(0o022)
    os.umask(old)
    yield use
    os.umask(old)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_follow_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    target = tmp_path / "schedule.json"
    write_text_atomic(target, "{}\n")
    assert stat.S_IMODE(target.stat().st_mode) == expected
    plot = tmp_path / "figure.png"
    write_with(plot, lambda tmp: tmp.write_bytes(b"png"))
    assert stat.S_IMODE(plot.stat().st_mode) == expected


def test_executable_mode_minus_umask(tmp_path, umask):
    umask(0o027)
    target = tmp_path / "driver.sh"
    with atomic_path(target, mode=0o777) as tmp:
        tmp.write_text("#!/bin/sh\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o750


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "state.json"
    target.write_text("old")

    def boom(tmp):
        tmp.write_text("half")
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        write_with(target, boom)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


# ----------------------------------------------------------------- files written together


def test_write_together_writes_every_file(tmp_path):
    a, b = tmp_path / "round.csv", tmp_path / "sub" / "round.json"
    write_together([(a, "csv\n"), (b, "json\n")])
    assert a.read_text() == "csv\n" and b.read_text() == "json\n"
    assert debris(tmp_path) == [] and debris(tmp_path / "sub") == []


def test_an_unwritable_target_changes_nothing(tmp_path):
    """Every temp is made before anything is replaced: a bad second target leaves the first as it was."""
    first = tmp_path / "schedule.json"
    first.write_text("old")
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file" / "schedule.csv", tmp_path):  # under a file; a folder
        with pytest.raises(OSError) as caught:
            write_together([(first, "new"), (bad, "csv")])
        assert caught.value.filename == str(bad)
        assert first.read_text() == "old"
        assert debris(tmp_path) == []


def test_renames_follow_the_order_given(tmp_path, monkeypatch):
    """A crash between two renames (SIGKILL, power cut) leaves the first file new and the last one
    old: the caller puts the file that commits the set last."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("old a")
    b.write_text("old b")
    real = os.replace
    calls = []

    def replace_then_die(src, dst):
        calls.append(Path(dst).name)
        if len(calls) == 2:
            raise OSError(5, "power cut", str(dst))
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace_then_die)
    with pytest.raises(OSError):
        write_together([(a, "new a"), (b, "new b")])
    assert calls == ["a", "b"]
    assert a.read_text() == "new a" and b.read_text() == "old b"
    assert debris(tmp_path) == []


def test_handlers_are_restored_after_a_write(tmp_path):
    before = {s: signal.getsignal(s) for s in HANDLED_SIGNALS}
    write_text_atomic(tmp_path / "x", "x")
    assert {s: signal.getsignal(s) for s in HANDLED_SIGNALS} == before


# ----------------------------------------------------------------- signals


WRITER = """
import sys
from planner.formats.atomic import write_together
write_together([(sys.argv[1], "new csv"), (sys.argv[2], "new json")])
"""


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_mid_write_leaves_no_temp_and_the_old_files(tmp_path, signo):
    csv, doc = tmp_path / "x.csv", tmp_path / "x.json"
    csv.write_text("old csv")
    doc.write_text("old json")
    child = Running([*python(WRITER), str(csv), str(doc)], tmp_path, pause_until=tmp_path / "go")
    child.wait_for_line(PAUSED)
    assert len(debris(tmp_path)) == 2  # the temps exist while it is paused
    os.kill(child.proc.pid, signo)
    code, _, err = child.finish()
    assert code == -signo, err  # died of the signal: a shell reports 128+signo
    assert debris(tmp_path) == []
    assert csv.read_text() == "old csv" and doc.read_text() == "old json"


def test_an_ignored_signal_stays_ignored(tmp_path):
    """Under nohup SIGHUP is ignored: the write goes on and completes."""
    code = "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN)\n" + WRITER
    csv, doc = tmp_path / "x.csv", tmp_path / "x.json"
    child = Running([*python(code), str(csv), str(doc)], tmp_path, pause_until=tmp_path / "go")
    child.wait_for_line(PAUSED)
    os.kill(child.proc.pid, signal.SIGHUP)
    (tmp_path / "go").touch()
    status, _, err = child.finish()
    assert status == 0, err
    assert csv.read_text() == "new csv" and doc.read_text() == "new json"
    assert debris(tmp_path) == []


def test_rota_plan_killed_mid_write_keeps_the_old_schedule(tmp_path):
    out, csv = tmp_path / "schedule.json", tmp_path / "schedule.csv"
    out.write_text("old json")
    csv.write_text("old csv")
    args = ["plan", "-t", str(DATA / "throughputs.csv"), "-j", str(DATA / "jobs.csv"), "-c", str(DATA / "cluster.yaml")]
    child = Running(rota(*args, "--rounds", "2", "--out", str(out), "--csv", str(csv)), tmp_path, tmp_path / "go")
    child.wait_for_line(PAUSED)
    os.kill(child.proc.pid, signal.SIGTERM)
    code, _, err = child.finish()
    assert code == -signal.SIGTERM, err
    assert debris(tmp_path) == []
    assert out.read_text() == "old json" and csv.read_text() == "old csv"
