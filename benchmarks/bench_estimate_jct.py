"""Effect of co-location estimation on schedules: average JCT against the oracle (issue 6).

Protocol: Gavel's k80/p100/v100 table is the truth. A random fraction of its
single-GPU (worker type, pair)s is hidden (both rows, ran or failed, as
`bench_estimate.partial_table` does) and filled in again by `rota table
estimate` (ALS, `--partial`). One continuous single-GPU trace (Gavel's
generator, seed 0) is then simulated with `max_min_fairness_packed`, the
policy deciding on one table while jobs progress at the true throughputs:

* oracle          - the full true table for both;
* estimated       - the ALS-completed table for decisions;
* partner mean    - the same entries filled with the partner type's mean
                    factor on that worker type (no per-pair knowledge);
* no interference - the same entries filled with factor 1 (pair = solo); first
                    hide fraction and seed only (far off, and the slowest run);
* no packing      - `max_min_fairness_perf` on the true table (ignores pairs);
* with --failures-known also the ALS table with the entries that fail in truth
  marked failed (what an estimator that predicted out-of-memory pairs would give).

A hidden pair that failed in Gavel is estimated as runnable; the policy may
allocate it, the mechanism finds it cannot run (true throughput 0) and skips it,
as a real first co-location would. Reports average JCT over the window and its
ratio to the oracle; writes benchmarks/results/estimate_jct.json.

    python benchmarks/bench_estimate_jct.py [--quick] [--failures-known] [--hide 0.5,0.8] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_estimate import GAVEL, RESULTS, column_mean, gavel_single_gpu, partial_table  # noqa: E402

from planner.estimate import completion as E  # noqa: E402
from planner.formats.atomic import write_text_atomic  # noqa: E402
from planner.formats.cluster import parse_cluster
from planner.formats.table import COLUMNS, JobType, ThroughputTable  # noqa: E402
from planner.modes.generator import GeneratorConfig, JobGenerator  # noqa: E402
from planner.modes.simulate import SimulationConfig, Workload, run_simulation  # noqa: E402

PACKED, PERF = "max_min_fairness_packed", "max_min_fairness_perf"
FULL = {"cluster": "4:4:4", "rate": 0.8, "window": (30, 130), "hide": (0.5, 0.8), "hide_seeds": (0, 1, 2)}
QUICK = {"cluster": "2:2:2", "rate": 0.4, "window": (10, 50), "hide": (0.5,), "hide_seeds": (0,)}


# --------------------------------------------------------------------------- decision tables


def baseline_table(estimated: ThroughputTable, partial: ThroughputTable, method: str) -> ThroughputTable:
    """`estimated` with every estimated entry refilled by a baseline factor.

    The entries are exactly those the estimator filled, so every method decides
    on the same set of pairs and only the numbers differ.
    """
    fms = {fm.scale_factor: fm for fm in E.build_factor_matrices(partial)}
    means = {s: column_mean(fm.values) for s, fm in fms.items()}
    columns = {s: {c: j for j, c in enumerate(fm.columns)} for s, fm in fms.items()}
    rows = []
    for r in estimated.rows:
        if r["source"] != "estimated":
            rows.append(r)
            continue
        s = r["scale_factor"]
        partner = JobType(r["partner_model"], r["partner_batch_size"], s)
        factor = 1.0 if method == "no interference" else float(means[s][columns[s][(r["worker_type"], partner)]])
        tput = factor * partial.solo(r["worker_type"], JobType(r["model"], r["batch_size"], s))
        rows.append(
            {
                **r,
                "throughput": tput,
                "status": "estimated" if tput > 0 else "failed",
                "device_name": f"estimated: {method}",
            }
        )
    return ThroughputTable.from_records(rows, columns=COLUMNS, path=f"<{method}>")


def failures_known(estimated: ThroughputTable, truth: ThroughputTable) -> ThroughputTable:
    """`estimated` with the entries that cannot run in truth marked failed: an estimator that
    also predicted out-of-memory pairs (e.g. from peak memory) would decide on this."""
    rows = [
        {**r, "throughput": 0.0, "status": "failed"} if r["source"] == "estimated" and not _runs(truth, r) else r
        for r in estimated.rows
    ]
    return ThroughputTable.from_records(rows, columns=COLUMNS, path="<als, failures known>")


def _runs(truth: ThroughputTable, r: dict) -> bool:
    s = r["scale_factor"]
    a, b = JobType(r["model"], r["batch_size"], s), JobType(r["partner_model"], r["partner_batch_size"], s)
    return min(truth.pair(r["worker_type"], a, b)) > 0


def decision_tables(
    truth: ThroughputTable, fraction: float, seed: int, with_failures_known: bool = False
) -> tuple[dict, dict]:
    """The decision tables for one hide fraction, and facts about the hiding."""
    partial = partial_table(truth, fraction, seed=seed)
    estimated, report = E.estimate_table(partial, partial=True, seed=seed)
    estimated.path = "<als>"
    group = next(g for g in report.groups if g.scale_factor == 1)
    wrong = sum(1 for r in estimated.rows if r["status"] == "estimated" and not _runs(truth, r))
    facts = {
        "hidden_fraction": fraction,
        "measured_pairs_left": group.measured_pairs,
        "estimated_entries": group.estimated_entries,
        "unestimated_entries": group.unestimable_entries,
        "estimated_runnable_but_failed_in_truth": wrong,
    }
    tables = {
        "estimated (als)": estimated,
        "partner mean": baseline_table(estimated, partial, "partner mean"),
        "no interference": baseline_table(estimated, partial, "no interference"),
    }
    if with_failures_known:
        tables["estimated (als), failures known"] = failures_known(estimated, truth)
    return tables, facts


# --------------------------------------------------------------------------- runs


def simulate(truth: ThroughputTable, decide: ThroughputTable | None, policy: str, setup: dict) -> dict:
    cluster = parse_cluster(setup["cluster"])
    gen = JobGenerator(truth, GeneratorConfig(seed=setup["seed"], rate_per_hour=setup["rate"]))
    config = SimulationConfig(
        policy=policy, seed=setup["seed"], window=tuple(setup["window"]), gavel_compat=setup["gavel_compat"]
    )
    result = run_simulation(truth, cluster, Workload(generator=gen), config, decision_table=decide)
    m = result.metrics
    if result.status != "ok":
        return {"status": result.status, "reason": result.reason}
    return {
        "status": "ok",
        "avg_jct_h": m["jct_s"]["mean"] / 3600,
        "p90_jct_h": m["jct_s"]["p90"] / 3600,
        "utilisation": m["utilisation"]["all"],
        "resolves": m["resolves"],
        "wall_s": m["wall_s"],
    }


def _run(task: tuple) -> tuple:
    label, truth, decide, policy, setup = task
    started = time.perf_counter()
    out = simulate(truth, decide, policy, setup)
    out["wall_s"] = time.perf_counter() - started
    return label, out


def run_all(truth: ThroughputTable, setup: dict, jobs: int) -> tuple[list[dict], list[dict]]:
    """Every simulation of the study, in parallel; one row per run."""
    tasks = [
        ((None, None, "oracle (true table)"), truth, None, PACKED, setup),
        ((None, None, "no packing (max_min_fairness_perf)"), truth, None, PERF, setup),
    ]
    facts = []
    for fraction in setup["hide"]:
        for seed in setup["hide_seeds"]:
            tables, fact = decision_tables(truth, fraction, seed, setup["failures_known"])
            facts.append({**fact, "hide_seed": seed})
            first = (fraction, seed) == (setup["hide"][0], setup["hide_seeds"][0])
            # "no interference" is far off and the slowest run (it packs everything): run it once,
            # and first, so that it overlaps the rest.
            for name, table in tables.items():
                if name != "no interference":
                    tasks.append(((fraction, seed, name), truth, table, PACKED, setup))
                elif first:
                    tasks.insert(0, ((fraction, seed, name), truth, table, PACKED, setup))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        done = dict(pool.map(_run, tasks))
    oracle = done[(None, None, "oracle (true table)")].get("avg_jct_h")
    rows = []
    for (fraction, seed, name), out in done.items():
        ratio = out["avg_jct_h"] / oracle if out.get("avg_jct_h") and oracle else None
        rows.append(
            {"hidden_fraction": fraction, "hide_seed": seed, "decisions": name, **out, "jct_ratio_to_oracle": ratio}
        )
    return rows, facts


def summarise(rows: list[dict]) -> list[dict]:
    """Mean over hide seeds per (fraction, decisions), with the spread of the ratio."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["hidden_fraction"], r["decisions"]), []).append(r)
    order = [
        "oracle (true table)",
        "no packing (max_min_fairness_perf)",
        "estimated (als)",
        "estimated (als), failures known",
        "partner mean",
        "no interference",
    ]
    out = []
    for (fraction, name), runs in sorted(groups.items(), key=lambda g: (g[0][0] or 0.0, order.index(g[0][1]))):
        ok = [r for r in runs if r["status"] == "ok"]

        def mean(key, ok=ok):
            return sum(r[key] for r in ok) / len(ok) if ok else None

        ratios = [r["jct_ratio_to_oracle"] for r in ok if r["jct_ratio_to_oracle"] is not None]
        out.append(
            {
                "hidden_fraction": fraction,
                "decisions": name,
                "runs": len(runs),
                "ok": len(ok),
                "avg_jct_h": mean("avg_jct_h"),
                "p90_jct_h": mean("p90_jct_h"),
                "utilisation": mean("utilisation"),
                "jct_ratio_to_oracle": sum(ratios) / len(ratios) if ratios else None,
                "ratio_min": min(ratios, default=None),
                "ratio_max": max(ratios, default=None),
            }
        )
    return out


