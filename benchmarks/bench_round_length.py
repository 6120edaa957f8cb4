"""Round length against restart cost on the lab example, and what `--round-length auto` picks.

The lab list (data/examples/lab: 60 jobs on 1-8 GPUs, all at t = 0, on 8 v100 + 16 p100 +
16 k80 in 8-GPU nodes) on Gavel's table under max_min_fairness_perf, simulated to the end
at every round length {120, 360, 720, 1800, 3600} s x restart cost {0, 30, 120, 300} s
(`--restart-cost`, which overrides the cluster's 120 s): makespan, average JCT, goodput,
restarts. Then, per restart cost, the length `choose_for_simulation` (what
`rota simulate --round-length auto` runs) picks, its reason, the seconds it took, and
whether its goodput beats the default 360 s. Writes a JSON of every point and a plot of
makespan and goodput against the round length, one line per restart cost, the choices
marked; prints the table docs/restarts.md ("Round length") shows.

    python benchmarks/bench_round_length.py [--out benchmarks/results/round_length.json]
        [--plot docs/figures/round_length.png] [--replot]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.formats.atomic import write_text_atomic  # noqa: E402
from planner.formats.cluster import read_cluster  # noqa: E402
from planner.formats.jobs import read_jobs  # noqa: E402
from planner.formats.table import read_table  # noqa: E402
from planner.modes.round_length import CANDIDATES_S, choose_for_simulation  # noqa: E402
from planner.modes.simulate import SimulationConfig, Workload, run_simulation  # noqa: E402
from planner.report.plots import pyplot_or_error, savefig  # noqa: E402

TABLE = ROOT / "data" / "gavel" / "simulation_throughputs.csv"
LAB = ROOT / "data" / "examples" / "lab"
POLICY = "max_min_fairness_perf"
LENGTHS = CANDIDATES_S
COSTS = (0.0, 30.0, 120.0, 300.0)


def inputs():
    cluster, table = read_cluster(LAB / "cluster.yaml"), read_table(TABLE)
    return table, cluster, read_jobs(LAB / "jobs.csv", table=table, cluster=cluster)


def point(table, cluster, jobs, round_s: float, cost: float) -> dict:
    config = SimulationConfig(policy=POLICY, round_s=round_s, restart_cost_s=cost)
    result = run_simulation(table, cluster, Workload(jobs=jobs), config)
    m = result.metrics
    return {
        "round_s": round_s,
        "restart_cost_s": cost,
        "status": result.status,
        "makespan_h": m["makespan_s"] / 3600,
        "jct_mean_h": m["jct_s"]["mean"] / 3600,
        "goodput": m["goodput"],
        "restarts": m["restarts"],
        "restart_gpu_h": m["restart_gpu_s"] / 3600,
        "rounds": m["rounds"],
    }


def auto(table, cluster, jobs, cost: float) -> dict:
    started = time.perf_counter()
    choice = choose_for_simulation(
        table, cluster, Workload(jobs=jobs), SimulationConfig(policy=POLICY, restart_cost_s=cost)
    )
    return {
        "restart_cost_s": cost,
        "round_s": choice.round_s,
        "reason": choice.reason,
        "wall_s": time.perf_counter() - started,  # not a result: printed, never compared
        "choice": choice.to_json(),
    }


def plot(points: list[dict], choices: list[dict], path: Path, title: str) -> None:
    """Makespan (left) and goodput (right) against the round length, one line per restart cost;
    a star on the length auto picked. Style of planner.report.plots."""
    plt = pyplot_or_error()
    fig, (span_ax, goodput_ax) = plt.subplots(1, 2, figsize=(10, 3.9))
    picked = {c["restart_cost_s"]: c["round_s"] for c in choices}
    for cost in COSTS:
        rows = sorted((p for p in points if p["restart_cost_s"] == cost), key=lambda p: p["round_s"])
        lengths = [p["round_s"] for p in rows]
        (line,) = span_ax.plot(
            lengths, [p["makespan_h"] for p in rows], marker="o", ms=3.5, label=f"restart {cost:g} s"
        )
        goodput_ax.plot(lengths, [p["goodput"] * 100 for p in rows], marker="o", ms=3.5, color=line.get_color())
        best = next(p for p in rows if p["round_s"] == picked[cost])
        for ax, value in ((span_ax, best["makespan_h"]), (goodput_ax, best["goodput"] * 100)):
            ax.plot([best["round_s"]], [value], marker="*", ms=13, color=line.get_color(), mec="black", ls="none")
    span_ax.plot([], [], marker="*", ms=11, color="white", mec="black", ls="none", label="auto's choice")
    span_ax.set_ylabel("makespan (hours)")
    goodput_ax.set_ylabel("goodput: useful / allocated GPU time (%)")
    for ax in (span_ax, goodput_ax):
        ax.set_xscale("log")
        ax.set_xticks(LENGTHS)
        ax.set_xticklabels([f"{v:g}" for v in LENGTHS])
        ax.minorticks_off()
        ax.set_xlabel("round length (s)")
        ax.grid(alpha=0.3)
    # Legend beside the axes (planner.report.plots): it can never cover a curve.
    goodput_ax.legend(
        *span_ax.get_legend_handles_labels(), fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0)
    )
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    savefig(fig, path, fmt=path.suffix.lstrip("."))
    plt.close(fig)


def table_text(points: list[dict], choices: list[dict]) -> str:
    """Markdown: per restart cost and round length, makespan / average JCT / goodput; auto's pick in bold."""
    picked = {c["restart_cost_s"]: c["round_s"] for c in choices}
    lines = [
        "| restart cost | " + " | ".join(f"{r:g} s" for r in LENGTHS) + " | auto |",
        "|---|" + "---|" * (len(LENGTHS) + 1),
    ]
    for cost in COSTS:
        by_length = {p["round_s"]: p for p in points if p["restart_cost_s"] == cost}
        cells = []
        for r in LENGTHS:
            p = by_length[r]
            cell = f"{p['makespan_h']:.1f} / {p['jct_mean_h']:.2f} / {p['goodput'] * 100:.1f} %"
            cells.append(f"**{cell}**" if r == picked[cost] else cell)
        lines.append(f"| {cost:g} s | " + " | ".join(cells) + f" | {picked[cost]:g} s |")
    return "\n".join(lines)


