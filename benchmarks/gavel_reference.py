"""rota --gavel-compat against the numbers Gavel's own simulator produced (spec §11.3).

Runs the static (30 single-GPU jobs, 4:4:4, seeds 0 and 1) and continuous
(4:4:4, 0.4 jobs/h, window [20, 60), seed 0) cases for every policy listed
there that rota has, and prints a Markdown table: Gavel, rota, relative
difference. Takes about a minute.

    python benchmarks/gavel_reference.py [--out benchmarks/results/gavel_reference.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.formats.atomic import write_text_atomic  # noqa: E402
from planner.formats.cluster import parse_cluster
from planner.formats.gavel_json import import_gavel  # noqa: E402
from planner.modes.generator import GeneratorConfig, JobGenerator  # noqa: E402
from planner.modes.simulate import SimulationConfig, Workload, run_simulation  # noqa: E402
from planner.policies import POLICY_NAMES  # noqa: E402

GAVEL_TABLE = ROOT / "data" / "gavel" / "simulation_throughputs.json"

# policy: (seed 0, seed 1), each (avg JCT h, makespan h, utilisation, lease-extension %)
STATIC = {
    "fifo": ((38.769, 167.170, 0.2602, 57.7), (49.371, 184.104, 0.2844, 54.3)),
    "fifo_perf": ((23.144, 123.854, 0.3599, 99.5), (26.741, 147.596, 0.3785, 99.6)),
    "fifo_packed": ((21.684, 124.451, 0.3417, 99.0), (26.400, 146.139, 0.3780, 99.3)),
    "max_min_fairness": ((26.647, 212.305, 0.2732, 20.3), (36.534, 234.499, 0.3342, 25.3)),
    "max_min_fairness_perf": ((20.535, 133.303, 0.3321, 67.2), (25.703, 142.655, 0.3769, 69.8)),
    "max_min_fairness_packed": ((19.068, 131.895, 0.2978, 71.8), (23.895, 141.395, 0.3463, 70.2)),
    "max_min_fairness_water_filling": ((26.722, 212.462, 0.2731, 20.7), (36.519, 234.499, 0.3342, 25.3)),
    "max_min_fairness_water_filling_perf": ((20.518, 133.344, 0.3317, 67.6), (25.687, 142.388, 0.3772, 70.9)),
    "min_total_duration": ((27.410, 208.331, 0.2780, 23.4), (37.730, 229.344, 0.3418, 26.4)),
    "min_total_duration_perf": ((25.634, 123.857, 0.4108, 52.5), (32.038, 131.610, 0.4521, 55.5)),
    "min_total_duration_packed": ((26.313, 135.084, 0.3306, 40.1), (32.501, 131.570, 0.4097, 40.1)),
    "finish_time_fairness": ((26.434, 213.350, 0.2721, 22.2), (36.288, 235.189, 0.3334, 26.6)),
    "finish_time_fairness_perf": ((20.581, 133.202, 0.3319, 68.3), (25.834, 142.740, 0.3775, 68.5)),
    "gandiva": ((21.860, 137.084, 0.3200, 54.3), (26.838, 145.083, 0.3765, 58.4)),
    "isolated": ((26.676, 212.462, 0.2732, 21.2), (36.510, 234.312, 0.3344, 25.7)),
    "allox": ((20.213, 136.038, 0.3356, 99.3), (24.181, 152.880, 0.3569, 99.3)),
    "max_sum_throughput_perf": ((20.931, 134.563, 0.3301, 91.2), (27.528, 139.879, 0.4100, 93.5)),
}
# policy: (avg JCT h, utilisation)
CONTINUOUS = {
    "fifo": (13.718, 0.3772),
    "fifo_perf": (12.081, 0.3460),
    "max_min_fairness": (16.514, 0.5062),
    "max_min_fairness_perf": (12.139, 0.3568),
    "max_min_fairness_packed": (12.217, 0.3528),
    "finish_time_fairness": (16.457, 0.5048),
    "allox": (12.448, 0.3583),
    "gandiva": (12.847, 0.3798),
    "isolated": (16.525, 0.5062),
}


def _rel(ours: float, theirs: float) -> str:
    return f"{100 * (ours - theirs) / theirs:+.2f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(GAVEL_TABLE))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gavel_reference.md"))
    args = parser.parse_args()
    table = import_gavel(args.table)
    cluster = parse_cluster("4:4:4")
    lines = [
        "Static: 30 single-GPU jobs, v100:4 p100:4 k80:4, --gavel-compat. Each cell: Gavel / rota (difference).",
        "",
        "| policy | seed | avg JCT h | makespan h | utilisation | lease ext. % |",
        "|---|---|---|---|---|---|",
    ]
    for policy, seeds in STATIC.items():
        if policy not in POLICY_NAMES:
            continue
        for seed, ref in enumerate(seeds):
            gen = JobGenerator(table, GeneratorConfig(seed=seed))
            m = run_simulation(
                table,
                cluster,
                Workload(generator=gen, num_jobs=30),
                SimulationConfig(policy=policy, seed=seed, gavel_compat=True),
            ).metrics
            ours = (
                m["jct_s"]["mean"] / 3600,
                m["makespan_s"] / 3600,
                m["utilisation"]["all"],
                100 * (m["lease_extension_rate"] or 0),
            )
            cells = [
                f"{t:.3f} / {o:.3f} ({_rel(o, t)})" if i < 3 else f"{t:.1f} / {o:.1f}"
                for i, (t, o) in enumerate(zip(ref, ours))
            ]
            lines.append(f"| {policy} | {seed} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    lines += [
        "",
        "Continuous: 0.4 jobs/h, window jobs [20, 60), seed 0, same cluster.",
        "",
        "| policy | avg JCT h | utilisation |",
        "|---|---|---|",
    ]
    for policy, ref in CONTINUOUS.items():
        if policy not in POLICY_NAMES:
            continue
        gen = JobGenerator(table, GeneratorConfig(seed=0, rate_per_hour=0.4))
        m = run_simulation(
            table, cluster, Workload(generator=gen), SimulationConfig(policy=policy, window=(20, 60), gavel_compat=True)
        ).metrics
        ours = (m["jct_s"]["mean"] / 3600, m["utilisation"]["all"])
        lines.append(
            f"| {policy} | " + " | ".join(f"{t:.3f} / {o:.3f} ({_rel(o, t)})" for t, o in zip(ref, ours)) + " |"
        )
        print(lines[-1], flush=True)
    write_text_atomic(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
