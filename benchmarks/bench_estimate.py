"""Accuracy of co-location estimation on Gavel's throughput table (issue 6).

Protocol: take the measured single-GPU pairs of Gavel's k80, p100 and v100
(the `_unconsolidated` types hold identical single-GPU numbers and would leak
hidden values; multi-GPU pairs are all zero in Gavel), hide a random fraction
of the (worker type, pair)s -- both mirror entries together, as one
co-location run measures both -- estimate them from the rest and compare with
the hidden true values. Methods: the ALS estimator (as `rota table estimate`
runs it), the same with measured failures fitted as factor 0, the rank-0
(bias-only) model, and two baselines: the partner-type mean (mean factor of
that partner on that worker type over the visible job types) and "no
interference" (factor 1). Errors are taken over the hidden pairs that ran in
Gavel (a failed pair has no factor to compare) and that are estimable (the job
type and the partner each keep at least one visible pair), the same entries for
every method.

Second part: can missing scale factors be filled from measured ones? Leave
out each multi-GPU solo throughput of Gavel's table in turn and predict it with
a log-additive model (log T = job effect + (worker type, scale factor) effect,
i.e. "every job type gets the same speed-up") and with its rank-1 extension.

Writes benchmarks/results/estimate_accuracy.csv and .svg (no dependency), and
a .png when matplotlib is importable. Usage:

    python benchmarks/bench_estimate.py [--seeds 10] [--quick]
    python benchmarks/bench_estimate.py --write-partial partial.csv --hide 0.7   # a demo input
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.estimate import completion as E  # noqa: E402
from planner.formats.gavel_json import import_gavel  # noqa: E402
from planner.formats.table import COLUMNS, JobType, ThroughputTable, write_table  # noqa: E402

GAVEL = ROOT / "data" / "gavel" / "simulation_throughputs.json"
RESULTS = ROOT / "benchmarks/results"
WORKER_TYPES = ("k80", "p100", "v100")
FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
METHODS = ("als", "als zeros=0", "bias only", "partner mean", "no interference")


def gavel_single_gpu(path: Path) -> tuple[ThroughputTable, ThroughputTable]:
    full = import_gavel(path)
    rows = [r for r in full.rows if r["worker_type"] in WORKER_TYPES]
    return ThroughputTable([r for r in rows if r["scale_factor"] == 1]), ThroughputTable(rows)


def column_mean(train: np.ndarray) -> np.ndarray:
    seen = ~np.isnan(train)
    return np.where(seen, train, 0.0).sum(axis=0) / np.maximum(seen.sum(axis=0), 1)


def predictions(
    fm_exclude: E.FactorMatrix, fm_zero: E.FactorMatrix, hidden: np.ndarray, seed: int
) -> dict[str, np.ndarray]:
    train = np.where(hidden, np.nan, fm_exclude.values)
    train_zero = np.where(hidden, np.nan, fm_zero.values)
    clip = lambda a: np.clip(a, 0.0, 1.0)  # noqa: E731
    return {
        "als": clip(E.als_complete(train, seed=seed)),
        "als zeros=0": clip(E.als_complete(train_zero, seed=seed)),
        "bias only": clip(E.als_complete(train, rank=0, seed=seed)),
        "partner mean": np.broadcast_to(column_mean(train), train.shape),
        "no interference": np.ones_like(train),
    }


def trial(fm: E.FactorMatrix, fm_zero: E.FactorMatrix, mirror, fraction: float, seed: int) -> dict:
    """Hide `fraction` of all pairs (ran or failed), estimate, return errors per method."""
    rng = np.random.default_rng(seed)
    # Hide among every measured pair, failed ones too, as a real partial profile would miss both.
    hidden = E.hide_pairs(fm, fraction, rng, values=fm_zero.values)
    visible = ~np.isnan(np.where(hidden, np.nan, fm.values))
    ran = hidden & ~np.isnan(fm.values)
    ok = E.estimable_mask(visible, ran, mirror)
    failed = E.estimable_mask(visible, hidden & fm.failed, mirror)
    preds = predictions(fm, fm_zero, hidden, seed)
    truth, solo = fm.values[ok], fm.solo[ok]
    out = {"coverage": ok.sum() / max(ran.sum(), 1), "n": int(ok.sum())}
    for name, pred in preds.items():
        err = np.abs(pred[ok] - truth)
        out[name] = {"factor": err, "tput": err * solo, "rel": err / truth, "failed_pred": pred[failed]}
    return out


def accuracy_study(fm: E.FactorMatrix, fm_zero: E.FactorMatrix, fractions, seeds: int) -> list[dict]:
    mirror = fm.mirror()
    rows = []
    for fraction in fractions:
        trials = [trial(fm, fm_zero, mirror, fraction, seed) for seed in range(seeds)]
        for name in METHODS:
            pooled = {k: np.concatenate([t[name][k] for t in trials]) for k in ("factor", "tput", "rel", "failed_pred")}
            rows.append(
                {
                    "hidden_fraction": fraction,
                    "method": name,
                    "seeds": seeds,
                    "entries": sum(t["n"] for t in trials),
                    "coverage": float(np.mean([t["coverage"] for t in trials])),
                    "factor_median": float(np.median(pooled["factor"])),
                    "factor_p90": float(np.quantile(pooled["factor"], 0.9)),
                    "tput_median": float(np.median(pooled["tput"])),
                    "tput_p90": float(np.quantile(pooled["tput"], 0.9)),
                    "tput_rel_median": float(np.median(pooled["rel"])),
                    "tput_rel_p90": float(np.quantile(pooled["rel"], 0.9)),
                    "failed_pred_median": (
                        float(np.median(pooled["failed_pred"])) if len(pooled["failed_pred"]) else float("nan")
                    ),
                }
            )
    return rows


def rank_sweep(
    fm: E.FactorMatrix, fractions=(0.1, 0.5, 0.9), ranks=(0, 1, 2, 4, 6, 8), regs=(0.001, 0.01, 0.1), seeds: int = 5
) -> list[tuple]:
    """Median factor error of ALS per (hidden fraction, rank, reg): how the defaults were chosen."""
    mirror = fm.mirror()
    out = []
    for fraction in fractions:
        splits = []
        for seed in range(seeds):
            hidden = E.hide_pairs(fm, fraction, np.random.default_rng(seed))
            train = np.where(hidden, np.nan, fm.values)
            splits.append((seed, train, E.estimable_mask(~np.isnan(train), hidden, mirror)))
        for rank in ranks:
            for reg in regs:
                err = np.concatenate(
                    [
                        np.abs(np.clip(E.als_complete(train, rank=rank, reg=reg, seed=seed), 0, 1) - fm.values)[ok]
                        for seed, train, ok in splits
                    ]
                )
                out.append((fraction, rank, reg, float(np.median(err)), float(np.quantile(err, 0.9))))
    return out


def print_sweep(rows: list[tuple]) -> None:
    regs = sorted({r[2] for r in rows})
    print("ALS median |err| of the factor by rank (rows) and reg (columns), pairs that ran hidden at random")
    for fraction in sorted({r[0] for r in rows}):
        print(f"  hidden {fraction:.0%}: " + "".join(f"{'reg ' + format(g, 'g'):>11}" for g in regs))
        for rank in sorted({r[1] for r in rows}):
            cells = {r[2]: r[3] for r in rows if r[0] == fraction and r[1] == rank}
            print(f"    rank {rank:<8}" + "".join(f"{cells[g]:>11.3f}" for g in regs))
    print()


# --------------------------------------------------------------------------- scale factors


def scale_factor_study(table: ThroughputTable) -> dict[str, tuple[float, float, int]]:
    """Leave-one-out relative error of multi-GPU solo throughputs."""
    jobs = sorted({(jt.model, jt.batch_size) for jt in table.job_types if jt.scale_factor > 1})
    scales = sorted({jt.scale_factor for jt in table.job_types})
    cols = [(w, s) for w in WORKER_TYPES for s in scales]
    logs = np.full((len(jobs), len(cols)), np.nan)
    for i, (model, bs) in enumerate(jobs):
        for j, (w, s) in enumerate(cols):
            value = table.solo(w, JobType(model, bs, s))
            if value > 0:
                logs[i, j] = np.log(value)
    out = {}
    for label, rank in (("log-additive (rank 0)", 0), ("log rank 1", 1)):
        errors = []
        for i, j in zip(*np.nonzero(~np.isnan(logs))):
            if cols[j][1] == 1:
                continue
            train = logs.copy()
            train[i, j] = np.nan
            pred = E.als_complete(train, rank=rank, reg=1e-3, n_iter=100)[i, j]
            errors.append(abs(np.exp(pred - logs[i, j]) - 1.0))
        errors = np.array(errors)
        out[label] = (float(np.median(errors)), float(np.quantile(errors, 0.9)), len(errors))
    return out


# --------------------------------------------------------------------------- output


def print_rows(rows: list[dict]) -> None:
    header = (
        f"{'hidden':>6}  {'method':<16}{'factor |err| med':>17}{'p90':>7}"
        f"{'tput |err| med':>16}{'p90':>8}{'tput rel med':>14}{'p90':>7}{'coverage':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['hidden_fraction']:>6.0%}  {r['method']:<16}{r['factor_median']:>17.3f}{r['factor_p90']:>7.3f}"
            f"{r['tput_median']:>16.3f}{r['tput_p90']:>8.2f}{r['tput_rel_median']:>14.1%}"
            f"{r['tput_rel_p90']:>7.0%}{r['coverage']:>10.1%}"
        )
        if r["method"] == METHODS[-1]:
            print()


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


COLOURS = {
    "als": "#1f77b4",
    "als zeros=0": "#9467bd",
    "bias only": "#2ca02c",
    "partner mean": "#ff7f0e",
    "no interference": "#d62728",
}


def write_figure(rows: list[dict], stem: Path) -> list[Path]:
    """Median (solid) and p90 (dashed) factor error per method, as .svg and .png; legend beside the axes."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        matplotlib.rcParams["svg.hashsalt"] = "rota"  # fixed ids inside the SVG: same results, same bytes
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for method in METHODS:
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["hidden_fraction"])
        x = [100 * r["hidden_fraction"] for r in mine]
        ax.plot(x, [r["factor_median"] for r in mine], color=COLOURS[method], marker="o", ms=3, label=method)
        ax.plot(x, [r["factor_p90"] for r in mine], color=COLOURS[method], linestyle="--")
    ax.plot([], [], color="grey", label="median")
    ax.plot([], [], color="grey", linestyle="--", label="90th percentile")
    ax.set_xlabel("pairs hidden from the estimator (%)")
    ax.set_ylabel("|estimated - true| co-location factor")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    seeds = max(int(r["seeds"]) for r in rows)
    ax.set_title(f"Co-location factor error on Gavel's table ({seeds} seeds per point)", fontsize=10)
    fig.tight_layout()
    paths = []
    for fmt in ("svg", "png"):
        path = stem.with_name(f"{stem.name}.{fmt}")
        # no creation date in the file: redrawing the same results gives the same bytes
        fig.savefig(path, format=fmt, dpi=120, metadata={"Date": None} if fmt == "svg" else None)
        paths.append(path)
    plt.close(fig)
    return paths


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as f:
        return [{k: (v if k == "method" else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def partial_table(table: ThroughputTable, fraction: float, seed: int) -> ThroughputTable:
    """`table` with a random `fraction` of its single-GPU (worker type, pair)s removed (both rows)."""

    def pair(r):
        ends = sorted([(r["model"], r["batch_size"] or 0), (r["partner_model"], r["partner_batch_size"] or 0)])
        return (r["worker_type"], *ends)

    pairs = sorted({pair(r) for r in table.rows if r["partner_model"] is not None and r["scale_factor"] == 1})
    rng = np.random.default_rng(seed)
    drop = {pairs[k] for k in rng.choice(len(pairs), size=int(round(fraction * len(pairs))), replace=False)}
    rows = [r for r in table.rows if r["partner_model"] is None or r["scale_factor"] != 1 or pair(r) not in drop]
    return ThroughputTable.from_records(rows, columns=COLUMNS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="3 seeds, 3 fractions")
    parser.add_argument("--table", type=Path, default=GAVEL)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results folder (default benchmarks/results, benchmarks/results/quick with --quick)",
    )
    parser.add_argument(
        "--write-partial",
        type=Path,
        metavar="CSV",
        help="only write Gavel's k80/p100/v100 table with --hide of its single-GPU pairs removed",
    )
    parser.add_argument("--hide", type=float, default=0.7)
    parser.add_argument("--sweep", action="store_true", help="also sweep rank and reg (how the defaults were chosen)")
    parser.add_argument("--replot", action="store_true", help="only redraw the figure from the results CSV in --out")
    args = parser.parse_args(argv)
    if args.out is None:  # a quick run must not overwrite the committed full results
        args.out = RESULTS / "quick" if args.quick else RESULTS
    if not args.table.exists():
        print(f"skipped: Gavel table not found at {args.table}")
        return 0
    if args.replot:  # redraw the figure from the committed results, without recomputing them
        rows = read_csv(args.out / "estimate_accuracy.csv")
        print("\n".join(f"wrote {p}" for p in write_figure(rows, args.out / "estimate_accuracy")))
        return 0
    if args.write_partial:
        partial = partial_table(gavel_single_gpu(args.table)[1], args.hide, seed=0)
        write_table(partial, args.write_partial)
        print(f"wrote {args.write_partial}: {len(partial)} rows, {args.hide:.0%} of single-GPU pairs removed")
        return 0
    fractions, seeds = ((0.1, 0.5, 0.9), 3) if args.quick else (FRACTIONS, args.seeds)

    start = time.perf_counter()
    single, multi = gavel_single_gpu(args.table)
    fm = E.build_factor_matrices(single, zeros="exclude")[0]
    fm_zero = E.build_factor_matrices(single, zeros="zero")[0]
    print(
        f"Gavel single-GPU pairs on {', '.join(WORKER_TYPES)}: {fm.values.shape[0]} job types x "
        f"{fm.values.shape[1]} (worker type, partner) columns; {int(fm.measured.sum())} entries ran, "
        f"{int(fm.failed.sum())} failed. ALS rank {E.DEFAULT_RANK}, reg {E.DEFAULT_REG}; {seeds} seeds; "
        f"errors pooled over seeds\n"
    )
    rows = accuracy_study(fm, fm_zero, fractions, seeds)
    print_rows(rows)
    failed = [r for r in rows if r["method"] in ("als", "als zeros=0") and not np.isnan(r["failed_pred_median"])]
    if failed:
        print("Hidden pairs that failed in Gavel (true factor 0), median estimated factor:")
        for r in failed:
            print(f"  {r['hidden_fraction']:>4.0%}  {r['method']:<12} {r['failed_pred_median']:.2f}")
        print()

    if args.sweep:
        print_sweep(rank_sweep(fm))

    print("Missing scale factors: leave-one-out over multi-GPU solo throughputs")
    for label, (median, p90, n) in scale_factor_study(multi).items():
        print(f"  {label:<22} relative error median {median:.0%}, p90 {p90:.0%} ({n} entries)")
    elapsed = time.perf_counter() - start

    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.out / "estimate_accuracy.csv")
    figures = write_figure(rows, args.out / "estimate_accuracy")
    print(
        f"\nwrote {args.out / 'estimate_accuracy.csv'}"
        + (" and the figure (.svg, .png)" if figures else " (matplotlib not installed: no figure)")
        + f"; {elapsed:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
