"""Cold start: how well are a new job type's throughputs estimated from 1-3 measured cells?

Protocol, on Gavel's table (k80, p100, v100; the `_unconsolidated` types are
left out because their single-GPU numbers are copies that would leak hidden
values): hold out one job family (model, batch size) at a time -- all 26
single-GPU job types, with their multi-GPU rows where Gavel has them (19) --
remove every row of it (solo and pairs), and estimate it back from a
fingerprint:

* ``1 solo``: its single-GPU throughput on one worker type (3 choices);
* ``2 solo``: on two worker types (3 choices);
* ``3 solo``: on all three (only multi-GPU cells and pairs left to estimate);
* ``2 solo + 1 pair``: two solo cells and one co-location (both mirror
  entries) with a random partner on one of them (3 choices x 2 partners).

Targets: every other solo cell that ran (single-GPU and multi-GPU cells
reported apart) and every single-GPU co-location factor of the job that ran,
both directions (the new job next to a partner, a partner next to the new
job). Relative error = |estimate - true| / true, pooled over all held-out
families and fingerprints.

Methods: solo -- the cold-start model of `planner.estimate.cold_start` (log
speed, biases + rank 1) and its rank-0 variant; baselines (a) *same model,
other batch size* (the nearest batch size of the same model, throughput scaled
by the batch-size ratio; no fingerprint used; A3C and CycleGAN have none) and
(b) *worker-type speed ratio* (each measured cell times the median ratio
between the two cells over the other job types, geometric mean over the
measured cells). Pairs -- the co-location model of `rota table estimate`
(ALS rank 4) with the new job's row fitted from what is measured (nothing:
biases only), baselines (a) the sibling batch size's factors and (c) the
partner's mean factor (a new job next to partner b: b's mean column; b next
to the new job: b's mean row on that worker type).

The "in band" column is the fraction of solo estimates whose true value lies
within the hold-out band the estimator reports (p90 relative error; a 90 %
band is calibrated if this is near 0.9).

Usage: python benchmarks/bench_estimate_cold.py [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.estimate import cold_start as C  # noqa: E402
from planner.estimate import completion as E  # noqa: E402
from planner.formats.table import ThroughputTable, read_table  # noqa: E402

GAVEL = ROOT / "data" / "gavel" / "simulation_throughputs.csv"
WORKER_TYPES = ("k80", "p100", "v100")
FINGERPRINTS = ("1 solo", "2 solo", "3 solo", "2 solo + 1 pair")


def gavel(path: Path = GAVEL) -> ThroughputTable:
    return ThroughputTable([r for r in read_table(path).rows if r["worker_type"] in WORKER_TYPES])


def single_gpu_cells(sm: C.SoloMatrix) -> list[int]:
    return [j for j, (_, s) in enumerate(sm.cells) if s == 1]


def fingerprints(sm: C.SoloMatrix, rng: np.random.Generator, quick: bool) -> list[tuple[str, tuple[int, ...], int]]:
    """(kind, seen single-GPU cell indices, number of pairs revealed)."""
    single = single_gpu_cells(sm)
    out: list[tuple[str, tuple[int, ...], int]] = []
    out += [("1 solo", (j,), 0) for j in single]
    out += [("2 solo", tuple(c), 0) for c in ((single[0], single[1]), (single[0], single[2]), (single[1], single[2]))]
    out.append(("3 solo", tuple(single), 0))
    out += [("2 solo + 1 pair", c, 1) for (_, c, _) in out[3:6] for _ in range(1 if quick else 2)]
    return out[::3] if quick else out


# --------------------------------------------------------------------------- solo


def sibling(sm: C.SoloMatrix, i: int, others: list[int]) -> int | None:
    """The other batch size of the same model closest (in log) to family i's."""
    model, bs = sm.families[i]
    same = [k for k in others if sm.families[k][0] == model and sm.families[k][1] and bs]
    if not same:
        return None
    return min(same, key=lambda k: abs(np.log(sm.families[k][1] / bs)))  # type: ignore[operator]


