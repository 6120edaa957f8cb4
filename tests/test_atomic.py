"""Atomic writes: nothing partial on failure, and the permissions the umask allows."""

from __future__ import annotations

import os
import stat

import pytest

from planner.formats.atomic import atomic_path, write_text_atomic, write_with


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
