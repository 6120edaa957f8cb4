"""Atomic file writes: write a temp file next to the target, then rename.

A crash mid-write leaves the previous file (or nothing), never a partial one.
The file gets the permissions a plain `open(..., "w")` would give (0666 minus the
umask), not mkstemp's private 0600: schedules and state are read by launchers and
operators running under other accounts.

Files that belong together (a schedule and its CSV view, a round and the state
that planned it) are written with `atomic_paths` / `write_together`: every temp
file is created and written before any target is replaced (an unwritable folder
fails before anything changes), then the temps are renamed in the order given,
with SIGTERM, SIGINT and SIGHUP held back between the first and the last rename.
Put the file that commits the set last; only SIGKILL or a power cut can still
fall between two renames, and the files carry ids that let readers see it.

Temp files in flight are removed on any exit the process sees: an exception,
SIGTERM, SIGINT or SIGHUP (the handler removes them, then the process dies of the
signal as it would have: a shell reports 128+signo), or a normal interpreter exit.

Outputs never replace inputs: a target that this process read as an input (through
planner/formats/files.py) is refused with a one-line InputError, unless the writer is told
the target is meant to be updated in place (`in_place`: the state file that plan-next and
`rota run` read and rewrite, a table the profiler appends to); so is a target that exists
and is not a regular file (a device, a FIFO, a socket: writing would replace the node),
and a set that names one file twice.

Test hook: with ROTA_TEST_PAUSE_IN_WRITE set to a path, a writer that has written
its temp files prints one line to stderr and waits until that path exists before
renaming (tests use it to send signals to, or race, a process paused mid-write).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from planner.errors import InputError
from planner.formats.files import kind_of, note_written, would_overwrite

PAUSE_ENV = "ROTA_TEST_PAUSE_IN_WRITE"
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_in_flight: set[Path] = set()  # temp files this process has created and not yet renamed
_previous: dict[int, Any] = {}  # the handlers ours replaced, while any write is in flight
_depth = 0  # nested writes in flight (handlers are installed by the outermost)


def current_umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it; put it straight back
    os.umask(mask)
    return mask


def remove_in_flight() -> None:
    """Remove every temp file still in flight (signal handlers and exit call this)."""
    for tmp in list(_in_flight):
        with contextlib.suppress(OSError):
            tmp.unlink()
        _in_flight.discard(tmp)


atexit.register(remove_in_flight)


def _on_signal(signo: int, frame: FrameType | None) -> None:
    remove_in_flight()
    previous = _previous.get(signo, signal.SIG_DFL)
    if callable(previous) and previous is not signal.default_int_handler:
        previous(signo, frame)  # someone else's handler: it decides what happens next
        return
    # Die of the signal as if it had never been caught (exit status 128+signo in a shell).
    signal.signal(signo, signal.SIG_DFL)
    os.kill(os.getpid(), signo)


def _install_handlers() -> None:
    for signo in HANDLED_SIGNALS:
        current = signal.getsignal(signo)
        if current is signal.SIG_IGN:  # e.g. nohup: an ignored signal stays ignored
            continue
        _previous[signo] = current
        signal.signal(signo, _on_signal)


def _restore_handlers() -> None:
    for signo, handler in _previous.items():
        signal.signal(signo, handler if handler is not None else signal.SIG_DFL)
    _previous.clear()


@contextlib.contextmanager
def _cleanup_on_signals() -> Iterator[None]:
    """While a write is in flight, the handled signals first remove its temp files.
    Only the main thread can set handlers; elsewhere, exceptions and exit still clean up."""
    global _depth
    outermost = _depth == 0 and threading.current_thread() is threading.main_thread()
    if outermost:
        _install_handlers()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if outermost:
            _restore_handlers()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold the handled signals back (they are delivered at the end), so a set of renames
    is not cut in two by a SIGTERM. Only where the platform and thread allow it."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def check_targets(targets: Sequence[str | os.PathLike], in_place: Collection[str | os.PathLike] = ()) -> None:
    """InputError if a target is not a file that may be replaced: an input of this process
    (unless in `in_place`, compared as given), something other than a regular file, or a
    file named twice in the set. Folders are left to `_new_temp` (its OSError, as before)."""
    allowed = {Path(p) for p in in_place}
    seen: dict[tuple[int, int] | str, Path] = {}
    for raw in targets:
        target = Path(raw)
        try:
            st = os.stat(target)
        except OSError:
            st = None
        if st is not None:
            what = kind_of(st.st_mode)
            if what is not None and what != "a folder":
                raise InputError(f"is {what}; an output must be a regular file (give another path)", path=target)
            key: tuple[int, int] | str = (st.st_dev, st.st_ino)
        else:
            key = os.path.realpath(target)
        if key in seen:
            raise InputError(f"is the same file as the output {seen[key]} (give another path)", path=target)
        seen[key] = target
        if target not in allowed:
            source = would_overwrite(target)
            if source is not None:
                shown = "" if source == str(target) else f" {source}"
                raise InputError(f"would overwrite the input{shown} (give another output path)", path=target)


def _new_temp(target: Path) -> Path:
    """An empty temp file next to `target`; an OSError names the target, not the temp."""
    if target.is_dir():  # the rename would fail, after other files of the set had changed
        raise IsADirectoryError(errno.EISDIR, "is a folder, expected a file", str(target))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(target)) from None
    os.close(fd)
    return Path(tmp)


def _test_pause() -> None:
    flag = os.environ.get(PAUSE_ENV)
    if not flag:
        return
    print(f"rota: test hook: temp files written; waiting for {flag}", file=sys.stderr, flush=True)
    while not os.path.exists(flag):
        time.sleep(0.05)


@contextlib.contextmanager
def atomic_paths(
    targets: Sequence[str | os.PathLike], mode: int = 0o666, *, in_place: Collection[str | os.PathLike] = ()
) -> Iterator[list[Path]]:
    """Yield one temporary path per target; on success they replace the targets in the
    order given (the last one commits the set), with `mode` minus the umask. Every temp is
    created before the caller writes any, so an unwritable target fails before a change.
    `in_place`: targets (as given) that may replace a file this process read as an input."""
    paths = [Path(t) for t in targets]
    check_targets(paths, in_place)
    temps: list[Path] = []
    with _cleanup_on_signals():
        try:
            for target in paths:
                tmp = _new_temp(target)
                _in_flight.add(tmp)
                temps.append(tmp)
            yield temps
            _test_pause()
            for tmp in temps:
                os.chmod(tmp, mode & ~current_umask())
            with _signals_held():
                for tmp, target in zip(temps, paths, strict=True):
                    os.replace(tmp, target)
                    _in_flight.discard(tmp)
                    note_written(target)
        finally:
            for tmp in temps:
                if tmp in _in_flight:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
                    _in_flight.discard(tmp)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, mode: int = 0o666, *, replaces_input: bool = False) -> Iterator[Path]:
    """Yield a temporary path; on success it replaces `target` atomically, with `mode` minus the umask.
    `replaces_input`: `target` is meant to be updated in place (it may be an input of this process)."""
    with atomic_paths([target], mode, in_place=[target] if replaces_input else ()) as (tmp,):
        yield tmp


def write_together(
    files: Sequence[tuple[str | os.PathLike, str]], *, in_place: Collection[str | os.PathLike] = ()
) -> None:
    """Write (path, text) pairs as one set: all or, on any failure before the renames,
    none. Renamed in the order given: put the file that commits the set last.
    `in_place`: the paths (as given in `files`) meant to be updated in place."""
    with atomic_paths([path for path, _ in files], in_place=in_place) as temps:
        for tmp, (_, text) in zip(temps, files, strict=True):
            tmp.write_text(text, encoding="utf-8")


def write_text_atomic(target: str | os.PathLike, text: str, *, replaces_input: bool = False) -> None:
    write_together([(target, text)], in_place=[target] if replaces_input else ())


def write_with(target: str | os.PathLike, writer: Callable[[Path], None], *, replaces_input: bool = False) -> None:
    """Call `writer(tmp_path)` then move the result onto `target`."""
    with atomic_path(target, replaces_input=replaces_input) as tmp:
        writer(tmp)
