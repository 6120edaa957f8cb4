"""`rota compare --plot`: the policies side by side on average JCT, makespan and GPU cost."""

from __future__ import annotations

from pathlib import Path

from planner.errors import InputError
from planner.formats.atomic import write_with
from planner.modes.compare import AWARE_VERSION, Comparison
from planner.report.plots import FORMATS, pyplot_or_error, savefig

AWARE_COLOUR, AGNOSTIC_COLOUR, BEST_EDGE = "#1f77b4", "#ff7f0e", "black"


def plot_comparison(comparison: Comparison, path: Path, *, title: str) -> Path:
    """Three panels of horizontal bars, one bar per policy that finished; the recommended one outlined."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise InputError(f"--plot must end in {' or '.join('.' + f for f in FORMATS)}", field="--plot")
    plt = pyplot_or_error()
    shown = [o for o in comparison.outcomes if o.status == "ok"]
    if not shown:
        raise InputError("no policy finished the jobs: nothing to plot", field="--plot")
    agnostic = set(AWARE_VERSION)
    panels = [("average JCT (h)", "jct"), ("makespan (h)", "makespan")]
    if all(o.cost is not None for o in shown):
        panels.append(("GPU cost ($)", "cost"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 0.45 * len(shown) + 1.8), sharey=True)
    names = [o.policy for o in shown]
    for ax, (label, key) in zip(axes, panels):
        values = [o.value(key) or 0.0 for o in shown]  # type: ignore[arg-type]
        if key != "cost":
            values = [v / 3600 for v in values]
        colours = [AGNOSTIC_COLOUR if n in agnostic else AWARE_COLOUR for n in names]
        edges = [BEST_EDGE if n == comparison.recommended else "none" for n in names]
        ax.barh(range(len(names)), values, color=colours, edgecolor=edges, linewidth=1.5)
        ends = values
        if key == "jct":  # whisker to the 90th percentile
            ends = [(o.jct_p90_s or 0.0) / 3600 for o in shown]
            ax.hlines(range(len(names)), values, ends, colors="dimgrey", linewidth=1)
            ax.plot(ends, range(len(names)), "|", color="dimgrey", markersize=9)
        for y, (v, end) in enumerate(zip(values, ends)):
            ax.annotate(
                f"{v:,.2f}", (max(v, end), y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=7
            )
        ax.set_xlabel(label)
        ax.set_xlim(0, max(ends) * 1.25 if max(ends) > 0 else 1)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(names)))
    axes[0].set_yticklabels(names, fontsize=8)
    axes[0].invert_yaxis()
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=AWARE_COLOUR),
        plt.Rectangle((0, 0), 1, 1, color=AGNOSTIC_COLOUR),
        plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor=BEST_EDGE, linewidth=1.5),
        plt.Line2D([0], [0], color="dimgrey", marker="|", markersize=9, linewidth=1),
    ]
    fig.legend(
        handles,
        [
            "heterogeneity-aware",
            "heterogeneity-agnostic",
            f"recommended ({comparison.objective})",
            "90th percentile JCT",
        ],
        loc="lower center",
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    write_with(path, lambda tmp: savefig(fig, tmp, fmt=fmt))
    plt.close(fig)
    return path
