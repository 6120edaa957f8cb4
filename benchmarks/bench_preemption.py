"""Preemption cost study: does heterogeneity-aware LAS still pay when every move costs a minute?

On Gavel's table, one continuous single-GPU trace on a small cluster (default 4:4:4,
0.7 jobs/h, jobs 30-89 measured, seed 0), the average JCT of agnostic LAS
(max_min_fairness), heterogeneity-aware LAS (max_min_fairness_perf) and packed LAS
(max_min_fairness_packed) when every start of a job on GPUs it did not hold the round
before costs 0, 15, 30 or 60 s (`--restart-cost`), with and without the
migration-aware mechanism (`--migration-aware`). Writes a JSON of every point and a
plot; prints the table docs/simulation.md ("Preemption cost") shows.

    python benchmarks/bench_preemption.py [--workers 2] [--out benchmarks/results/preemption.json]
        [--plot docs/figures/preemption_jct.png]
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.formats.atomic import write_text_atomic  # noqa: E402
from planner.formats.cluster import parse_cluster  # noqa: E402
from planner.formats.gavel_json import import_gavel  # noqa: E402
from planner.modes.generator import GeneratorConfig, JobGenerator  # noqa: E402
from planner.modes.simulate import SimulationConfig, Workload, run_simulation  # noqa: E402

GAVEL_TABLE = ROOT / "data" / "gavel" / "simulation_throughputs.json"
POLICIES = {
    "max_min_fairness": "agnostic LAS",
    "max_min_fairness_perf": "heterogeneity-aware LAS",
    "max_min_fairness_packed": "packed LAS",
}
COSTS = (0.0, 15.0, 30.0, 60.0)


def point(args: tuple[str, float, bool, str, float, tuple[int, int], int]) -> dict:
    """One simulation: the same generated trace for every point (same seed)."""
    policy, cost, aware, cluster_text, rate, window, seed = args
    table, cluster = import_gavel(GAVEL_TABLE), parse_cluster(cluster_text)
    generator = JobGenerator(table, GeneratorConfig(seed=seed, rate_per_hour=rate))
    config = SimulationConfig(policy=policy, seed=seed, window=window, restart_cost_s=cost, migration_aware=aware)
    result = run_simulation(table, cluster, Workload(generator=generator), config)
    m = result.metrics
    return {
        "policy": policy,
        "restart_cost_s": cost,
        "migration_aware": aware,
        "status": result.status,
        "jct_mean_h": m["jct_s"]["mean"] / 3600,
        "restarts": m["restarts"],
        "restart_gpu_h": m["restart_gpu_s"] / 3600,
        "goodput": m["goodput"],
        "utilisation": m["utilisation"]["all"],
        "rounds": m["rounds"],
        "wall_s": m["wall_s"],
    }


def plot(points: list[dict], path: Path, title: str) -> None:
    """Average JCT (left) and goodput (right) against the restart cost; the legend below both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (jct_ax, goodput_ax) = plt.subplots(1, 2, figsize=(11, 4.8))
    colours = dict(zip(POLICIES, ("tab:gray", "tab:blue", "tab:green")))
    for policy, label in POLICIES.items():
        for aware, style, marker in ((False, "-", "o"), (True, "--", "s")):
            rows = sorted(
                (p for p in points if p["policy"] == policy and p["migration_aware"] == aware),
                key=lambda p: p["restart_cost_s"],
            )
            costs = [p["restart_cost_s"] for p in rows]
            look = {"linestyle": style, "marker": marker, "color": colours[policy]}
            name = f"{label}{', migration-aware' if aware else ''}"
            jct_ax.plot(costs, [p["jct_mean_h"] for p in rows], label=name, **look)
            goodput_ax.plot(costs, [p["goodput"] * 100 for p in rows], **look)
    jct_ax.set_ylabel("average JCT of the measured jobs (h)")
    jct_ax.set_ylim(bottom=0)
    goodput_ax.set_ylabel("goodput: useful / allocated GPU time (%)")
    for ax in (jct_ax, goodput_ax):
        ax.set_xlabel("restart cost per start on new GPUs (s)")
        ax.set_xticks(COSTS)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.legend(loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))  # room below the axes for the legend
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table_text(points: list[dict]) -> str:
    """Markdown: average JCT per policy and cost, plain / migration-aware, with goodput."""
    lines = [
        "| policy | mechanism | " + " | ".join(f"{c:.0f} s" for c in COSTS) + " |",
        "|---|---|" + "---|" * len(COSTS),
    ]
    for policy, label in POLICIES.items():
        for aware in (False, True):
            by_cost = {
                p["restart_cost_s"]: p for p in points if p["policy"] == policy and p["migration_aware"] == aware
            }
            cells = [f"{by_cost[c]['jct_mean_h']:.2f} h ({by_cost[c]['goodput'] * 100:.1f} %)" for c in COSTS]
            lines.append(f"| {label} | {'migration-aware' if aware else 'plain'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="4:4:4")
    parser.add_argument("--rate", type=float, default=0.7, help="jobs per hour")
    parser.add_argument("--window", default="30:90", help="measured jobs START:END")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "preemption.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "figures" / "preemption_jct.png")
    parser.add_argument("--replot", action="store_true", help="Only redraw the plot and table from --out.")
    args = parser.parse_args()
    if args.replot:
        saved = json.loads(args.out.read_text())
        setting = saved["setting"]
        report(saved["points"], args, setting["cluster"], setting["rate_per_hour"], setting["window"], setting["seed"])
        return
    start, end = (int(v) for v in args.window.split(":"))
    grid = [
        (policy, cost, aware, args.cluster, args.rate, (start, end), args.seed)
        for policy in POLICIES
        for cost in COSTS
        for aware in (False, True)
    ]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        points = list(pool.map(point, grid))
    setting = {"cluster": args.cluster, "rate_per_hour": args.rate, "window": [start, end], "seed": args.seed}
    write_text_atomic(args.out, json.dumps({"setting": setting, "points": points}, indent=1) + "\n")
    report(points, args, args.cluster, args.rate, [start, end], args.seed)


def report(points: list[dict], args: argparse.Namespace, cluster: str, rate: float, window: list[int], seed: int):
    title = (
        f"Restart cost: Gavel's table, cluster {cluster} (v100:p100:k80), {rate} jobs/h single-GPU, "
        f"jobs {window[0]}-{window[1] - 1} measured, seed {seed}"
    )
    plot(points, args.plot, title)
    print(table_text(points))
    print("(average JCT of the measured jobs; in brackets the goodput: useful over allocated GPU time)")
    print(f"wrote {args.out} and {args.plot}")


if __name__ == "__main__":
    main()
