"""Atomic file writes: write a temp file next to the target, then rename.

A crash mid-write leaves the previous file (or nothing), never a partial one.
The file gets the permissions a plain `open(..., "w")` would give (0666 minus the
umask), not mkstemp's private 0600: schedules and state are read by launchers and
operators running under other accounts.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def current_umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it; put it straight back
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, mode: int = 0o666) -> Iterator[Path]:
    """Yield a temporary path; on success it replaces `target` atomically, with `mode` minus the umask."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, mode & ~current_umask())
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(target: str | os.PathLike, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_with(target: str | os.PathLike, writer: Callable[[Path], None]) -> None:
    """Call `writer(tmp_path)` then move the result onto `target`."""
    with atomic_path(target) as tmp:
        writer(tmp)
