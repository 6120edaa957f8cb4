"""Cold start (planner/estimate/cold_start.py, completion.cold_start_factors) and `rota table estimate --solo`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from planner.cli.table import estimate_command
from planner.errors import InputError
from planner.estimate import cold_start as C
from planner.estimate import completion as E
from planner.formats.table import COLUMNS, JobType, ThroughputTable, read_table, row_key, table_problems, write_table

GAVEL = Path(__file__).resolve().parents[1] / "data" / "gavel" / "simulation_throughputs.csv"
WORKERS = ("a100", "k80", "v100")
SPEED = {"a100": 6.0, "k80": 1.0, "v100": 3.5}  # worker type effect of the rank-1 table


def solo(worker: str, model: str, batch: int | None, throughput: float, scale: int = 1, status: str = "ok") -> dict:
    return {
        "worker_type": worker,
        "model": model,
        "batch_size": batch,
        "scale_factor": scale,
        "throughput": throughput if status == "ok" else 0.0,
        "status": status,
        "source": "measured",
    }


def rank_one_table(known: int = 6, seed: int = 0) -> tuple[list[dict], dict[str, float]]:
    """Solo rows T = job speed x worker speed for ``known`` fully measured job types."""
    rng = np.random.default_rng(seed)
    speed = {f"Known{i}": float(rng.uniform(0.5, 20.0)) for i in range(known)}
    rows = [solo(w, m, None, s * SPEED[w]) for m, s in speed.items() for w in WORKERS]
    return rows, speed


def estimated(table: ThroughputTable) -> list[dict]:
    return [r for r in table.rows if r["source"] == "estimated"]


def cli() -> typer.Typer:
    app = typer.Typer()
    table_app = typer.Typer()
    app.add_typer(table_app, name="table")
    table_app.command("estimate")(estimate_command)
    return app


def run_cli(*args: str):
    return CliRunner().invoke(cli(), ["table", "estimate", *args])


# --------------------------------------------------------------------------- the solo model


def test_a_rank_one_log_speed_table_is_reproduced_from_one_cell_per_new_job():
    rows, _ = rank_one_table()
    new = {"NewA": (2.5, "k80"), "NewB": (0.7, "v100"), "NewC": (11.0, "a100")}
    rows += [solo(w, m, None, s * SPEED[w]) for m, (s, w) in new.items()]
    table = ThroughputTable.from_records(rows, columns=COLUMNS)
    new_rows, report = C.estimate_solo_rows(table)
    assert report.estimated_rows == 6 and report.not_estimable == []
    for r in new_rows:
        truth = new[r["model"]][0] * SPEED[r["worker_type"]]
        assert r["throughput"] == pytest.approx(truth, rel=1e-9)
        assert r["status"] == r["source"] == "estimated"
        assert r["device_name"].startswith("estimated: log-speed rank 1 from 1 measured cell; p90 error ")


def test_estimate_job_from_a_fingerprint_matches_the_rank_one_table():
    rows, _ = rank_one_table(known=5, seed=3)
    table = ThroughputTable.from_records(rows, columns=COLUMNS)
    est = C.estimate_job(table, ("Fresh", None), {("v100", 1): 7.0})
    by_cell = dict(zip(est.cells, est.throughput))
    assert by_cell[("v100", 1)] == 7.0
    assert by_cell[("k80", 1)] == pytest.approx(7.0 / 3.5, rel=1e-9)
    assert by_cell[("a100", 1)] == pytest.approx(7.0 * 6.0 / 3.5, rel=1e-9)
    assert est.band[est.cells.index(("v100", 1))] == 0.0
    # exact data: the hold-out band is (numerically) zero too
    assert np.nanmax(est.band) < 1e-9 and est.sibling is None


def test_a_sibling_batch_size_lends_its_profile():
    rows, _ = rank_one_table(known=4)
    profile = {"k80": 1.0, "v100": 9.0, "a100": 2.0}  # unlike every other job type
    rows += [solo(w, "Odd", 32, 4.0 * f) for w, f in profile.items()]
    rows.append(solo("k80", "Odd", 64, 2.0))
    table = ThroughputTable.from_records(rows, columns=COLUMNS)
    new_rows, report = C.estimate_solo_rows(table)
    got = {r["worker_type"]: r["throughput"] for r in new_rows}
    assert got == pytest.approx({"v100": 18.0, "a100": 4.0})
    assert report.by_sibling == 2
    assert all("profile of Odd (batch size 32)" in r["device_name"] for r in new_rows)


def test_additive_fit_is_least_squares_on_measured_entries():
    logs = np.log(np.outer([1.0, 2.0, 5.0], [1.0, 3.0, 0.5]))
    logs[0, 2] = logs[2, 0] = np.nan
    a, b = C.additive_fit(logs)
    # exact data: the fit reproduces every entry, the held-out ones too (up to rounding: some are 0)
    np.testing.assert_allclose(
        a[:, None] + b[None, :], np.log(np.outer([1.0, 2.0, 5.0], [1.0, 3.0, 0.5])), rtol=1e-9, atol=1e-12
    )


# --------------------------------------------------------------------------- Gavel's table


def gavel() -> ThroughputTable:
    return ThroughputTable([r for r in read_table(GAVEL).rows if r["worker_type"] in ("k80", "p100", "v100")])


def test_held_out_gavel_job_types_are_estimated_within_the_benchmarked_error():
    # The benchmark (docs/estimation.md) reports, for the solo throughput on one
    # worker type and job types with a sibling batch size: solo x1 median 13.5 %,
    # p90 45 %; pair factors median 6.4 %. Here: the v100 cell only.
    table = gavel()
    sm = C.build_solo_matrix(table)
    v100 = sm.cells.index(("v100", 1))
    errors, inside = [], []
    for i, family in enumerate(sm.families):
        others = [k for k in range(len(sm.families)) if k != i]
        logs, families = sm.logs[others], [sm.families[k] for k in others]
        if C.sibling_of(families, logs, family, np.where(np.arange(len(sm.cells)) == v100, 0.0, np.nan)) < 0:
            continue  # A3C, CycleGAN
        est = C.estimate_job(
            ThroughputTable([r for r in table.rows if (r["model"], r["batch_size"]) != family]),
            family,
            {("v100", 1): math.exp(sm.logs[i, v100])},
        )
        for j, cell in enumerate(est.cells):
            if cell[1] == 1 and j != v100 and not np.isnan(sm.logs[i, est.cells.index(cell)]):
                err = abs(est.throughput[j] / math.exp(sm.logs[i, j]) - 1)
                errors.append(err)
                inside.append(err <= est.band[j])
    assert len(errors) == 48
    assert np.median(errors) < 0.20 and np.quantile(errors, 0.9) < 0.6
    assert np.mean(inside) > 0.75  # the p90 band is roughly calibrated


def test_held_out_gavel_pairs_borrow_the_sibling_factors():
    table = gavel()
    fm = E.build_factor_matrices(table)[0]
    errors = []
    for r, job in enumerate(fm.job_types):
        if job.model in ("A3C", "CycleGAN"):
            continue
        own = np.array([b == job for _, b in fm.columns])
        target = np.zeros(fm.values.shape, bool)
        target[r], target[:, own] = True, True
        train = np.where(target, np.nan, fm.values)
        completed = np.clip(E.als_complete(train), 0.0, 1.0)
        hidden = E.FactorMatrix(fm.scale_factor, fm.job_types, fm.columns, train, fm.wanted, fm.failed, fm.solo)
        cold = E.cold_rows(hidden)
        assert list(np.flatnonzero(cold)) == [r]
        est, how = E.cold_start_factors(hidden, np.where(np.isnan(train), completed, train), cold, target)
        ok = target & ~np.isnan(fm.values)
        errors += list((np.abs(est - fm.values) / fm.values)[ok])
        assert all(h.startswith("as ") for h in how[ok])
    assert np.median(errors) < 0.10


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("measured", "message"),
    [
        ({}, "Fresh: no measured cell; measure its solo throughput on at least one worker type"),
        ({("v100", 1): float("nan")}, "must be a positive number, got nan"),
        ({("v100", 1): 0.0}, "must be a positive number, got 0.0"),
        ({("v100", 1): -2.0}, "must be a positive number"),
        ({("h100", 1): 3.0}, "worker type h100 at scale factor 1 has no measured row in the table"),
    ],
)
def test_bad_fingerprints_are_one_line_errors(measured, message):
    rows, _ = rank_one_table()
    table = ThroughputTable.from_records(rows, columns=COLUMNS)
    with pytest.raises(InputError, match=message.replace("(", r"\(")) as info:
        C.estimate_job(table, ("Fresh", None), measured)
    assert "\n" not in str(info.value)


def test_a_named_worker_type_without_rows_is_a_one_line_error(tmp_path):
    rows, _ = rank_one_table()
    write_table(ThroughputTable.from_records(rows, columns=COLUMNS), tmp_path / "t.csv")
    result = run_cli(str(tmp_path / "t.csv"), "--out", str(tmp_path / "o.csv"), "--worker-types", "h100, l4")
    assert isinstance(result.exception, InputError)
    text = str(result.exception)
    assert "worker type(s) h100, l4 have no measured row" in text and "rota profile" in text and "\n" not in text
    assert not (tmp_path / "o.csv").exists()


def test_job_types_without_a_runnable_row_are_listed_not_estimated():
    rows, _ = rank_one_table()
    rows += [solo("k80", "Huge", None, 0.0, status="oom")]
    table = ThroughputTable.from_records(rows, columns=COLUMNS)
    new_rows, report = C.estimate_solo_rows(table)
    assert new_rows == []
    assert report.not_estimable == [
        "Huge on a100 (no runnable measured row of Huge)",
        "Huge on v100 (no runnable measured row of Huge)",
    ]


# --------------------------------------------------------------------------- the table and the CLI


def partial_table(tmp_path: Path) -> tuple[Path, ThroughputTable]:
    """Gavel's k80/p100/v100 single-GPU table where ResNet-50 (batch size 64)
    was measured on k80 only and has no pairs, and a new worker type h100 has
    one measured row; A3C has no pairs either."""
    rows = []
    for r in gavel().rows:
        if r["scale_factor"] != 1:
            continue
        new = {(r["model"], r["batch_size"]), (r["partner_model"], r["partner_batch_size"])} & {("ResNet-50", 64)}
        if new and (r["partner_model"] is not None or r["worker_type"] != "k80"):
            continue
        if "A3C" in (r["model"], r["partner_model"]) and r["partner_model"] is not None:
            continue
        rows.append(r)
    rows.append(solo("h100", "ResNet-18", 16, 40.0))
    table = ThroughputTable.from_records(rows, columns=COLUMNS)
    write_table(table, tmp_path / "partial.csv")
    return tmp_path / "partial.csv", table


def test_solo_estimates_fill_new_job_and_worker_types_and_never_overwrite_measured_rows(tmp_path):
    path, source = partial_table(tmp_path)
    result = run_cli(str(path), "--out", str(tmp_path / "full.csv"), "--worker-types", "h100", "--holdout", "0")
    assert result.exit_code == 0, result.output
    assert "solo rows estimated: 27 rows of 25 job types" in result.output
    assert "cold start" in result.output
    _, problems = table_problems(tmp_path / "full.csv")
    assert problems == []
    full = read_table(tmp_path / "full.csv")
    before = {row_key(r): r for r in source.rows}
    after = {row_key(r): r for r in full.rows}
    assert all(after[k] == r for k, r in before.items())  # measured rows unchanged
    assert all(r["source"] == "estimated" for k, r in after.items() if k not in before)
    # every job type now has a solo row on every worker type, and a pair with everyone
    jobs = full.job_types
    assert full.worker_types == ["h100", "k80", "p100", "v100"]
    assert all(full.has(w, jt) for w in full.worker_types for jt in jobs)
    r50 = JobType("ResNet-50", 64)
    assert all(full.pair("v100", r50, b) != (0.0, 0.0) or full.solo("v100", b) == 0 for b in jobs)
    notes = {r["device_name"] for r in estimated(full) if r["model"] == "ResNet-50" and r["batch_size"] == 64}
    assert any(n.startswith("estimated: profile of ResNet-50 (batch size 32) from 1 measured cell") for n in notes)
    assert any(n.startswith("estimated: cold start, as ResNet-50 (batch size 32)") for n in notes)


def test_reestimating_a_solo_estimated_table_is_stable(tmp_path):
    path, _ = partial_table(tmp_path)
    first = run_cli(str(path), "--out", str(tmp_path / "one.csv"), "--solo", "--holdout", "0")
    assert first.exit_code == 0, first.output
    again = run_cli(str(tmp_path / "one.csv"), "--out", str(tmp_path / "two.csv"), "--solo", "--holdout", "0")
    assert again.exit_code == 0, again.output
    one = {row_key(r): r["throughput"] for r in read_table(tmp_path / "one.csv").rows}
    two = {row_key(r): r["throughput"] for r in read_table(tmp_path / "two.csv").rows}
    assert one.keys() == two.keys()
    assert all(two[k] == pytest.approx(v, rel=1e-9) for k, v in one.items())


def test_without_solo_the_command_behaves_as_before(tmp_path):
    path, _ = partial_table(tmp_path)
    result = run_cli(str(path), "--out", str(tmp_path / "full.csv"))
    assert isinstance(result.exception, InputError)
    assert "cannot estimate" in str(result.exception) and "job type A3C has 0" in str(result.exception)
    result = run_cli(str(path), "--out", str(tmp_path / "full.csv"), "--partial", "--holdout", "0")
    assert result.exit_code == 0, result.output
    assert "solo rows missing (not estimated; measure them, or pass --solo)" in result.output
    assert "cold start" not in result.output
    full = read_table(tmp_path / "full.csv")
    assert not full.has("v100", JobType("ResNet-50", 64))
    assert not any("cold start" in (r["device_name"] or "") for r in full.rows)


def test_solo_only_table_gets_its_solo_rows_without_pairs(tmp_path):
    rows, _ = rank_one_table()
    rows.append(solo("k80", "NewA", None, 3.0))
    write_table(ThroughputTable.from_records(rows, columns=COLUMNS), tmp_path / "t.csv")
    result = run_cli(str(tmp_path / "t.csv"), "--out", str(tmp_path / "o.csv"), "--solo")
    assert result.exit_code == 0, result.output
    assert "no co-location measured: pairs not estimated" in result.output
    out = read_table(tmp_path / "o.csv")
    assert out.solo("v100", JobType("NewA", None)) == pytest.approx(3.0 * 3.5)
    assert not out.has_pairs()


def test_solo_only_says_what_it_wrote_and_shows_no_empty_pair_table(tmp_path):
    # A table with no pairs: only solo rows are estimated, so no co-location table and no
    # "0 measured + 0 estimated entries" line after writing estimated rows.
    source = tmp_path / "solo.csv"
    source.write_text(
        "worker_type,model,batch_size,scale_factor,throughput,status,source\n"
        "a100,ResNet-18,64,1,40.0,ok,measured\na100,LM,10,1,20.0,ok,measured\nt4,ResNet-18,64,1,10.0,ok,measured\n"
    )
    out = tmp_path / "full.csv"
    result = run_cli(str(source), "--out", str(out), "--solo")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Estimated co-locations" not in text and "0 measured + 0 estimated" not in text
    assert f"wrote {out} with 1 estimated solo row(s)" in text
    assert "t4,LM,10,1" in out.read_text()
