"""Noisy measurements are named: by the profiler as they finish and by `rota table validate`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.formats.quality import NOISY_SPREAD, is_noisy, noisy_rows, relative_spread
from planner.formats.table import ThroughputTable, write_table
from profiler.report import noisy_note, outcome_line
from profiler.session import TaskOutcome


def _row(model: str, median: float | None, iqr: float | None) -> dict:
    return {
        "worker_type": "cpu",
        "model": model,
        "batch_size": 8,
        "scale_factor": 1,
        "throughput": 10.0,
        "status": "ok",
        "step_time_median_s": median,
        "step_time_iqr_s": iqr,
        "source": "measured",
    }


def test_spread_is_iqr_over_median_and_absent_without_timings():
    assert relative_spread(_row("A", 0.2, 0.01)) == pytest.approx(0.05)
    assert relative_spread(_row("A", None, None)) is None
    assert relative_spread(_row("A", 0.0, 0.1)) is None
    assert not is_noisy(_row("A", 1.0, NOISY_SPREAD))  # at the threshold: fine
    assert is_noisy(_row("A", 1.0, NOISY_SPREAD * 1.01))
    rows = [_row("A", 0.1, 0.001), _row("B", 0.1, 0.05), _row("C", None, None), _row("D", 0.1, 0.2)]
    assert noisy_rows(rows) == [2, 4]


def test_validate_names_noisy_rows(tmp_path):
    clean = ThroughputTable.from_records([_row("A", 0.1, 0.001)])
    noisy = ThroughputTable.from_records([_row("A", 0.1, 0.001), _row("B", 0.1, 0.05)])
    write_table(clean, tmp_path / "clean.csv")
    write_table(noisy, tmp_path / "noisy.csv")
    runner = CliRunner()
    ok = runner.invoke(app, ["table", "validate", str(tmp_path / "clean.csv")])
    assert ok.exit_code == 0 and "warning" not in ok.output
    warned = runner.invoke(app, ["table", "validate", str(tmp_path / "noisy.csv")])
    assert warned.exit_code == 0
    assert "1 row(s) spread more than 10 %" in warned.output and "rows 2;" in warned.output


def test_validate_tells_how_to_measure_a_users_own_job_again(tmp_path):
    mine = {**_row("mine", 0.1, 0.05), "notes": "command python train.py"}
    runner = CliRunner()
    for rows, wanted, unwanted in (
        ([mine], "the same --workload/--command options", "; for --workload/--command jobs"),
        ([mine, _row("B", 0.1, 0.05)], "for --workload/--command jobs give their options again", "--models names"),
        ([_row("B", 0.1, 0.05)], "rota profile --models NAME", "--workload"),
    ):
        write_table(ThroughputTable.from_records(rows), tmp_path / "t.csv")
        warned = runner.invoke(app, ["table", "validate", str(tmp_path / "t.csv")])
        text = " ".join(warned.output.split())
        assert warned.exit_code == 0 and wanted in text and unwanted not in text, text


def test_profiler_marks_noisy_results_and_sums_them_up():
    task = SimpleNamespace(label="ResNet-18 bs16 on cpu")  # all outcome_line reads of a task
    clean = TaskOutcome(task, "ok", [_row("ResNet-18", 0.1, 0.001)], seconds=3)
    noisy = TaskOutcome(task, "ok", [_row("ResNet-18", 0.1, 0.04)], seconds=3)
    assert "noisy" not in outcome_line(clean)
    assert "IQR 40.0 % [yellow]noisy[/yellow]" in outcome_line(noisy)
    assert noisy_note([]) is None
    note = noisy_note([f"job{i}" for i in range(7)])
    assert note is not None and "7 measurement(s)" in note and "job4 and 2 more" in note and "--budget" in note


def test_the_profiler_marks_a_noisy_row_in_its_notes_and_leaves_a_clean_one_alone():
    from profiler.rows import mark_noisy

    clean = _row("ResNet-18", 0.1, 0.005)  # 5 % spread
    assert mark_noisy(clean) == clean
    noisy = mark_noisy({**_row("ResNet-18", 0.1, 0.025), "notes": "workload pkg.mod:build"})  # 25 %
    assert noisy["notes"] == "workload pkg.mod:build; noisy: step-time IQR 25 % of the median (above 10 %)"
    assert mark_noisy(_row("ResNet-18", 0.2, 0.03))["notes"] == ("noisy: step-time IQR 15 % of the median (above 10 %)")
    assert "notes" not in mark_noisy(_row("imported", None, None))  # no timings: nothing to judge
