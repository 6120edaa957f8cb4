"""Restart cost learnt from progress reports: the overhead of each (re)start measured against the
table's step rate, kept in the state with median and IQR, charged once enough reports exist,
written by `rota table observed --restarts`; a simulated lab with a known true overhead shows
the estimate converging to it."""

from __future__ import annotations

import csv
import json
import math
import random

import pytest
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.estimate.restart_learnt import learnt_costs, overhead_stats, overheads, record_overheads
from planner.formats.cluster import read_cluster
from planner.formats.jobs import read_jobs
from planner.formats.progress import JobProgress
from planner.formats.state import WindowEntry
from planner.formats.table import JobType, ThroughputTable, read_table
from planner.modes.next_round import next_round
from planner.modes.state import Progress

TABLE = read_table(DATA / "throughputs.csv")
CLUSTER = read_cluster(DATA / "cluster.yaml")
JOBS = read_jobs(DATA / "jobs.csv", table=TABLE, cluster=CLUSTER)
RESNET = JobType("ResNet-18", 64, 1)
RATE = TABLE.solo("a100", RESNET)
CELL = ("a100", "ResNet-18", 64, 1, None, None)


def _entry(starts=1, seconds=360.0, planned=None, jid="j"):
    planned = RATE * seconds if planned is None else planned
    return WindowEntry(jid, CELL, seconds, planned, 100.0, starts)


def test_overhead_is_the_time_the_steps_do_not_account_for():
    # 90 s of a 360 s round lost: the job did (360 - 90) s of steps at the table's rate.
    steps = RATE * 270
    found = overheads([_entry()], {"j": JobProgress(100 + steps, elapsed_s=360.0)}, TABLE)
    assert [o.seconds for o in found] == pytest.approx([90.0])
    assert found[0].key == ("a100", "ResNet-18", 64, 1)
    # Two starts in the reported rounds share the loss.
    two = overheads([_entry(starts=2)], {"j": JobProgress(100 + steps, elapsed_s=360.0)}, TABLE)
    assert [o.seconds for o in two] == pytest.approx([45.0])


@pytest.mark.parametrize(
    "entry, report",
    [
        (_entry(starts=0), JobProgress(100 + RATE * 270, elapsed_s=360.0)),  # a lease extension: no restart
        (_entry(), JobProgress(None, elapsed_s=360.0)),  # no steps said
        (_entry(), JobProgress(100 + RATE * 400, elapsed_s=360.0)),  # faster than the table allows
        (_entry(), JobProgress(100 + RATE * 10, finished=True)),  # finished, no elapsed_s: stopped early
        (_entry(planned=RATE * 300), JobProgress(100 + RATE * 300)),  # its planned steps, no elapsed_s
    ],
)
def test_what_is_not_a_measurement(entry, report):
    assert overheads([entry], {"j": report}, TABLE) == []


def test_an_estimated_cell_teaches_no_restart_cost():
    # An estimate may be off several times over; the overhead measured against it would be too.
    rows = [dict(r, status="estimated") if r["worker_type"] == "a100" else r for r in TABLE.rows]
    estimated = ThroughputTable(rows, path="estimated.csv")  # type: ignore[arg-type]
    report = {"j": JobProgress(100 + RATE * 270, elapsed_s=360.0)}
    assert overheads([_entry()], report, estimated) == []
    assert len(overheads([_entry()], report, TABLE)) == 1


def test_exact_reports_teach_an_overhead_of_exactly_zero():
    # steps / rate does not give the seconds back to the last bit; a learnt cost of 1e-13 s
    # would still cost a job a step in every round it restarts (floor(r * (tau - 1e-13))).
    seconds = [359.9 + k / 97 for k in range(200)]
    assert any(s - (RATE * s) / RATE != 0 for s in seconds)  # the noise this guards against
    for s in seconds:
        found = overheads([_entry(seconds=s)], {"j": JobProgress(100 + RATE * s, elapsed_s=s)}, TABLE)
        assert [o.seconds for o in found] == [0.0]


def test_no_step_at_all_caps_the_overhead_at_the_seconds_run():
    found = overheads([_entry()], {"j": JobProgress(100.0, elapsed_s=200.0)}, TABLE)
    assert [o.seconds for o in found] == [200.0]


def test_median_needs_enough_reports_and_keeps_the_latest():
    samples: dict = {}
    for seconds in (80.0, 100.0):
        samples = record_overheads(samples, overheads([_entry()], _reported(seconds), TABLE))
    assert learnt_costs(samples, 3) == {}
    samples = record_overheads(samples, overheads([_entry()], _reported(90.0), TABLE))
    assert learnt_costs(samples, 3) == {("a100", RESNET): pytest.approx(90.0)}
    s = overhead_stats(samples)[("a100", "ResNet-18", 64, 1)]
    assert s.count == 3 and s.iqr == pytest.approx(10.0)


