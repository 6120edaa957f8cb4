"""Co-location estimation (planner/estimate.py) and `rota table estimate`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.cli.table import estimate_command
from planner.errors import InputError
from planner.estimate import completion as E
from planner.formats.table import COLUMNS, JobType, ThroughputTable, read_table, row_key, write_table

GAVEL = Path(__file__).resolve().parents[1] / "data" / "gavel"
WORKERS = ("k80", "v100")


# --------------------------------------------------------------------------- helpers


def synthetic_factors(n: int, m: int, rank: int, rng: np.random.Generator) -> np.ndarray:
    """A biased rank-`rank` matrix with entries inside (0.1, 0.95)."""
    raw = (
        rng.normal(0, 1, (n, 1))
        + rng.normal(0, 1, (1, m))
        + rng.normal(0, 1, (n, rank)) @ rng.normal(0, 1, (rank, m)) / np.sqrt(rank)
    )
    return 0.1 + 0.85 * (raw - raw.min()) / (raw.max() - raw.min())


def pair_key(w: str, a: int, b: int) -> tuple:
    return (w, min(a, b), max(a, b))


def synthetic_table(
    n_jobs: int = 8, *, seed: int = 0, drop: float = 0.3, rank: int = 2, keep_pairs=None, scale: int = 1, extra_rows=()
) -> tuple[ThroughputTable, dict]:
    """Solo rows for every job on every worker type; pair rows for the kept pairs.

    Returns the table and the true factor of every (worker, job, partner).
    """
    rng = np.random.default_rng(seed)
    jobs = [JobType(f"Job{i}", 16 * (i + 1), scale) for i in range(n_jobs)]
    factors = synthetic_factors(n_jobs, n_jobs * len(WORKERS), rank, rng)
    truth, rows = {}, []
    for w_index, w in enumerate(WORKERS):
        solo = rng.uniform(1.0, 50.0, n_jobs)
        for i, a in enumerate(jobs):
            rows.append(
                {
                    "worker_type": w,
                    "model": a.model,
                    "batch_size": a.batch_size,
                    "scale_factor": scale,
                    "throughput": solo[i],
                    "source": "measured",
                }
            )
        for i in range(n_jobs):
            for j in range(n_jobs):
                truth[(w, i, j)] = (factors[i, w_index * n_jobs + j], solo[i])
    pairs = sorted({pair_key(w, i, j) for (w, i, j) in truth})
    if keep_pairs is None:
        kept = [p for p in pairs if rng.random() >= drop]
    else:
        kept = [p for p in pairs if keep_pairs(p)]
    for w, i, j in kept:
        for a, b in {(i, j), (j, i)}:
            factor, solo = truth[(w, a, b)]
            rows.append(
                {
                    "worker_type": w,
                    "model": jobs[a].model,
                    "batch_size": jobs[a].batch_size,
                    "scale_factor": scale,
                    "partner_model": jobs[b].model,
                    "partner_batch_size": jobs[b].batch_size,
                    "throughput": factor * solo,
                    "source": "measured",
                }
            )
    rows.extend(extra_rows)
    return ThroughputTable.from_records(rows, columns=COLUMNS), {"jobs": jobs, "truth": truth}


def estimated_rows(table: ThroughputTable) -> list[dict]:
    return [r for r in table.rows if r["source"] == "estimated"]


# --------------------------------------------------------------------------- ALS


def test_als_recovers_hidden_entries_of_a_low_rank_matrix():
    rng = np.random.default_rng(1)
    truth = synthetic_factors(30, 60, rank=3, rng=rng)
    hidden = rng.random(truth.shape) < 0.4
    pred = E.als_complete(np.where(hidden, np.nan, truth), rank=3, reg=1e-4, n_iter=200, seed=0)
    err = np.abs(pred - truth)[hidden]
    assert np.median(err) < 0.005
    assert err.max() < 0.05


def test_als_rank_zero_is_an_additive_model():
    rng = np.random.default_rng(2)
    truth = 0.5 + rng.normal(0, 0.1, (10, 1)) + rng.normal(0, 0.1, (1, 12))
    hidden = rng.random(truth.shape) < 0.3
    model = E.als_fit(np.where(hidden, np.nan, truth), rank=0, reg=1e-6, n_iter=200)
    assert model.U.shape == (10, 0)
    assert np.abs(model.predict() - truth)[hidden].max() < 1e-3


def test_als_is_deterministic_for_a_seed():
    rng = np.random.default_rng(3)
    values = np.where(rng.random((6, 9)) < 0.3, np.nan, rng.random((6, 9)))
    assert np.array_equal(E.als_complete(values, seed=5), E.als_complete(values, seed=5))


# --------------------------------------------------------------------------- the table


def test_estimate_fills_every_missing_pair_with_provenance_and_mirrors():
    table, info = synthetic_table(seed=4, drop=0.35)
    full, report = E.estimate_table(table, rank=2, seed=0)
    n_total = len(WORKERS) * len(info["jobs"]) ** 2
    pairs = [r for r in full.rows if r["partner_model"] is not None]
    assert len(pairs) == n_total
    est = estimated_rows(full)
    assert est and len(est) == report.estimated_entries == n_total - report.measured_entries
    keys = {(r["worker_type"], r["model"], r["partner_model"]) for r in est}
    for r in est:
        assert r["status"] == "estimated"
        assert r["device_name"] == f"estimated: als rank 2 from {report.groups[0].measured_pairs} measured pairs"
        assert (r["worker_type"], r["partner_model"], r["model"]) in keys  # mirror is estimated too
    # measured rows are untouched
    measured = {row_key(r): r for r in table.rows}
    for r in full.rows:
        if r["source"] != "estimated":
            assert measured[row_key(r)] == r


def test_estimates_are_accurate_on_a_synthetic_low_rank_table():
    table, info = synthetic_table(n_jobs=12, seed=5, drop=0.3, rank=2)
    full, _ = E.estimate_table(table, rank=2, reg=1e-3, seed=0)
    jobs = {jt.model: k for k, jt in enumerate(info["jobs"])}
    errors = [
        abs(
            r["throughput"] / info["truth"][(r["worker_type"], jobs[r["model"]], jobs[r["partner_model"]])][1]
            - info["truth"][(r["worker_type"], jobs[r["model"]], jobs[r["partner_model"]])][0]
        )
        for r in estimated_rows(full)
    ]
    assert np.median(errors) < 0.02


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    drop=st.floats(0.05, 0.7),
    rank=st.integers(0, 5),
    reg=st.sampled_from([1e-4, 1e-2, 1.0]),
)
def test_estimates_stay_within_zero_and_solo(seed, drop, rank, reg):
    table, _ = synthetic_table(n_jobs=5, seed=seed, drop=drop)
    full, _ = E.estimate_table(table, rank=rank, reg=reg, seed=seed, partial=True)
    for r in estimated_rows(full):
        solo = full.solo(r["worker_type"], JobType(r["model"], r["batch_size"], r["scale_factor"]))
        assert 0.0 <= r["throughput"] <= solo * (1 + 1e-12)
        assert r["status"] in ("estimated", "failed")


def test_reestimating_an_estimated_table_is_stable(tmp_path):
    table, _ = synthetic_table(seed=6, drop=0.4)
    first, _ = E.estimate_table(table, seed=0)
    write_table(first, tmp_path / "full.csv")
    second, report = E.estimate_table(read_table(tmp_path / "full.csv"), seed=0)
    assert report.measured_entries == sum(1 for r in table.rows if r["partner_model"])
    a = {row_key(r): r["throughput"] for r in first.rows}
    b = {row_key(r): r["throughput"] for r in second.rows}
    assert a.keys() == b.keys()
    assert all(abs(a[k] - b[k]) <= 1e-9 * max(1.0, a[k]) for k in a)


def test_failed_pairs_are_kept_and_excluded_or_fitted_as_zero():
    failed = [
        {
            "worker_type": "k80",
            "model": m,
            "batch_size": bs,
            "scale_factor": 1,
            "partner_model": pm,
            "partner_batch_size": pbs,
            "throughput": 0,
            "status": "oom",
        }
        for m, bs, pm, pbs in (("Job0", 16, "Job1", 32), ("Job1", 32, "Job0", 16))
    ]
    table, _ = synthetic_table(
        seed=7, drop=0.3, extra_rows=failed, keep_pairs=lambda p: p != ("k80", 0, 1) and (p[1] + p[2]) % 3 != 0
    )
    for zeros in E.ZERO_MODES:
        full, report = E.estimate_table(table, zeros=zeros, seed=0)
        row = next(
            r for r in full.rows if r["worker_type"] == "k80" and r["model"] == "Job0" and r["partner_model"] == "Job1"
        )
        assert row["status"] == "oom" and row["source"] is None
        assert report.groups[0].failed_entries == 2
    excluded = E.build_factor_matrices(table, zeros="exclude")[0]
    zero = E.build_factor_matrices(table, zeros="zero")[0]
    assert zero.measured.sum() == excluded.measured.sum() + 2


def test_new_job_type_without_pairs_names_what_to_measure():
    new = [
        {"worker_type": w, "model": "NewNet", "batch_size": 8, "scale_factor": 1, "throughput": 3.0} for w in WORKERS
    ]
    table, _ = synthetic_table(seed=8, drop=0.2, extra_rows=new)
    with pytest.raises(InputError, match=r"measure next .*NewNet \(batch size 8\) with Job\d"):
        E.estimate_table(table)
    full, report = E.estimate_table(table, partial=True)
    assert not any(r["model"] == "NewNet" or r["partner_model"] == "NewNet" for r in estimated_rows(full))
    assert report.groups[0].unestimable_entries > 0
    assert report.groups[0].to_measure


def test_following_the_suggestions_makes_everything_estimable():
    new = [
        {"worker_type": w, "model": "NewNet", "batch_size": 8, "scale_factor": 1, "throughput": 3.0} for w in WORKERS
    ]
    table, _ = synthetic_table(seed=9, drop=0.5, extra_rows=new)
    fm = E.build_factor_matrices(table)[0]
    picks = E.suggest_measurements(fm, fm.measured, min_measured=2)
    measured = fm.measured.copy()
    mi, mj = fm.mirror()
    for i, j in picks:
        measured[i, j] = measured[mi[i, j], mj[i, j]] = True
    wanted = fm.wanted & ~measured
    assert np.array_equal(E.estimable_mask(measured, wanted, (mi, mj), 2), wanted)


def test_table_without_any_colocation_is_an_error():
    table, _ = synthetic_table(seed=10, keep_pairs=lambda p: False)
    with pytest.raises(
        InputError, match=r"no co-location measured.*measure next \(\d+ pairs at scale factor 1\): Job0"
    ):
        E.estimate_table(table)


def test_scale_factor_without_measurements_is_left_alone_and_noted():
    multi = [
        {"worker_type": w, "model": f"Job{i}", "batch_size": 16 * (i + 1), "scale_factor": 2, "throughput": 10.0 + i}
        for w in WORKERS
        for i in range(3)
    ]
    table, _ = synthetic_table(seed=11, extra_rows=multi)
    full, report = E.estimate_table(table)
    assert [g.scale_factor for g in report.groups] == [1, 2]
    assert "no co-location measured at scale factor 2" in report.groups[1].note
    assert not any(r["scale_factor"] == 2 for r in estimated_rows(full))


def test_pairs_need_runnable_solo_rows_on_that_worker_type():
    oom = [
        {"worker_type": "v100", "model": "Big", "batch_size": 1, "scale_factor": 1, "throughput": 0, "status": "oom"},
        {"worker_type": "k80", "model": "Big", "batch_size": 1, "scale_factor": 1, "throughput": 2.0},
    ]
    oom += [
        {
            "worker_type": "k80",
            "model": m,
            "batch_size": bs,
            "scale_factor": 1,
            "partner_model": pm,
            "partner_batch_size": pbs,
            "throughput": 1.0,
        }
        for m, bs, pm, pbs in (("Big", 1, "Job0", 16), ("Job0", 16, "Big", 1))
    ]
    table, _ = synthetic_table(seed=12, extra_rows=oom)
    full, _ = E.estimate_table(table)
    assert not any(
        r["worker_type"] == "v100" and "Big" in (r["model"], r["partner_model"]) for r in estimated_rows(full)
    )
    assert any(r["worker_type"] == "k80" and r["model"] == "Big" for r in estimated_rows(full))


def test_hidden_pairs_take_both_mirror_entries():
    table, _ = synthetic_table(seed=13, drop=0.0)
    fm = E.build_factor_matrices(table)[0]
    hidden = E.hide_pairs(fm, 0.5, np.random.default_rng(0))
    mi, mj = fm.mirror()
    rows, cols = np.nonzero(hidden)
    assert hidden[mi[rows, cols], mj[rows, cols]].all()


def test_holdout_and_bad_arguments():
    table, _ = synthetic_table(seed=14, drop=0.2)
    _, report = E.estimate_table(table, holdout=0.2)
    h = report.groups[0].holdout
    assert h is not None and h.entries > 0 and 0 <= h.median <= h.p90 <= 1
    with pytest.raises(InputError, match="rank"):
        E.estimate_table(table, rank=-1)
    with pytest.raises(InputError, match="zeros"):
        E.estimate_table(table, zeros="maybe")


def test_missing_solo_rows_are_reported_not_estimated():
    multi = [{"worker_type": "v100", "model": "Job0", "batch_size": 16, "scale_factor": 2, "throughput": 5.0}]
    table, _ = synthetic_table(seed=15, extra_rows=multi)
    full, report = E.estimate_table(table)
    assert report.missing_solo == ["Job0 (batch size 16) x2 on k80"]
    assert not full.has("k80", JobType("Job0", 16, 2))


# --------------------------------------------------------------------------- CLI


def cli() -> typer.Typer:
    app = typer.Typer()
    table_app = typer.Typer()
    app.add_typer(table_app, name="table")
    table_app.command("estimate")(estimate_command)
    return app


def test_cli_writes_the_completed_table(tmp_path):
    table, _ = synthetic_table(seed=16, drop=0.3)
    write_table(table, tmp_path / "measured.csv")
    result = CliRunner().invoke(
        cli(), ["table", "estimate", str(tmp_path / "measured.csv"), "--out", str(tmp_path / "full.csv"), "--rank", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "estimated" in result.output and "rank 2" in result.output
    full = read_table(tmp_path / "full.csv")
    assert len(estimated_rows(full)) > 0


def test_cli_json_report(tmp_path):
    table, _ = synthetic_table(seed=17, drop=0.3)
    write_table(table, tmp_path / "measured.parquet")
    result = CliRunner().invoke(
        cli(),
        [
            "table",
            "estimate",
            str(tmp_path / "measured.parquet"),
            "--out",
            str(tmp_path / "full.parquet"),
            "--json",
            "--holdout",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["method"] == "als" and report["estimated_entries"] > 0
    assert report["groups"][0]["holdout"] is None


def test_cli_user_errors_raise_input_error(tmp_path):
    table, _ = synthetic_table(seed=18, keep_pairs=lambda p: False)
    write_table(table, tmp_path / "solo.csv")
    runner = CliRunner()
    cases = [
        (["--out", str(tmp_path / "o.csv")], "no co-location measured"),
        (["--out", str(tmp_path / "o.txt")], "unsupported table format"),
        (["--out", str(tmp_path / "o.csv"), "--zeros", "maybe"], "unknown value 'maybe'"),
    ]
    for extra, message in cases:
        result = runner.invoke(cli(), ["table", "estimate", str(tmp_path / "solo.csv"), *extra])
        assert isinstance(result.exception, InputError), result.output
        assert message in str(result.exception)
    result = runner.invoke(cli(), ["table", "estimate", str(tmp_path / "absent.csv"), "--out", str(tmp_path / "o.csv")])
    assert isinstance(result.exception, InputError) and "file not found" in str(result.exception)


# --------------------------------------------------------------------------- Gavel's table


def test_gavel_hidden_pairs_beat_the_partner_mean():
    from planner.formats.gavel_json import import_gavel

    full = import_gavel(GAVEL / "simulation_throughputs.json")
    rows = [r for r in full.rows if r["worker_type"] in ("k80", "p100", "v100") and r["scale_factor"] == 1]
    fm = E.build_factor_matrices(ThroughputTable(rows))[0]
    hidden = E.hide_pairs(fm, 0.3, np.random.default_rng(0))
    train = np.where(hidden, np.nan, fm.values)
    ok = E.estimable_mask(~np.isnan(train), hidden, fm.mirror())
    als = np.abs(np.clip(E.als_complete(train), 0, 1) - fm.values)[ok]
    seen = ~np.isnan(train)
    col_mean = np.where(seen, train, 0).sum(axis=0) / np.maximum(seen.sum(axis=0), 1)
    mean = np.abs(col_mean[None, :] - fm.values)[ok]
    assert ok.sum() > 0.95 * hidden.sum()
    assert np.median(als) < 0.05
    assert np.median(als) < 0.7 * np.median(mean)
