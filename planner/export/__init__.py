"""Schedule exports for external launchers: Slurm, Kubernetes, Ray and a flat CSV.

`export_schedule(format, context, out_dir, **options)` writes the files and
returns their paths; `load_context` reads a schedule with its cluster and the
command of every job (see common.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from planner.errors import InputError
from planner.export.common import ExportContext, load_context

FORMATS = ("slurm", "kubernetes", "ray", "csv")
_ALIASES = {"k8s": "kubernetes", "flat-csv": "csv", "flat_csv": "csv"}


def _writer(name: str) -> Callable[..., list[Path]]:
    if name == "slurm":
        from planner.export.slurm import export_slurm as writer
    elif name == "kubernetes":
        from planner.export.kubernetes import export_kubernetes as writer
    elif name == "ray":
        from planner.export.ray import export_ray as writer
    else:
        from planner.export.flat_csv import export_csv as writer
    return writer


def canonical_format(name: str) -> str:
    name = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if name not in FORMATS:
        raise InputError(f"unknown export format {name!r}; choose one of: {', '.join(FORMATS)}", field="FORMAT")
    return name


def export_schedule(fmt: str, context: ExportContext, out_dir: str | Path, **options) -> list[Path]:
    return _writer(canonical_format(fmt))(context, Path(out_dir), **options)


__all__ = ["FORMATS", "ExportContext", "canonical_format", "export_schedule", "load_context"]