def _reported(lost: float) -> dict:
    return {"j": JobProgress(100 + RATE * (360 - lost), elapsed_s=360.0)}


class TrueOverheadLauncher:
    """Runs each planned round as real jobs would: a job that starts on GPUs it did not hold the
    round before first loses its true overhead (drawn around `mean` s), then trains at the
    table's rate; it reports its steps and the seconds it ran."""

    def __init__(self, mean: float, spread: float, seed: int = 0):
        self.mean, self.spread = mean, spread
        self.random = random.Random(seed)
        self.done = {j.job_id: 0.0 for j in JOBS}
        self.held: dict[str, tuple] = {}
        self.true: list[float] = []

    def run(self, schedule: dict) -> Progress:
        rnd = schedule["rounds"][-1]
        seconds = rnd["end_s"] - rnd["start_s"]
        reports, held = {}, {}
        for a in rnd["assignments"]:
            for jid in a["jobs"]:
                where = (a["worker_type"], tuple((g["node"], g["gpu"]) for g in a["gpus"]))
                held[jid] = where
                rate = TABLE.solo(a["worker_type"], JobType(*_type(schedule, jid)))
                lost = 0.0
                if self.held.get(jid) != where:
                    lost = self.random.uniform(self.mean - self.spread, self.mean + self.spread)
                    self.true.append(lost)
                left = schedule["jobs"][jid]["total_steps"] - self.done[jid]
                steps = min(left, math.floor(rate * max(0.0, seconds - lost)))
                self.done[jid] += steps
                finished = self.done[jid] >= schedule["jobs"][jid]["total_steps"] - 1e-9
                elapsed = lost + steps / rate if finished else seconds
                reports[jid] = JobProgress(self.done[jid], finished, elapsed_s=elapsed)
        self.held = held
        return Progress(time_s=rnd["end_s"], round=rnd["index"], jobs=reports)


def _type(schedule: dict, jid: str) -> tuple:
    info = schedule["jobs"][jid]
    return info["model"], info["batch_size"], info["scale_factor"]


def test_the_learnt_cost_converges_to_the_true_overhead_and_is_charged():
    launcher = TrueOverheadLauncher(mean=90.0, spread=30.0)  # true overheads uniform in 60-120 s
    state, progress, history = None, None, []
    for _ in range(40):
        step = next_round(
            TABLE, CLUSTER, state=state, jobs=JOBS if state is None else None, policy="max_min_fairness_perf",
            progress=progress,
        )  # fmt: skip
        state = json.loads(json.dumps(step.state))
        if not step.schedule.rounds:
            break
        progress = launcher.run(step.schedule.to_json())
        learnt = state.get("restart", {}).get("learnt", [])
        values = [v for entry in learnt for v in entry["overheads_s"]]
        if values:
            history.append(sorted(values)[len(values) // 2])
    assert len(launcher.true) > 20
    # Each learnt overhead is a true one, up to the fraction of a step the integer steps drop.
    learnt = {tuple(e["cell"]): e["overheads_s"] for e in state["restart"]["learnt"]}
    pooled = sorted(v for values in learnt.values() for v in values)
    assert len(pooled) >= 20 and all(55.0 <= v <= 125.0 for v in pooled)
    median = pooled[len(pooled) // 2]
    assert abs(median - 90.0) < 12.0, f"median {median:.1f} s of {len(pooled)} overheads"
    assert abs(history[-1] - 90.0) < abs(history[0] - 90.0) or abs(history[0] - 90.0) < 12.0
    # Once a job type has 3 restarts its median is charged: the state tallies lost GPU time.
    assert state["restart"]["starts"] > 0 and sum(state["restart"]["lost_gpu_s"].values()) > 0
    costs = learnt_costs({k: v for k, v in learnt.items()}, 3)
    assert costs and all(55.0 <= c <= 125.0 for c in costs.values())


def test_table_observed_writes_the_learnt_restart_costs(tmp_path):
    launcher = TrueOverheadLauncher(mean=60.0, spread=0.0)
    state, progress = None, None
    for _ in range(25):
        step = next_round(TABLE, CLUSTER, state=state, jobs=JOBS if state is None else None, progress=progress)
        state = json.loads(json.dumps(step.state))
        if not step.schedule.rounds:
            break
        progress = launcher.run(step.schedule.to_json())
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    res = CliRunner().invoke(
        app,
        ["table", "observed", str(path), "--table", "data/throughputs.csv", "--out", str(tmp_path / "o.csv")]
        + ["--restarts", str(tmp_path / "r.csv")],
    )
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert rows and all(int(r["restarts"]) >= 3 for r in rows)
    assert all(abs(float(r["median_s"]) - 60.0) < 1.0 for r in rows), rows
    same = CliRunner().invoke(
        app, ["table", "observed", str(path), "--out", str(tmp_path / "o.csv"), "--restarts", str(tmp_path / "o.csv")]
    )
    assert same.exit_code == 2 and "--restarts" in same.output
