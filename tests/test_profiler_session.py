"""Running a plan: rows appended as they finish, OOM pairs recorded, resume after a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd

from models.spec import WorkloadSpec
from planner.formats.table import read_table
from profiler.devices import DeviceType
from profiler.plan import Selection, build_plan
from profiler.session import RunOptions, read_statuses, run_plan
from profiler.timing import TimingConfig

ROOT = Path(__file__).resolve().parents[1]
CPU = DeviceType("cpu", "cpu", (0, 1), "test cpu", core_ids=(0, 1))
FAST = TimingConfig(warmup_steps=1, window_s=0.03, min_windows=3, budget_s=0.3, target_spread=0.05)


def _csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def fake_registry(oom_model: bool = False) -> tuple[WorkloadSpec, ...]:
    specs = [
        WorkloadSpec("FakeA", "fakes", "profiler.fakes:build_busy", (8, 16), (1,), options={"step_s": 0.002}),
        WorkloadSpec("FakeB", "fakes", "profiler.fakes:build_busy", (), (1,), options={"step_s": 0.004}),
    ]
    if oom_model:
        specs.append(WorkloadSpec("FakeOOM", "fakes", "profiler.fakes:build_oom", (4,), (1,)))
    return tuple(specs)


def test_plan_runs_to_a_valid_table_and_pairs_of_an_oom_model_are_not_run(tmp_path):
    out = tmp_path / "t.csv"
    tasks = build_plan([CPU], Selection(registry=fake_registry(oom_model=True), pairs="all"))
    outcomes = run_plan(tasks, RunOptions(out=out, timing=FAST))
    table = read_table(out)  # full validation: every pair has its solo rows and mirror row
    assert len(table) == 4 + 6 * 2 + 4  # 4 solo, C(4,2)=6 mixed pairs (2 rows each), 4 self pairs
    frame = table.to_frame()
    oom = frame[(frame.model == "FakeOOM") | (frame.partner_model == "FakeOOM")]
    assert set(oom.status) == {"oom"} and (oom.throughput == 0).all()
    # Pairs with a model that cannot run alone are recorded without starting processes.
    not_run = [o for o in outcomes if "cannot run alone" in o.message]
    assert len(not_run) == 4 and all(o.status == "oom" for o in not_run)
    ok = frame[frame.status == "ok"]
    assert (ok.source == "measured").all() and (ok.n_steps > 0).all()
    assert all(o.status in ("ok", "oom") for o in outcomes)
    # Self-pair is one row; a mixed pair is two rows (A with B, B with A).
    fake_a = frame[(frame.model == "FakeA") & (frame.partner_model == "FakeA")]
    assert len(fake_a) == 4  # @8 with itself, @16 with itself, @8 with @16 and its mirror


def test_resume_skips_what_is_there(tmp_path):
    out = tmp_path / "t.csv"
    selection = Selection(registry=fake_registry(), pairs="none")
    tasks = build_plan([CPU], selection)
    run_plan(tasks[:1], RunOptions(out=out, timing=FAST))
    before = _csv(out)
    started = []
    outcomes = run_plan(tasks, RunOptions(out=out, timing=FAST, resume=True), on_start=started.append)
    assert [o.status for o in outcomes][0] == "skipped" and len(started) == len(tasks) - 1
    after = _csv(out)
    assert len(after) == len(tasks)
    # The first row was not remeasured. Compared on its own columns: a later row may add one (the
    # notes column is written once some row has a note, e.g. "noisy: ..." on a busy machine).
    pd.testing.assert_frame_equal(before.iloc[:1], after[before.columns].iloc[:1])
    assert (after.drop(columns=before.columns).iloc[0] == "").all()  # and left the added ones empty


DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})

    if __name__ == "__main__":  # spawned workers re-import this file: keep their imports light
        from pathlib import Path
        from models.spec import WorkloadSpec
        from profiler.devices import DeviceType
        from profiler.plan import Selection, build_plan
        from profiler.session import RunOptions, run_plan
        from profiler.timing import TimingConfig

        registry = (WorkloadSpec("FakeA", "fakes", "profiler.fakes:build_busy", (8, 16), options={{"step_s": 0.002}}),
                    WorkloadSpec("FakeB", "fakes", "profiler.fakes:build_busy", (), options={{"step_s": 0.004}}))
        cpu = DeviceType("cpu", "cpu", (0, 1), "test cpu", core_ids=(0, 1))
        timing = TimingConfig(warmup_steps=1, window_s=0.05, min_windows=3, budget_s=0.4, target_spread=0.0)
        tasks = build_plan([cpu], Selection(registry=registry, pairs="all"))
        run_plan(tasks, RunOptions(out=Path(sys.argv[1]), timing=timing, resume=True))
""")


def _rows(path: Path) -> int:
    try:
        return len(_csv(path)) if path.exists() else 0
    except Exception:  # noqa: BLE001 - cannot happen with atomic writes; the test would fail below
        return -1


def test_kill_mid_table_then_resume_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "t.csv"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(root=str(ROOT)))
    proc = subprocess.Popen([sys.executable, str(script), str(out)])
    deadline = time.monotonic() + 60
    while _rows(out) < 2 and time.monotonic() < deadline:
        assert _rows(out) >= 0, "table was half-written"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # mid-table, most likely mid-measurement
    proc.wait()
    before = _csv(out)
    expected = len(build_plan([CPU], Selection(registry=fake_registry(), pairs="all")))
    assert 2 <= len(before) < expected + 3

    subprocess.run([sys.executable, str(script), str(out)], check=True, timeout=120)
    table = read_table(out)  # validates: no duplicate keys, pairs complete
    after = _csv(out)
    keys = ["worker_type", "model", "batch_size", "partner_model", "partner_batch_size"]
    assert not after.duplicated(keys).any()
    assert len(table) == 3 + 3 * 2 + 3  # 3 solo; pairs of 3 job types: 3 mixed x 2 rows + 3 self rows
    # Rows measured before the kill are kept as they were.
    merged = before.merge(after, on=keys, suffixes=("_before", "_after"))
    assert len(merged) == len(before)
    assert (merged.throughput_before == merged.throughput_after).all()
    assert set(read_statuses(out).values()) == {"ok"}
