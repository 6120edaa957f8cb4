"""Throughputs observed in production (planner/estimate/observed.py) and their use by plan-next.

Expected values are worked out by hand in the comments, never taken from the code under test.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.estimate.observed import (
    aggregate,
    decision_table,
    exported_rows,
    observe,
    rate_ceiling,
    record,
    stats,
    window_entries,
)
from planner.formats.cluster import cluster_from_dict
from planner.formats.jobs import Job
from planner.formats.progress import JobProgress, Progress, read_progress
from planner.formats.state import ObservedEntry, StateDocument, WindowEntry
from planner.formats.table import JobType, ThroughputTable, read_table
from planner.modes.next_round import next_round

LM_T4 = ("t4", "LM", 10, 1, None, None)
LM_A100 = ("a100", "LM", 10, 1, None, None)
R18_T4 = ("t4", "ResNet-18", 64, 1, None, None)


def small_table(lm_t4: float = 18.0, lm_t4_status: str = "estimated") -> ThroughputTable:
    """LM on t4 is only estimated (18 steps/s); everything else is measured."""
    source = "estimated" if lm_t4_status == "estimated" else "measured"
    rows = [
        ("a100", "ResNet-18", 64, 40.0, "ok", "measured"),
        ("t4", "ResNet-18", 64, 10.0, "ok", "measured"),
        ("a100", "LM", 10, 20.0, "ok", "measured"),
        ("t4", "LM", 10, lm_t4, lm_t4_status, source),
    ]
    return ThroughputTable.from_records(
        [
            {
                "worker_type": w,
                "model": m,
                "batch_size": b,
                "scale_factor": 1,
                "throughput": t,
                "status": s,
                "source": src,
            }
            for w, m, b, t, s, src in rows
        ]
    )


def entry(job_id: str, cell=LM_T4, seconds=360.0, planned=720.0, before=100.0) -> WindowEntry:
    return WindowEntry(job_id, cell, seconds, planned, before)


# ----------------------------------------------------------------- aggregation


def test_median_and_iqr_by_hand():
    # [1, 2, 3, 4, 100]: median 3; linear quartiles at positions 1 and 3: 2 and 4; IQR 2
    s = stats([100.0, 1.0, 2.0, 3.0, 4.0])
    assert (s.count, s.median, s.iqr) == (5, 3.0, 2.0)
    assert s.spread == pytest.approx(2 / 3)
    # [1, 2, 3, 4]: median 2.5; q25 at position 0.75 -> 1.75, q75 at 2.25 -> 3.25; IQR 1.5
    s = stats([4.0, 3.0, 2.0, 1.0])
    assert (s.count, s.median, s.iqr) == (4, 2.5, 1.5)
    assert s.spread == pytest.approx(0.6)


def test_one_outlier_does_not_move_the_median():
    # four reports near 2 steps/s and one at 9: the median stays 2.0, a mean would say 3.4
    assert aggregate({LM_T4: [2.0, 1.9, 9.0, 2.1, 2.0]})[LM_T4].median == 2.0


def test_record_keeps_the_latest_rates():
    from planner.estimate.observed import KEEP, Observation

    cells = record({}, [Observation("j", LM_T4, float(k + 1)) for k in range(KEEP + 5)])
    assert cells[LM_T4][0] == 6.0 and cells[LM_T4][-1] == KEEP + 5 and len(cells[LM_T4]) == KEEP


# ----------------------------------------------------------------- observing


def test_rates_from_reports_by_hand():
    table = small_table()
    window = [entry("plain"), entry("timed"), entry("short", planned=720.0)]
    reports = {
        "plain": JobProgress(steps_done=100 + 540),  # 540 steps in the round's 360 s: 1.5 steps/s
        "timed": JobProgress(steps_done=100 + 600, elapsed_s=300.0),  # its own 300 s: 2.0 steps/s
        "short": JobProgress(steps_done=100 + 90),  # 90 steps in 360 s: 0.25 steps/s
    }
    found, warnings = observe(window, reports, table)
    assert {(o.job_id, o.rate) for o in found} == {("plain", 1.5), ("timed", 2.0), ("short", 0.25)}
    assert all(o.cell == LM_T4 for o in found) and warnings == []


def test_reports_that_are_not_observations():
    table = small_table()
    window = [entry(j) for j in ("none", "zero", "planned", "finished", "finished-timed", "no-time", "gone")]
    reports = {
        "none": JobProgress(steps_done=None),
        "zero": JobProgress(steps_done=100.0),  # no step in the round
        "planned": JobProgress(steps_done=100 + 720),  # exactly the plan: it may have stopped there
        "finished": JobProgress(steps_done=100 + 300, finished=True),  # stopped early, time unknown
        "finished-timed": JobProgress(steps_done=100 + 300, finished=True, elapsed_s=100.0),  # 3 steps/s
        "no-time": JobProgress(steps_done=100 + 50, elapsed_s=0.0),
        "gone": JobProgress(steps_done=100 + 50),
    }
    found, warnings = observe(window, reports, table, skip=["gone"])
    assert [(o.job_id, o.rate) for o in found] == [("finished-timed", 3.0)]
    assert warnings == []


def test_impossible_rates_are_rejected_with_a_warning_naming_the_job():
    table = small_table()
    # the fastest measured LM rate is 20 steps/s (a100): more than 60 steps/s cannot be
    window = [entry("too-fast"), entry("backwards"), entry("fine")]
    reports = {
        "too-fast": JobProgress(steps_done=100 + 61 * 360),
        "backwards": JobProgress(steps_done=40.0),  # fewer steps than before the round
        "fine": JobProgress(steps_done=100 + 59 * 360),  # 59 steps/s is still possible
    }
    found, warnings = observe(window, reports, table)
    assert [(o.job_id, o.rate) for o in found] == [("fine", 59.0)]
    assert len(warnings) == 2
    assert warnings[0].startswith("too-fast: ") and "61 steps/s" in warnings[0] and "at most 60" in warnings[0]
    assert warnings[1].startswith("backwards: ") and "-60 steps" in warnings[1]


def test_window_keeps_jobs_with_one_cell():
    types = {"a": ("LM", 10, 1), "b": ("ResNet-18", 64, 1), "c": ("LM", 10, 1)}
    placements = [
        (360.0, ("a",), "t4"),
        (360.0, ("b", "c"), "t4"),  # b and c share a t4
        (360.0, ("a",), "t4"),
        (300.0, ("b",), "a100"),  # b moves: no single cell
        (300.0, ("c", "b"), "t4"),
    ]
    got = window_entries(placements, types, {"a": 1440.0, "c": 900.0}, {"a": 5.0, "b": 0.0, "c": 7.0})
    assert got == [
        WindowEntry("a", LM_T4, 720.0, 1440.0, 5.0),
        WindowEntry("c", ("t4", "LM", 10, 1, "ResNet-18", 64), 660.0, 900.0, 7.0),
    ]


# ----------------------------------------------------------------- the decision table


def test_estimated_cells_take_the_median_once_they_have_enough_reports():
    table = small_table()
    two = ObservedEntry(cells={LM_T4: [2.0, 3.0]})
    decided = decision_table(table, two, 3)
    assert decided.table is table and decided.applied == {}
    assert (decided.measured, decided.observed, decided.estimated) == (3, 0, 1)

    three = ObservedEntry(cells={LM_T4: [2.0, 3.0, 2.5], LM_A100: [1.0, 1.0, 1.0]})
    decided = decision_table(table, three, 3)
    assert decided.applied == {LM_T4: 2.5}  # the measured a100 cell keeps its 20 steps/s
    assert decided.table.solo("t4", JobType("LM", 10, 1)) == 2.5
    assert decided.table.solo("a100", JobType("LM", 10, 1)) == 20.0
    assert (decided.measured, decided.observed, decided.estimated) == (3, 1, 0)
    assert decision_table(table, three, 4).applied == {}


def test_a_cell_the_table_lacks_is_added():
    missing = ("t4", "LM", 10, 2, None, None)
    decided = decision_table(small_table(), ObservedEntry(cells={missing: [6.0, 8.0, 7.0]}), 3)
    assert decided.table.solo("t4", JobType("LM", 10, 2)) == 7.0
    assert (decided.measured, decided.observed, decided.estimated) == (3, 1, 1)


def test_export_leaves_out_measured_cells():
    book = ObservedEntry(cells={LM_T4: [2.0, 4.0, 3.0], LM_A100: [1.0, 1.0, 1.0], R18_T4: [9.0]})
    rows, left_out = exported_rows(book, small_table(), 3)
    assert left_out == 1  # LM on a100 is measured; ResNet-18 on t4 has one report only
    assert [(r["worker_type"], r["model"], r["throughput"], r["status"], r["source"]) for r in rows] == [
        ("t4", "LM", 3.0, "ok", "observed")
    ]
    assert rows[0]["notes"] == "median of 3 progress reports, IQR/median 0.333"  # IQR 1 (2.5 to 3.5) over 3


# ----------------------------------------------------------------- the state file

CLUSTER = cluster_from_dict({"worker_types": {"a100": 1, "t4": 3}})
JOBS = [
    Job("vision", JobType("ResNet-18", 64, 1), total_steps=1e7),
    Job("lm", JobType("LM", 10, 1), total_steps=1e7),
    Job("lm2", JobType("LM", 10, 1), total_steps=1e7),
]


def test_state_round_trip_with_the_observed_section():
    state = next_round(small_table(), CLUSTER, jobs=JOBS).state
    window = state["observed"]["window"]
    assert {w["job_id"] for w in window} == {"vision", "lm", "lm2"}
    assert all(w["seconds"] == 360.0 and w["steps_before"] == 0.0 for w in window)
    state["observed"]["cells"] = [{"cell": list(LM_T4), "rates": [2.0, 2.5]}]
    state["observed"]["applied"] = [{"cell": list(LM_T4), "rate": 2.5}]
    data = json.loads(json.dumps(state))
    document = StateDocument.from_json(data)
    assert document.observed is not None
    assert document.observed.cells == {LM_T4: [2.0, 2.5]} and document.observed.applied == {LM_T4: 2.5}
    assert document.to_json() == data


def test_state_without_the_observed_section_still_loads():
    state = next_round(small_table(), CLUSTER, jobs=JOBS).state
    del state["observed"]  # as older versions wrote it
    document = StateDocument.from_json(json.loads(json.dumps(state)))
    assert document.observed is None and "observed" not in document.to_json()
    step = next_round(small_table(), CLUSTER, state=state, progress=Progress())
    assert step.state["observed"]["cells"] == [] and len(step.state["observed"]["window"]) == 3


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ([], "observed"),
        ({"cells": [{"cell": ["t4", "LM"], "rates": [1.0]}]}, "observed"),
        ({"cells": [{"cell": list(LM_T4), "rates": [-1.0]}]}, "observed"),
        (
            {"window": [{"job_id": "lm", "cell": list(LM_T4), "seconds": 0, "planned_steps": 1, "steps_before": 0}]},
            "observed",
        ),
    ],
)
def test_a_bad_observed_section_names_the_field(section, field):
    state = next_round(small_table(), CLUSTER, jobs=JOBS).state
    state["observed"] = section
    with pytest.raises(InputError, match=f"s.json: field '{field}'"):
        StateDocument.from_json(state, "s.json")


# ----------------------------------------------------------------- next-round loop


def run_launcher(table, true_lm_t4: float, calls: int, observed_min=3):
    """Plan one round per call; the launcher reports what the jobs really did: the table's
    rates, except LM on t4, which runs at `true_lm_t4` steps/s."""
    state, progress, done, seen = None, None, {j.job_id: 0.0 for j in JOBS}, []
    for _ in range(calls):
        step = next_round(
            table,
            CLUSTER,
            state=state,
            jobs=JOBS if state is None else None,
            progress=progress,
            observed_min=observed_min,
        )
        state = json.loads(json.dumps(step.state))
        rnd = step.schedule.rounds[0]
        reports = {}
        for a in rnd["assignments"]:
            for jid in a["jobs"]:
                jt = next(j.job_type for j in JOBS if j.job_id == jid)
                rate = true_lm_t4 if (a["worker_type"], jt.model) == ("t4", "LM") else table.solo(a["worker_type"], jt)
                done[jid] += rate * (rnd["end_s"] - rnd["start_s"])
                reports[jid] = JobProgress(done[jid])
        progress = Progress(time_s=rnd["end_s"], round=rnd["index"], jobs=reports)
        cells = {tuple(c["cell"]): c["rates"] for c in state["observed"]["cells"]}
        seen.append((state["last_solve"]["x"], len(cells.get(LM_T4, [])), step))
    return seen


def test_a_wrong_estimate_is_replaced_after_three_reports_and_the_allocation_changes():
    table = small_table(lm_t4=18.0)  # estimated 18 steps/s; LM really does 2 on a t4
    seen = run_launcher(table, 2.0, 6)
    first = next(k for k, (_, count, _) in enumerate(seen) if count >= 3)
    assert first > 1
    before_x, after_x = seen[first - 1][0], seen[first][0]
    assert all(x == before_x for x, _, _ in seen[:first])  # nothing changes with fewer reports
    step = seen[first][2]
    assert step.provenance == {"measured": 3, "observed": 1, "estimated": 0}
    assert any("observed throughputs changed" in n for n in step.notes)
    # 2 steps/s x 360 s = 720 planned steps for an LM job on a t4 from now on
    planned = {j: n for a in step.schedule.rounds[0]["assignments"] for j, n in a["planned_steps"].items()}
    lm_on_t4 = [a["jobs"][0] for a in step.schedule.rounds[0]["assignments"] if a["worker_type"] == "t4"]
    assert all(planned[j] == 720 for j in lm_on_t4 if j.startswith("lm"))
    # the policy now decides as it would with the true rate measured
    truth = next_round(small_table(lm_t4=2.0, lm_t4_status="ok"), CLUSTER, jobs=JOBS).state["last_solve"]["x"]
    assert after_x != before_x
    np.testing.assert_allclose(after_x, truth, atol=1e-6)


def test_no_observed_records_but_decides_with_the_table():
    seen = run_launcher(small_table(), 2.0, 5, observed_min=None)
    assert seen[-1][1] >= 3  # recorded
    assert all(x == seen[0][0] for x, _, _ in seen)  # never used
    assert seen[-1][2].provenance == {"measured": 3, "observed": 0, "estimated": 1}


def first_round_with_lm_on_t4(table):
    """The first next-round call of JOBS, and the LM job it runs on a t4."""
    first = next_round(table, CLUSTER, jobs=JOBS)
    rnd = first.schedule.rounds[0]
    jid = next(j for a in rnd["assignments"] if a["worker_type"] == "t4" for j in a["jobs"] if j.startswith("lm"))
    return first, jid


def test_an_impossible_report_warns_and_is_not_recorded():
    table = small_table()
    first, jid = first_round_with_lm_on_t4(table)
    # 100,000 steps in 360 s is ~278 steps/s; LM's fastest measured rate is 20
    step = next_round(table, CLUSTER, state=first.state, progress=Progress(jobs={jid: JobProgress(100000.0)}))
    assert any(w.startswith(f"{jid}: ") and "not a possible rate" in w for w in step.warnings)
    assert step.state["observed"]["cells"] == []


# ----------------------------------------------------------------- files and commands


def test_progress_files_carry_elapsed_seconds(tmp_path):
    (tmp_path / "p.csv").write_text("job_id,steps_done,elapsed_s\na,10,300\nb,20,\n")
    p = read_progress(tmp_path / "p.csv")
    assert p.jobs["a"].elapsed_s == 300.0 and p.jobs["b"].elapsed_s is None
    (tmp_path / "bad.json").write_text('{"jobs": [{"job_id": "a", "steps_done": 1, "elapsed_s": -4}]}')
    with pytest.raises(InputError, match="bad.json: row 1: field 'elapsed_s'"):
        read_progress(tmp_path / "bad.json")


def test_plan_next_and_table_observed_commands(tmp_path):
    table_path = tmp_path / "t.csv"
    rows = small_table().rows
    ThroughputTable(rows).to_frame().to_csv(table_path, index=False)
    (tmp_path / "c.yaml").write_text("worker_types:\n  a100: 1\n  t4: 3\n")
    (tmp_path / "j.csv").write_text(
        "job_id,model,batch_size,total_steps\nvision,ResNet-18,64,10000000\nlm,LM,10,10000000\nlm2,LM,10,10000000\n"
    )
    runner = CliRunner()
    state = tmp_path / "state.json"
    base = ["plan-next", "--state", str(state), "--out", str(tmp_path / "r.json")]
    result = runner.invoke(
        app,
        [*base, "--table", str(table_path), "--cluster", str(tmp_path / "c.yaml"), "--jobs", str(tmp_path / "j.csv")],
    )
    assert result.exit_code == 0, result.output
    assert "table: 3 measured, 0 observed, 1 estimated cells" in " ".join(result.output.split())
    done = {"vision": 0.0, "lm": 0.0, "lm2": 0.0}
    for _ in range(4):
        rnd = json.loads((tmp_path / "r.json").read_text())["rounds"][0]
        jobs = []
        for a in rnd["assignments"]:
            for jid in a["jobs"]:
                rate = a["planned_steps"][jid] / 360 if not (a["worker_type"] == "t4" and jid.startswith("lm")) else 2.0
                done[jid] += rate * 360
                jobs.append({"job_id": jid, "steps_done": done[jid]})
        (tmp_path / "p.json").write_text(json.dumps({"round": rnd["index"], "jobs": jobs}))
        result = runner.invoke(app, [*base, "--progress", str(tmp_path / "p.json"), "--json"])
        assert result.exit_code == 0, result.output
    assert json.loads(result.output)["table_cells"] == {"measured": 3, "observed": 1, "estimated": 0}
    out = tmp_path / "observed.csv"
    result = runner.invoke(app, ["table", "observed", str(state), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()) == f"wrote {out}: 1 observed row(s) with at least 3 report(s)"
    written = read_table(out)
    assert [(r["worker_type"], r["model"], r["throughput"], r["source"]) for r in written.rows] == [
        ("t4", "LM", 2.0, "observed")
    ]
    merged = tmp_path / "merged.csv"
    assert runner.invoke(app, ["table", "merge", str(table_path), str(out), "--out", str(merged)]).exit_code == 0
    assert read_table(merged).solo("t4", JobType("LM", 10, 1)) == 2.0
    assert read_table(merged).solo("a100", JobType("LM", 10, 1)) == 20.0
    bad = runner.invoke(app, ["plan-next", "--state", str(state), "--observed-min", "0"])
    assert bad.exit_code == 2


def test_real_table_keeps_plan_next_quiet(tmp_path):
    """An all-measured table prints no provenance line (the launcher docs' output stays as it was)."""
    runner = CliRunner()
    args = ["plan-next", "--state", str(tmp_path / "s.json"), "--out", str(tmp_path / "r.json")]
    args += ["--table", str(DATA / "throughputs.csv"), "--cluster", str(DATA / "cluster.yaml")]
    result = runner.invoke(app, [*args, "--jobs", str(DATA / "jobs.csv")])
    assert result.exit_code == 0, result.output
    assert "table:" not in result.output


def test_a_job_that_ran_on_another_worker_type_is_not_observed():
    table = small_table()
    first, jid = first_round_with_lm_on_t4(table)
    # 540 steps in the 360 s round: 1.5 steps/s, if it ran on its planned t4
    on_t4 = next_round(table, CLUSTER, state=first.state, progress=Progress(jobs={jid: JobProgress(540.0)}))
    assert on_t4.state["observed"]["cells"] == [{"cell": list(LM_T4), "rates": [1.5]}]
    moved = Progress(jobs={jid: JobProgress(540.0, gpus=(("a100-0", 0),))})
    elsewhere = next_round(table, CLUSTER, state=first.state, progress=moved)
    assert elsewhere.state["observed"]["cells"] == []


def test_the_ceiling_scales_a_measured_cell_by_the_speed_ratio_the_table_knows():
    # ResNet-18 is measured on both: a100 is 4x t4. LM is measured on t4 only (5 steps/s), so on
    # an a100 it may run up to 3 x 5 x 4 = 60 steps/s; on the t4 itself up to 3 x 5 = 15.
    rows = [
        ("a100", "ResNet-18", 64, 40.0, "ok", "measured"),
        ("t4", "ResNet-18", 64, 10.0, "ok", "measured"),
        ("t4", "LM", 10, 5.0, "ok", "measured"),
        ("a100", "LM", 10, 6.0, "estimated", "estimated"),
    ]
    table = ThroughputTable.from_records(
        [
            {"worker_type": w, "model": m, "batch_size": b, "scale_factor": 1, "throughput": t, "status": s}
            | {"source": src}
            for w, m, b, t, s, src in rows
        ]
    )
    on_a100, on_t4 = ("a100", "LM", 10, 1, None, None), ("t4", "LM", 10, 1, None, None)
    assert rate_ceiling(table, on_a100) == pytest.approx(60.0)
    assert rate_ceiling(table, on_t4) == pytest.approx(15.0)
    window = [entry("fast-a100", cell=on_a100), entry("too-fast-a100", cell=on_a100), entry("too-fast-t4", cell=on_t4)]
    reports = {
        "fast-a100": JobProgress(steps_done=100 + 59 * 360),  # 12x the t4 rate: possible on an a100
        "too-fast-a100": JobProgress(steps_done=100 + 61 * 360),
        "too-fast-t4": JobProgress(steps_done=100 + 16 * 360),
    }
    found, warnings = observe(window, reports, table)
    assert [(o.job_id, o.rate) for o in found] == [("fast-a100", 59.0)]
    assert [w.split(":")[0] for w in warnings] == ["too-fast-a100", "too-fast-t4"]
    assert "at most 60" in warnings[0] and "at most 15" in warnings[1]
