"""Run a `rota` command (or a Python snippet) in a real process that pauses mid-write.

With ROTA_TEST_PAUSE_IN_WRITE (planner/formats/atomic.py) a writer that has written its
temp files prints a line and waits until a "go" file exists: a test can then send the
process a signal, or start a second process against the same files, at a known point.
Timeouts here only stop a hung test; nothing is asserted about how long anything takes.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HUNG_S = 300  # only to fail a hung test instead of blocking the suite
PAUSED = "rota: test hook: temp files written"


class Running:
    """A child process whose stderr lines are collected as they come."""

    def __init__(self, args: list[str], cwd: Path, pause_until: Path | None = None):
        env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")
        env.pop("ROTA_TEST_PAUSE_IN_WRITE", None)
        if pause_until is not None:
            env["ROTA_TEST_PAUSE_IN_WRITE"] = str(pause_until)
        self.stdout_path = cwd / f".stdout-{id(self)}"
        with open(self.stdout_path, "w") as stdout:
            self.proc = subprocess.Popen(
                args, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True, start_new_session=True
            )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for_line(self, start: str) -> str:
        """The first stderr line starting with `start`; AssertionError if the process ends first."""
        while True:
            line = self.lines.get(timeout=HUNG_S)
            if line is None:
                raise AssertionError(f"process ended without printing {start!r}; stderr: {self.seen}")
            self.seen.append(line)
            if line.startswith(start):
                return line

    def finish(self) -> tuple[int, str, str]:
        """(return code, stdout, all stderr)."""
        code = self.proc.wait(timeout=HUNG_S)
        while (line := self.lines.get(timeout=HUNG_S)) is not None:
            self.seen.append(line)
        return code, self.stdout_path.read_text(), "\n".join(self.seen)


def rota(*args: str) -> list[str]:
    return [sys.executable, "-m", "planner.cli", *args]


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def debris(folder: Path) -> list[str]:
    """Temp files left in `folder` by an atomic write."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))