def verdicts(points: list[dict], choices: list[dict]) -> list[str]:
    """Per restart cost: auto's reason, and whether its goodput beats 360 s's."""
    out = []
    for c in choices:
        at = {p["round_s"]: p for p in points if p["restart_cost_s"] == c["restart_cost_s"]}
        chosen, base = at[c["round_s"]]["goodput"], at[360.0]["goodput"]
        beats = "beats" if chosen > base else "equals" if chosen == base else "is below"
        out.append(
            f"restart {c['restart_cost_s']:g} s: {c['reason']} [{c['wall_s']:.2f} s]; "
            f"goodput {chosen * 100:.1f} % {beats} 360 s's {base * 100:.1f} %"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "round_length.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "figures" / "round_length.png")
    parser.add_argument("--replot", action="store_true", help="Only redraw the plot and table from --out.")
    args = parser.parse_args()
    if args.replot:
        saved = json.loads(args.out.read_text())
        report(saved["points"], saved["auto"], args)
        return
    table, cluster, jobs = inputs()
    points = [point(table, cluster, jobs, r, cost) for cost in COSTS for r in LENGTHS]
    choices = [auto(table, cluster, jobs, cost) for cost in COSTS]
    setting = {
        "table": str(TABLE.relative_to(ROOT)),
        "cluster": str((LAB / "cluster.yaml").relative_to(ROOT)),
        "jobs": str((LAB / "jobs.csv").relative_to(ROOT)),
        "policy": POLICY,
    }
    write_text_atomic(args.out, json.dumps({"setting": setting, "points": points, "auto": choices}, indent=1) + "\n")
    report(points, choices, args)


def report(points: list[dict], choices: list[dict], args: argparse.Namespace) -> None:
    title = f"Round length vs restart cost: lab example (60 jobs, 8 v100 + 16 p100 + 16 k80), {POLICY}"
    plot(points, choices, args.plot, title)
    print(table_text(points, choices))
    print("(makespan h / average JCT h / goodput; bold: auto's choice)")
    for line in verdicts(points, choices):
        print(line)
    print(f"wrote {args.out} and {args.plot}")


if __name__ == "__main__":
    main()
