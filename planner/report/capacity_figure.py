"""`rota capacity --plot`: cost against average JCT of the simulated configurations, the Pareto
front joined, the current cluster and the recommendation marked."""

from __future__ import annotations

import math
from pathlib import Path

from planner.errors import InputError
from planner.formats.atomic import write_with
from planner.formats.catalogue import Catalogue
from planner.modes.capacity import Answer
from planner.report.plots import FORMATS, pyplot_or_error, savefig


def plot_capacity(answer: Answer, catalogue: Catalogue, path: Path, *, title: str, currency: str = "$") -> Path:
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise InputError(f"--plot must end in {' or '.join('.' + f for f in FORMATS)}", field="--plot")
    plt = pyplot_or_error()
    screened = {s.config: s for s in answer.screened}
    shown = [c for c in answer.confirmed if c.status == "ok" and c.avg_jct_h is not None]
    if not shown:
        raise InputError("no configuration finished its simulation: nothing to plot", field="--plot")

    def cost(config) -> float:
        value = screened[config].cost
        return math.nan if value is None else value

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    ax.scatter([cost(c.config) for c in shown], [c.avg_jct_h for c in shown], s=22, color="#9aa7b8", label="simulated")
    by_config = {c.config: c for c in shown}
    front = [by_config[f] for f in answer.front if f in by_config]
    ax.plot(
        [cost(c.config) for c in front],
        [c.avg_jct_h for c in front],
        "-o",
        color="#1f77b4",
        markersize=5,
        label="Pareto front",
    )
    for k, c in enumerate(front):  # labels alternate above and below the line, so neighbours do not overlap
        ax.annotate(
            c.config.label(catalogue),
            (cost(c.config), c.avg_jct_h),
            xytext=(5, 6 if k % 2 else -11),
            textcoords="offset points",
            fontsize=7,
        )
    if answer.current is not None and answer.current.avg_jct_h is not None:
        ax.scatter(
            [0.0], [answer.current.avg_jct_h], marker="s", s=60, color="black", label="current cluster", zorder=3
        )
    if answer.recommended is not None:
        rec = answer.recommended
        ax.scatter(
            [cost(rec.config)],
            [rec.avg_jct_h],
            marker="*",
            s=220,
            color="#d62728",
            label=f"recommended: {rec.config.label(catalogue)}",
            zorder=4,
        )
    ax.set_xlabel(f"cost of the added nodes ({currency})")
    ax.set_ylabel("average JCT (h), simulated")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    write_with(path, lambda tmp: savefig(fig, tmp, fmt=fmt))
    plt.close(fig)
    return path
