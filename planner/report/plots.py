"""Plots in the style of the paper's Figures 8-10 (matplotlib, imported lazily).

* average JCT vs input rate, one line per policy, mean over seeds; a line
  stops where the policy saturates (marked with an x at the top);
* CDF of per-job JCT at one input rate, one line per policy;
* makespan vs number of jobs for static sweeps;
* CDF of finish-time fairness rho.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.formats.atomic import write_with

FORMATS = ("png", "svg")


def pyplot_or_error():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plotting needs matplotlib, which is not installed (pip install matplotlib)") from None
    return plt


def _save(fig, stem: Path, formats: Sequence[str]) -> list[Path]:

    paths = []
    for fmt in formats:
        if fmt not in FORMATS:
            raise InputError(f"unknown plot format {fmt!r} (use {', '.join(FORMATS)})", field="--plot-format")
        path = stem.parent / f"{stem.name}.{fmt}"  # not with_suffix: names like rate=0.4 hold dots
        write_with(path, functools.partial(savefig, fig, fmt=fmt))
        paths.append(path)
    return paths


def _mean_by_load(records: Iterable[Mapping], value) -> dict[str, list[tuple[float, float | None]]]:
    """policy -> [(load, mean over seeds of value, or None if any seed saturated)]."""
    groups: dict[str, dict[float, list]] = {}
    for r in records:
        load = float(r["num_jobs"]) if r.get("num_jobs") is not None else float(r["rate"])
        v = value(r) if r["status"] == "ok" else None
        groups.setdefault(r["policy"], {}).setdefault(load, []).append(v)
    out = {}
    for policy, by_load in groups.items():
        out[policy] = [
            (load, None if any(v is None for v in vs) else float(np.mean(vs))) for load, vs in sorted(by_load.items())
        ]
    return out


def plot_jct_vs_rate(
    records: Iterable[Mapping], stem: Path, *, title: str = "", formats: Sequence[str] = ("png",)
) -> list[Path]:
    plt = pyplot_or_error()
    series = _mean_by_load(records, lambda r: r["metrics"]["jct_s"]["mean"] / 3600.0)
    fig, ax = plt.subplots(figsize=(6.2, 3.9))
    top = max((v for pts in series.values() for _, v in pts if v is not None), default=1.0)
    saturated_any = False
    for k, (policy, pts) in enumerate(series.items()):
        ok = [(x, y) for x, y in pts if y is not None]
        (line,) = ax.plot([x for x, _ in ok], [y for _, y in ok], marker="o", ms=3.5, label=policy)
        bad = [x for x, y in pts if y is None]
        if bad:  # saturated from this rate on: a mark above the curves, one row per policy so none hide
            saturated_any = True
            ax.plot(bad[:1], [top * (1.06 + 0.05 * k)], marker="x", ms=7, mew=2, color=line.get_color(), ls="none")
    if saturated_any:
        ax.plot([], [], marker="x", ms=7, mew=2, color="dimgrey", ls="none", label="saturated from this rate")
    ax.set_xlabel("input job rate (jobs/hour)")
    ax.set_ylabel("average JCT (hours)")
    ax.set_ylim(0, top * (1.12 + 0.05 * len(series)))
    return _finish(plt, fig, ax, stem, formats, title)


def _finish(plt, fig, ax, stem: Path, formats: Sequence[str], title: str) -> list[Path]:
    """Grid, legend, title; save in every format and close."""
    ax.grid(alpha=0.3)
    # Legend beside the axes: it can never cover a curve.
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    paths = _save(fig, stem, formats)
    plt.close(fig)
    return paths


def plot_makespan_vs_jobs(
    records: Iterable[Mapping], stem: Path, *, title: str = "", formats: Sequence[str] = ("png",)
) -> list[Path]:
    plt = pyplot_or_error()
    series = _mean_by_load(records, lambda r: r["metrics"]["makespan_s"] / 3600.0)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for policy, pts in series.items():
        ok = [(x, y) for x, y in pts if y is not None]
        ax.plot([x for x, _ in ok], [y for _, y in ok], marker="o", ms=3.5, label=policy)
    ax.set_xlabel("number of jobs")
    ax.set_ylabel("makespan (hours)")
    ax.set_ylim(bottom=0)
    return _finish(plt, fig, ax, stem, formats, title)


def plot_cdf(
    values_by_policy: Mapping[str, Sequence[float]],
    stem: Path,
    *,
    xlabel: str,
    title: str = "",
    formats: Sequence[str] = ("png",),
    log_x: bool = False,
) -> list[Path]:
    plt = pyplot_or_error()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for policy, values in values_by_policy.items():
        data = np.sort(np.asarray(values, dtype=float))
        if data.size == 0:
            continue
        ax.plot(data, np.arange(1, data.size + 1) / data.size, label=policy)
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.0)
    return _finish(plt, fig, ax, stem, formats, title)


def savefig(fig: Any, tmp: Path, *, fmt: str) -> None:
    fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight")
