"""Schedule exports for external launchers: Slurm, Kubernetes, Ray and a flat CSV.

`export_schedule(format, context, out_dir, **options)` writes the files and
returns their paths; `load_context` reads a schedule with its cluster and the
command of every job (see common.py). Each format is one entry of `REGISTRY`:
its module is imported only when that format is exported.
"""

from __future__ import annotations

import importlib
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


def export_schedule(fmt: str, context: ExportContext, out_dir: str | Path, **options: Any) -> list[Path]:
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("exists and is not a folder: give a folder for the launcher files", path=out_dir)
    written = REGISTRY[canonical_format(fmt)].exporter()(context, out_dir, **options)
    _note_stale_rounds(context, out_dir, written)
    return written


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
    "canonical_format",
    "export_schedule",
    "load_context",
]