def speed_ratio(train: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Baseline (b): each measured cell times the median cell-to-cell ratio of the other job types."""
    estimates = []
    for c0 in np.flatnonzero(~np.isnan(row)):
        diff = np.nanmedian(train - train[:, [c0]], axis=0)
        estimates.append(row[c0] + diff)
    return np.mean(estimates, axis=0)


def solo_estimates(sm: C.SoloMatrix, i: int, seen: np.ndarray, model: C.SoloModel) -> dict[str, np.ndarray]:
    others = [k for k in range(len(sm.families)) if k != i]
    train, families = sm.logs[others], [sm.families[k] for k in others]
    row = np.where(seen, sm.logs[i], np.nan)
    out = {
        "cold-start": C.predict_row(model, train, families, sm.families[i], row)[0],
        "low-rank model alone": model.predict(row[None, :])[0],
        "(b) speed ratio": speed_ratio(train, row),
    }
    s = sibling(sm, i, others)
    if s is not None:
        out["(a) other batch size"] = sm.logs[s] + np.log(sm.families[s][1] / sm.families[i][1])  # type: ignore[operator]
    return out


# --------------------------------------------------------------------------- pairs


def pair_estimates(
    fm: E.FactorMatrix, r: int, reveal: list[tuple[int, int]], sib: int | None, seed: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Estimates of every entry of row r and of every column (w, job r), with
    those entries hidden except ``reveal`` (and their mirrors)."""
    job = fm.job_types[r]
    own_cols = np.array([b == job for _, b in fm.columns])
    target = np.zeros(fm.values.shape, bool)
    target[r, :] = True
    target[:, own_cols] = True
    train = np.where(target, np.nan, fm.values)
    for a, b in reveal:
        train[a, b] = fm.values[a, b]
    completed = np.clip(E.als_complete(train, seed=seed), 0.0, 1.0)
    seen = ~np.isnan(train)
    hidden = replace(fm, values=train)
    cold = E.cold_rows(hidden, E.COLD_START_PAIRS)
    if cold.any():  # what `rota table estimate --solo` does for a job type without measured pairs
        estimate, _ = E.cold_start_factors(hidden, np.where(seen, train, completed), cold, target & (fm.solo > 0))
        out = {"cold-start": estimate}
    else:  # its row has a measured pair: the plain completion
        out = {"cold-start": completed}
    col_mean = np.where(seen, train, 0).sum(axis=0) / np.maximum(seen.sum(axis=0), 1)
    mean = np.broadcast_to(col_mean, train.shape).copy()
    for w in {w for w, _ in fm.columns}:  # b next to the new job: b's mean row on w
        on_w = np.array([c[0] == w for c in fm.columns])
        row_mean = np.where(seen[:, on_w], train[:, on_w], 0).sum(axis=1) / np.maximum(seen[:, on_w].sum(axis=1), 1)
        mean[:, own_cols & on_w] = row_mean[:, None]
    out["(c) partner mean"] = mean
    if sib is not None:
        sib_job = fm.job_types[sib]
        est = fm.values.copy()
        est[r, :] = fm.values[sib, :]
        for j in np.flatnonzero(own_cols):
            k = fm.columns.index((fm.columns[j][0], sib_job))
            est[:, j] = fm.values[:, k]
        out["(a) other batch size"] = est
    return out, target & ~seen & ~np.isnan(fm.values)


# --------------------------------------------------------------------------- the study


Errors = dict[tuple[str, str, str, str], list[float]]


def record(errors: Errors, key: tuple[str, str, str], estimates: dict[str, np.ndarray], truth, mask) -> None:
    """Relative errors of every method on the entries of ``mask`` where all of them have an estimate."""
    common = mask & np.logical_and.reduce([~np.isnan(e) for e in estimates.values()])
    subset = "with a sibling" if "(a) other batch size" in estimates else "without a sibling"
    for name, est in estimates.items():
        errors[(subset, *key, name)].extend(np.abs(np.expm1(est - truth))[common].tolist())


def solo_trial(sm, i: int, seen: np.ndarray, model, kind: str, errors: Errors, in_band: dict) -> None:
    others = [k for k in range(len(sm.families)) if k != i]
    train, families = sm.logs[others], [sm.families[k] for k in others]
    truth = sm.logs[i]
    targets = ~seen & ~np.isnan(truth)
    estimates = solo_estimates(sm, i, seen, model)
    single = np.array([s == 1 for _, s in sm.cells])
    record(errors, (kind, "solo x1"), estimates, truth, targets & single)
    record(errors, (kind, "solo multi-GPU"), estimates, truth, targets & ~single)
    bands = C.holdout_band(train, families, model, seen)
    _, used = C.predict_row(model, train, families, sm.families[i], np.where(seen, truth, np.nan))
    by_sibling = ~np.isnan(train[used]) if used >= 0 else np.zeros(len(truth), bool)
    band = np.where(by_sibling, bands.sibling, bands.model)
    err = C.relative_error(estimates["cold-start"], truth)
    checked = targets & ~np.isnan(band)
    in_band[kind].extend((err[checked] <= band[checked]).tolist())


def revealed_pair(fm: E.FactorMatrix, r: int, workers: set[str], rng: np.random.Generator) -> list[tuple[int, int]]:
    """One measured pair of job r with a random partner on one of ``workers`` (and its mirror); [] if none ran."""
    candidates = [j for j, (w, b) in enumerate(fm.columns) if w in workers and b != fm.job_types[r]]
    candidates = [j for j in candidates if not np.isnan(fm.values[r, j])]
    if not candidates:
        return []
    j = int(rng.choice(candidates))
    mi, mj = fm.mirror()
    return [(r, j), (int(mi[r, j]), int(mj[r, j]))]


def row_of(fm: E.FactorMatrix, family: C.Family) -> int:
    return next(k for k, jt in enumerate(fm.job_types) if (jt.model, jt.batch_size) == family)


def run(quick: bool = False, seed: int = 0) -> dict:
    table = gavel()
    sm = C.build_solo_matrix(table)
    fm = E.build_factor_matrices(table)[0]
    rng = np.random.default_rng(seed)
    errors: Errors = defaultdict(list)
    in_band: dict[str, list[bool]] = defaultdict(list)
    for i, family in enumerate(sm.families):
        others = [k for k in range(len(sm.families)) if k != i]
        model = C.fit_solo_model(sm.logs[others])
        r = row_of(fm, family)
        sib = sibling(sm, i, others)
        sib_r = None if sib is None else row_of(fm, sm.families[sib])
        for kind, cells, n_pairs in fingerprints(sm, rng, quick):
            seen = np.zeros(len(sm.cells), bool)
            seen[list(cells)] = True
            if np.isnan(sm.logs[i, seen]).any():
                continue  # a fingerprint cell that cannot run (OOM) is not a fingerprint
            solo_trial(sm, i, seen, model, kind, errors, in_band)
            reveal = revealed_pair(fm, r, {sm.cells[c][0] for c in cells}, rng) if n_pairs else []
            if n_pairs and not reveal:
                continue  # every pair of this job on those worker types failed
            estimates, targets = pair_estimates(fm, r, reveal, sib_r, seed)
            logs = {name: np.log(np.maximum(e, 1e-12)) for name, e in estimates.items()}
            record(errors, (kind, "pair factor"), logs, np.log(np.maximum(fm.values, 1e-12)), targets)
    return summarise(errors, in_band)


def summarise(errors: Errors, in_band: dict) -> dict:
    rows = []
    for (subset, kind, group, name), values in sorted(errors.items(), key=lambda kv: _order(kv[0])):
        v = np.asarray(values)
        if not len(v):
            continue
        rows.append(
            {
                "families": subset,
                "fingerprint": kind,
                "target": group,
                "method": name,
                "n": len(v),
                "median": float(np.median(v)),
                "p90": float(np.quantile(v, 0.9)),
            }
        )
    bands = {k: float(np.mean(v)) for k, v in in_band.items() if v}
    return {"rows": rows, "in_band": bands}


_TARGETS = ("solo x1", "solo multi-GPU", "pair factor")


def _order(key: tuple[str, str, str, str]) -> tuple:
    subset, kind, group, name = key
    return (
        subset != "with a sibling",
        FINGERPRINTS.index(kind),
        _TARGETS.index(group),
        not name.startswith("cold"),
        name,
    )


def print_table(result: dict, say: Callable[[str], None] = print) -> None:
    for subset in ("with a sibling", "without a sibling"):
        say(f"Job types {subset} (another batch size of the same model):\n")
        print_rows([row for row in result["rows"] if row["families"] == subset], say)
    say(
        "solo estimates inside their p90 hold-out band: "
        + ", ".join(f"{k} {100 * v:.0f} %" for k, v in sorted(result["in_band"].items(), key=lambda kv: kv[0]))
    )


def print_rows(rows: list[dict], say: Callable[[str], None]) -> None:
    say("| fingerprint | target | method | n | median | p90 |")
    say("|---|---|---|---:|---:|---:|")
    last = None
    for row in rows:
        head = (row["fingerprint"], row["target"])
        cols = list(head) if head != last else ["", ""]
        last = head
        say(
            f"| {cols[0]} | {cols[1]} | {row['method']} | {row['n']} | "
            f"{100 * row['median']:.1f} % | {100 * row['p90']:.1f} % |"
        )
    say("")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one fingerprint of each kind (a smoke run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = run(quick=args.quick, seed=args.seed)
    print_table(result)
    print(f"\n{time.perf_counter() - start:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
