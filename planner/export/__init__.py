"""Schedule exports for external launchers: Slurm, Kubernetes, Ray and a flat CSV.

`export_schedule(format, context, out_dir, **options)` writes the files and
returns their paths; `load_context` reads a schedule with its cluster and the
command of every job (see common.py). Each format is one entry of `REGISTRY`:
its module is imported only when that format is exported.

An export is written whole or not at all: the exporter builds every file in a
temporary folder next to `out_dir` (same file system), and only once all are
written are they renamed into `out_dir` one by one (files already there that the
export does not write stay), with SIGINT, SIGTERM and SIGHUP held back during the
renames. An error or a signal before that leaves `out_dir` as it was and removes
the temporary folder; a signal raises ExportInterrupted after that clean-up. A file
in the way of a folder the export needs (or a folder where it writes a file) is
found before the first rename.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from planner.errors import InputError
from planner.export.common import ExportContext, load_context


class Exporter(Protocol):
    """Writes one format's files for a schedule under `out_dir`; returns their paths.
    Options another format takes are ignored."""

    def __call__(self, context: ExportContext, out_dir: Path, **options: Any) -> list[Path]: ...


@dataclass(frozen=True)
class ExportFormat:
    name: str
    module: str  # where the exporter lives
    function: str  # its name there
    aliases: tuple[str, ...] = ()

    def exporter(self) -> Exporter:
        exporter: Exporter = getattr(importlib.import_module(self.module), self.function)
        return exporter


REGISTRY: dict[str, ExportFormat] = {
    f.name: f
    for f in (
        ExportFormat("slurm", "planner.export.slurm", "export_slurm"),
        ExportFormat("kubernetes", "planner.export.kubernetes", "export_kubernetes", aliases=("k8s",)),
        ExportFormat("ray", "planner.export.ray", "export_ray"),
        ExportFormat("csv", "planner.export.flat_csv", "export_csv", aliases=("flat-csv", "flat_csv")),
    )
}
FORMATS = tuple(REGISTRY)
_ALIASES = {alias: f.name for f in REGISTRY.values() for alias in f.aliases}


def canonical_format(name: str) -> str:
    """The format's registered name (aliases and any case accepted), or InputError."""
    name = name.strip().lower()
    name = _ALIASES.get(name, name)
    if name not in REGISTRY:
        raise InputError(f"unknown export format {name!r}; choose one of: {', '.join(FORMATS)}", field="FORMAT")
    return name


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class ExportInterrupted(KeyboardInterrupt):
    """A signal stopped an export before its files were moved into place; nothing was changed.
    A KeyboardInterrupt, so that `except Exception` does not swallow it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def export_schedule(fmt: str, context: ExportContext, out_dir: str | Path, **options: Any) -> list[Path]:
    """Write the format's files into `out_dir`, all of them or none (see the module's doc)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("exists and is not a folder: give a folder for the launcher files", path=out_dir)
    exporter = REGISTRY[canonical_format(fmt)].exporter()
    stage = _new_stage(out_dir)
    try:
        with _signals_raise():
            built = exporter(context, stage, **options)
            rels = [path.relative_to(stage) for path in built]
            _check_way(out_dir, rels)
            held = _hold_signals()  # from here to the last rename: the renames are not cut in two
        try:
            written = _rename_all(stage, out_dir, rels)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
            _release_signals(held)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _note_stale_rounds(context, out_dir, written)
    return written


def _new_stage(out_dir: Path) -> Path:
    """A temporary folder beside `out_dir`, in its nearest existing ancestor (so nothing of
    `out_dir`'s path is created before the renames), on the same file system."""
    anchor = out_dir.absolute().parent
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out_dir.name or 'export'}.rota-export-", dir=anchor))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(out_dir)) from None


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Within the block SIGINT, SIGTERM and SIGHUP raise ExportInterrupted (main thread only;
    an ignored signal stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def handler(signum: int, frame: object) -> None:
        raise ExportInterrupted(signum)

    for s, old in previous.items():
        if old is not signal.SIG_IGN:
            signal.signal(s, handler)
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old if old is not None else signal.SIG_DFL)


def _hold_signals() -> set[int | signal.Signals] | None:
    """Block SIGINT, SIGTERM and SIGHUP (delivered once released), as planner.formats.atomic
    does for its sets; the previous mask, or None where blocking is not possible."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def _release_signals(held: set[int | signal.Signals] | None) -> None:
    if held is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _rename_all(stage: Path, out_dir: Path, rels: list[Path]) -> list[Path]:
    targets = [out_dir / rel for rel in rels]
    for rel, target in zip(rels, targets, strict=True):
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage / rel, target)
    return targets


def _check_way(out_dir: Path, rels: list[Path]) -> None:
    """OSError naming the first path that would stop a rename: a file where a folder must be,
    a folder where a file goes, a folder rota cannot write into."""
    folders: set[Path] = set(out_dir.parents)
    for rel in rels:
        folders.update(out_dir / parent for parent in rel.parents)
    for folder in sorted(folders, key=lambda p: (len(p.parts), str(p))):
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file is in the way of the export's folder", str(folder))
    for rel in rels:
        target = out_dir / rel
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, "a folder is in the way of the export's file", str(target))
        parent = target.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not os.access(parent, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "cannot write into this folder", str(parent))


def _note_stale_rounds(context: ExportContext, out_dir: Path, written: list[Path]) -> None:
    """Launcher files an earlier export left in `out_dir` stay (rota never deletes files it did
    not just write), but the user hears of them: a whole round folder the new driver does not
    run, or a stray file inside a round folder it does run (Kubernetes applies whole folders)."""
    fresh = set(written)
    current = {path.parent for path in written}
    stale = sorted(d.name for d in out_dir.glob("round-*") if d.is_dir() and d not in current)
    if stale:
        context.notes.append(
            f"{len(stale)} round folder(s) from an earlier export remain in {out_dir} ({stale[0]}, ...); "
            "the new driver does not run them: remove them, or export into an empty folder"
        )
    rounds = [d for d in current if d.name.startswith("round-")]
    strays = sorted(str(f.relative_to(out_dir)) for d in rounds for f in d.iterdir() if f not in fresh)
    if strays:
        context.notes.append(
            f"{len(strays)} file(s) from an earlier export remain in this export's round folders ({strays[0]}, ...); "
            "a driver that runs whole folders would launch them too: remove them, or export into an empty folder"
        )


__all__ = [
    "FORMATS",
    "REGISTRY",
    "ExportContext",
    "ExportFormat",
    "ExportInterrupted",
    "canonical_format",
    "export_schedule",
    "load_context",
]
