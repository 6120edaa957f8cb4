"""A schedule as a timeline: rich tables per worker type and a Gantt chart (matplotlib)."""

from __future__ import annotations

import colorsys
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from planner.errors import InputError
from planner.formats.atomic import write_with
from planner.formats.cluster import Cluster
from planner.report.plots import pyplot_or_error
from planner.report.text import clock, duration


def job_codes(schedule: dict) -> dict[str, str]:
    """Short codes (A, B, ..., a, ..., A1, ...) so a GPU column stays narrow."""
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    ids = list(schedule.get("jobs") or {})
    for r in schedule["rounds"]:
        ids += [j for a in r["assignments"] for j in a["jobs"] if j not in ids]
    return {jid: letters[k % 52] + (str(k // 52) if k >= 52 else "") for k, jid in enumerate(dict.fromkeys(ids))}


_COLOURS = [
    "cyan",
    "magenta",
    "green",
    "yellow",
    "blue",
    "red",
    "bright_cyan",
    "bright_magenta",
    "bright_green",
    "bright_yellow",
    "bright_blue",
    "bright_red",
]


def timeline_tables(schedule: dict, cluster, chosen: list[dict]) -> list:
    """One rich table per worker type (rows: rounds; columns: its GPUs), then a legend."""
    codes = job_codes(schedule)
    colour = {jid: _COLOURS[k % len(_COLOURS)] for k, jid in enumerate(codes)}
    tables = []
    for w, spec in cluster.worker_types.items():
        gpus = spec.gpu_slots()
        grid = Table(title=f"{escape(w)}: {spec.gpus} GPU(s) on {len(spec.nodes)} node(s)", show_lines=False)
        grid.add_column("round", justify="right")
        grid.add_column("start", justify="right")
        grid.add_column("end", justify="right")
        for node, g in gpus:
            grid.add_column(f"{escape(node)}\n{g}" if g == 0 else f"\n{g}", justify="center")
        for r in chosen:
            held = {}
            for a in r["assignments"]:
                if a["worker_type"] != w:
                    continue
                text = "+".join(f"[{colour[j]}]{codes[j]}[/]" for j in a["jobs"])
                for gpu in a["gpus"]:
                    held[(gpu["node"], gpu["gpu"])] = text
            grid.add_row(
                str(r["index"]),
                clock(r["start_s"]),
                clock(r["end_s"]),
                *[held.get(slot, "[dim]·[/]") for slot in gpus],
            )
        tables.append(grid)
    legend = Table(title="jobs")
    for column in ("code", "job", "GPUs", "steps", "expected finish"):
        legend.add_column(column)
    shown = {j for r in chosen for a in r["assignments"] for j in a["jobs"]}
    for jid, code in codes.items():
        if jid not in shown:
            continue
        info = (schedule.get("jobs") or {}).get(jid, {})
        finish = info.get("expected_finish_s")
        legend.add_row(
            f"[{colour[jid]}]{code}[/]",
            escape(jid),  # user text: shown as written, never read as markup
            str(info.get("scale_factor", "?")),
            f"{info.get('total_steps', 0):,.0f}",
            "-" if finish is None else duration(finish),
        )
    tables.append(legend)
    return tables


def job_colours(n: int) -> list[tuple[float, float, float]]:
    """n colours that stay apart for any n: hues a golden angle apart, three shades in turn."""
    shades = ((0.75, 0.85), (0.55, 0.65), (0.95, 0.55))  # (saturation, value)
    return [colorsys.hsv_to_rgb((k * 0.618033988749895) % 1.0, *shades[k % 3]) for k in range(n)]


def plot_gantt(schedule: dict, cluster: Cluster, chosen: list[dict], path: Path) -> None:
    """Gantt chart: one row per GPU (grouped by worker type), one bar per job per round, each
    bar labelled with the job's code (legend: code -> job id) where it is wide enough to read."""
    plt = pyplot_or_error()
    rows = [(w, node, g) for w, spec in cluster.worker_types.items() for node, g in spec.gpu_slots()]
    index = {(node, g): k for k, (_, node, g) in enumerate(rows)}
    codes = job_codes(schedule)
    colour = dict(zip(codes, job_colours(len(codes))))
    fig, ax = plt.subplots(figsize=(12, max(3.0, 0.28 * len(rows) + 1.5)))
    span = max((r["end_s"] for r in chosen), default=1.0) - min((r["start_s"] for r in chosen), default=0.0)
    for r in chosen:
        start, width = r["start_s"] / 3600, (r["end_s"] - r["start_s"]) / 3600
        for a in r["assignments"]:
            share = 0.8 / len(a["jobs"])  # co-located jobs split the GPU's bar
            for k, jid in enumerate(a["jobs"]):
                for gpu in a["gpus"]:
                    y = index[(gpu["node"], gpu["gpu"])] - 0.4 + k * share
                    ax.broken_barh(
                        [(start, width)], (y, share), facecolors=colour[jid], edgecolor="white", linewidth=0.3
                    )
                    if span > 0 and (r["end_s"] - r["start_s"]) / span > 0.025:
                        ax.text(start + width / 2, y + share / 2, codes[jid], ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{w} {node}:{g}" for w, node, g in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time since the schedule's start (hours)")
    ax.set_ylabel("GPU (worker type, node:index)")
    policy = schedule.get("policy", {}).get("name", "schedule")
    gpus = ", ".join(f"{spec.gpus} {w}" for w, spec in cluster.worker_types.items())
    ax.set_title(f"{policy}: rounds {chosen[0]['index']}-{chosen[-1]['index']} on {gpus}" if chosen else policy)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[j]) for j in codes]
    ax.legend(
        handles,
        [f"{code}  {jid}" for jid, code in codes.items()],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        ncol=max(1, len(codes) // 40 + 1),
        frameon=False,
    )
    fig.tight_layout()
    write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)


def round_slice(all_rounds: list[dict], spec: str | None) -> list[dict]:
    if not all_rounds:
        return []
    if spec is None:
        return all_rounds[:30]
    first, sep, last = spec.partition(":")
    try:
        lo = int(first) if first.strip() else all_rounds[0]["index"]
        hi = (int(last) if last.strip() else all_rounds[-1]["index"]) if sep else lo
    except ValueError:
        raise InputError(f"expected FIRST:LAST or an index, got {spec!r}", field="--rounds") from None
    chosen = [r for r in all_rounds if lo <= r["index"] <= hi]
    if not chosen:
        raise InputError(
            f"no rounds in {spec!r} (the schedule has {all_rounds[0]['index']}-{all_rounds[-1]['index']})",
            field="--rounds",
        )
    return chosen