def print_rows(summary: list[dict], facts: list[dict], setup: dict) -> None:
    print(
        f"Gavel table (k80/p100/v100), cluster {setup['cluster']}, {setup['rate']} jobs/h, trace seed "
        f"{setup['seed']}, jobs {setup['window'][0]}-{setup['window'][1] - 1} measured; progress always at the "
        f"true throughputs; hide seeds {', '.join(map(str, setup['hide_seeds']))}"
    )
    for f in facts:
        print(
            f"  {f['hidden_fraction']:.0%} hidden, seed {f['hide_seed']}: {f['measured_pairs_left']} pairs left "
            f"measured, {f['estimated_entries']} entries estimated, {f['unestimated_entries']} not estimable, "
            f"{f['estimated_runnable_but_failed_in_truth']} estimated entries failed in truth"
        )
    print(
        f"\n{'hidden':>7}  {'decisions':<36}{'runs':>5}{'avg JCT h':>10}{'/ oracle':>10}{'min':>7}{'max':>7}"
        f"{'p90 h':>8}{'util':>7}"
    )
    for r in summary:
        hidden = "-" if r["hidden_fraction"] is None else f"{r['hidden_fraction']:.0%}"
        if not r["ok"]:
            print(f"{hidden:>7}  {r['decisions']:<36}{r['runs']:>5}  saturated")
            continue
        print(
            f"{hidden:>7}  {r['decisions']:<36}{r['ok']:>5}{r['avg_jct_h']:>10.2f}{r['jct_ratio_to_oracle']:>10.3f}"
            f"{r['ratio_min']:>7.3f}{r['ratio_max']:>7.3f}{r['p90_jct_h']:>8.1f}{r['utilisation']:>7.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=GAVEL)
    parser.add_argument("--quick", action="store_true", help=f"smaller run: {QUICK}")
    parser.add_argument("--cluster")
    parser.add_argument("--rate", type=float)
    parser.add_argument("--window", help="START:END of the measured jobs")
    parser.add_argument("--hide", help="comma-separated hidden fractions, e.g. 0.5,0.8")
    parser.add_argument("--hide-seeds", help="comma-separated seeds of the hiding (and of the fit)")
    parser.add_argument("--seed", type=int, default=0, help="trace seed (Gavel's generator)")
    parser.add_argument("--gavel-compat", action="store_true")
    parser.add_argument(
        "--failures-known",
        action="store_true",
        help="also decide on the ALS table with the pairs that fail in truth marked failed",
    )
    parser.add_argument("--jobs", type=int, default=2, help="simulations run in parallel")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results JSON (default benchmarks/results/estimate_jct.json; quick/ with --quick)",
    )
    args = parser.parse_args(argv)
    if args.out is None:  # a quick run must not overwrite the committed full results
        args.out = (RESULTS / "quick" if args.quick else RESULTS) / "estimate_jct.json"
    if not args.table.exists():
        print(f"skipped: Gavel table not found at {args.table}")
        return 0
    setup = dict(QUICK if args.quick else FULL)
    setup.update({k: v for k, v in (("cluster", args.cluster), ("rate", args.rate)) if v is not None})
    if args.window:
        setup["window"] = tuple(int(v) for v in args.window.split(":"))
    if args.hide:
        setup["hide"] = tuple(float(v) for v in args.hide.split(","))
    if args.hide_seeds:
        setup["hide_seeds"] = tuple(int(v) for v in args.hide_seeds.split(","))
    setup.update(seed=args.seed, gavel_compat=args.gavel_compat, failures_known=args.failures_known)

    started = time.perf_counter()
    truth = gavel_single_gpu(args.table)[1]
    rows, facts = run_all(truth, setup, args.jobs)
    elapsed = time.perf_counter() - started
    summary = summarise(rows)
    print_rows(summary, facts, setup)
    setup = {k: list(v) if isinstance(v, tuple) else v for k, v in setup.items()}
    payload = {
        "setup": {**setup, "policy": PACKED, "table": "gavel k80/p100/v100"},
        "hiding": facts,
        "summary": summary,
        "runs": rows,
        "wall_s": elapsed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(payload, indent=1) + "\n")
    print(f"\nwrote {args.out}; {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
