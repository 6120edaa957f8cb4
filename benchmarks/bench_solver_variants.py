"""Solve-path variants against issue #31's bounds, on every recorded simulation point.

Each point of results/gavel_simulator_times.json is simulated with the reference solve path
(HiGHS interior point, rota's default) and again with each variant, in the same run; for each
variant: the change in average JCT and makespan, the largest relative gap between the LP
optima (every LP the reference solved, solved again by the variant), whether the bounds hold
(JCT 0.5 %, makespan 1 %, objective 1e-6: `bench_simulate.compare_candidate`), and its solver
floor (HiGHS's own run() time over the LPs of its run, best of three). What it answers: which
faster HiGHS settings keep the reference's answers, which is what limits a faster path, not
the speed of any one solve.

    python benchmarks/bench_solver_variants.py [--quick] [--variants ipm-nopresolve,simplex-nopresolve]

--quick runs the 100-job 8:8:8 point only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_simulate  # noqa: E402

import planner.policies.lp.highs as highs  # noqa: E402
from planner.formats.atomic import write_text_atomic  # noqa: E402
from planner.formats.gavel_json import import_gavel  # noqa: E402

# name -> (the LP method it starts from, HiGHS options it changes)
VARIANTS = {
    "ipm-nopresolve": ("ipm", {"presolve": "off"}),
    "simplex": ("simplex", {}),
    "simplex-nopresolve": ("simplex", {"presolve": "off"}),
    "dual-simplex-nopresolve": ("simplex", {"presolve": "off", "simplex_strategy": 1}),
}


def register(names: list[str]) -> None:
    """Make each variant a method name the simulator's solver accepts (this process only)."""
    plain = highs.highs_options

    def options(method: str) -> dict:
        if method in VARIANTS:
            base, changes = VARIANTS[method]
            return {**plain(base), **changes}
        return plain(method)

    highs.highs_options = options
    highs.METHODS = tuple(dict.fromkeys(highs.METHODS + tuple(names)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the 100-job 8:8:8 point only")
    parser.add_argument("--variants", default="ipm-nopresolve,simplex-nopresolve", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "solver_variants.json"))
    args = parser.parse_args()
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; use {', '.join(VARIANTS)}")
    register(names)
    points = [{f: e[f] for f in bench_simulate.POINT_FIELDS if f in e} for e in bench_simulate.recorded_points()]
    if args.quick:
        points = [p for p in points if p.get("jobs") == 100 and p["cluster"] == "8:8:8"]
    table = import_gavel(bench_simulate.GAVEL_TABLE)
    rows = []
    for point in points:
        reference, _ = bench_simulate.run_point(table, point, [])
        row = {
            "point": point,
            "reference": {k: reference[k] for k in ("avg_jct_h", "makespan_h", "wall_s", "highs_run_floor_s")},
        }
        line = [f"{bench_simulate.describe(point)}: ipm floor {reference['highs_run_floor_s']:.3f} s"]
        for name in names:
            candidate, _ = bench_simulate.run_point(table, point, [], method=name)
            check = bench_simulate.compare_candidate(reference, candidate)
            check.pop("speedup_vs_recorded_gavel", None)
            row[name] = {**check, "highs_run_floor_s": candidate["highs_run_floor_s"], "wall_s": candidate["wall_s"]}
            line.append(
                f"{name}: JCT {check['avg_jct_change']:+.2%}, makespan {check['makespan_change']:+.2%}, objective "
                f"{check['max_objective_gap']:.0e}, {'kept' if check['within_bounds'] else 'NOT kept'}, "
                f"floor {candidate['highs_run_floor_s']:.3f} s"
            )
        print("\n  ".join(line), flush=True)
        rows.append(row)
    out = {"variants": {n: {"method": VARIANTS[n][0], "options": VARIANTS[n][1]} for n in names}, "points": rows}
    if args.quick and args.out == parser.get_default("out"):
        args.out = str(ROOT / "benchmarks" / "results" / "quick" / "solver_variants.json")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
