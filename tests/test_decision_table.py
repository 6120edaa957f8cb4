"""Deciding on one table, progressing on another (estimated vs true throughputs),
and `rota plan`'s count of the estimated throughputs it could use."""

from __future__ import annotations

import csv
import json
import math

from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.formats.cluster import cluster_from_dict
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.policies import make_policy
from planner.rounds.engine import Engine, EngineConfig

A, B = JobType("A", 1), JobType("B", 1)
TAU = 360.0


def table(pair_a: float, pair_b: float) -> ThroughputTable:
    """One GPU type; A alone 1.0 steps/s, B alone 2.0; together (pair_a, pair_b)."""
    rows = [("A", None, 1.0), ("B", None, 2.0), ("A", "B", pair_a), ("B", "A", pair_b)]
    return ThroughputTable.from_records(
        [
            {
                "worker_type": "gpu",
                "model": m,
                "batch_size": 1,
                "scale_factor": 1,
                "partner_model": p,
                "partner_batch_size": None if p is None else 1,
                "throughput": t,
                "status": "ok",
            }
            for m, p, t in rows
        ]
    )


# Sharing is a bad deal in truth (A keeps 50 %, B 30 %), a great one in the estimate (95 %).
TRUE = table(0.5, 0.6)
GUESS = table(0.95, 1.9)
CLUSTER = cluster_from_dict({"worker_types": {"gpu": 1}})
JOBS = [Job("a", A, total_steps=100_000), Job("b", B, total_steps=100_000)]


def first_round(decision_table):
    engine = Engine(
        TRUE,
        CLUSTER,
        make_policy("max_min_fairness_packed"),
        EngineConfig(round_s=TAU),
        JOBS,
        decision_table=decision_table,
    )
    record = engine.step()
    return engine, record


def test_decision_table_changes_the_allocation_but_progress_follows_the_true_table():
    oracle, rec = first_round(None)
    assert not oracle.solves[0].allocation.pair_x  # the truth says: time-share, do not pack
    assert all(len(p.jobs) == 1 for p in rec.placements)
    (jid,) = rec.planned_steps
    assert rec.planned_steps[jid] == math.floor(TRUE.solo("gpu", A if jid == "a" else B) * TAU)

    guided, rec = first_round(GUESS)
    pair_x = guided.solves[0].allocation.pair_x
    assert pair_x and max(v.max() for v in pair_x.values()) > 0.9  # the estimate says: pack
    assert [p.jobs for p in rec.placements] == [("a", "b")]
    # ... but the pair runs at its true throughputs, not the estimated ones
    assert rec.planned_steps == {"a": math.floor(0.5 * TAU), "b": math.floor(0.6 * TAU)}
    assert guided.rate(("a", "b"), 0) == TRUE.pair("gpu", A, B)
    assert guided.outcomes["a"].steps_done == math.floor(0.5 * TAU)
    assert rec.end_s - rec.start_s == max(math.floor(0.5 * TAU) / 0.5, math.floor(0.6 * TAU) / 0.6)


def test_simulation_with_a_decision_table_is_slower_when_the_estimate_is_wrong():
    jobs = [
        Job(f"{m}{k}", jt, total_steps=2_000, arrival_s=600.0 * k) for k in range(3) for m, jt in (("a", A), ("b", B))
    ]
    config = SimulationConfig(policy="max_min_fairness_packed")
    oracle = run_simulation(TRUE, CLUSTER, Workload(jobs=jobs), config)
    fooled = run_simulation(TRUE, CLUSTER, Workload(jobs=jobs), config, decision_table=GUESS)
    same = run_simulation(TRUE, CLUSTER, Workload(jobs=jobs), config, decision_table=TRUE)
    assert oracle.status == fooled.status == "ok"
    assert fooled.config["decision_table"] == "<table>" and oracle.config["decision_table"] is None
    assert same.metrics["jct_s"] == oracle.metrics["jct_s"]
    assert fooled.metrics["jct_s"]["mean"] > oracle.metrics["jct_s"]["mean"]
    # every job still does exactly its steps
    assert all(r["steps_done"] == r["total_steps"] for r in fooled.jobs)


def test_a_pair_that_fails_in_truth_is_never_placed():
    rows = [{**r, "throughput": 0.0, "status": "oom"} if r["partner_model"] else r for r in TRUE.rows]
    oom = ThroughputTable.from_records(rows)
    engine = Engine(
        oom,
        CLUSTER,
        make_policy("max_min_fairness_packed"),
        EngineConfig(round_s=TAU),
        [Job(j.job_id, j.job_type, total_steps=3_000) for j in JOBS],
        decision_table=GUESS,
    )
    result = engine.run()
    assert result.solves[0].allocation.pair_x  # the estimate made the policy pack them ...
    assert all(len(p.jobs) == 1 for r in result.rounds for p in r.placements)  # ... but they ran alone
    assert all(o.steps_done == 3_000 for o in result.outcomes.values())


def test_simulate_command_takes_a_decision_table(tmp_path):
    from planner.formats.table import write_table

    write_table(TRUE, tmp_path / "true.csv")
    write_table(GUESS, tmp_path / "guess.csv")
    trace = tmp_path / "jobs.csv"
    with trace.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["job_id", "model", "batch_size", "total_steps"])
        writer.writerows([["a", "A", 1, 2000], ["b", "B", 1, 2000]])
    args = [
        "simulate",
        "--table",
        str(tmp_path / "true.csv"),
        "--cluster",
        "gpu=1",
        "--trace",
        str(trace),
        "--policy",
        "max_min_fairness_packed",
        "--json",
    ]
    runner = CliRunner()
    summaries = []
    for extra in ([], ["--decision-table", str(tmp_path / "guess.csv")]):
        result = runner.invoke(app, args + extra + ["--out", str(tmp_path / f"sim{len(extra)}")])
        assert result.exit_code == 0, result.output
        summaries.append(json.loads(result.output))
    assert summaries[1]["inputs"]["decision_table"].endswith("guess.csv")
    assert summaries[1]["metrics"]["jct_s"]["mean"] > summaries[0]["metrics"]["jct_s"]["mean"]


# --------------------------------------------------------------------------- rota plan's estimated count


def _partial_demo_table(path) -> None:
    """The demo table without every third of its t4 co-locations (both rows), to be estimated."""
    with (DATA / "throughputs.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    pair = lambda r: tuple(sorted([(r["model"], r["batch_size"]), (r["partner_model"], r["partner_batch_size"])]))  # noqa: E731
    pairs = sorted({pair(r) for r in rows if r["partner_model"] and r["worker_type"] == "t4"})
    drop = set(pairs[::3])
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(r for r in rows if not (r["partner_model"] and r["worker_type"] == "t4" and pair(r) in drop))


def _expected_count(full_csv) -> tuple[int, int]:
    """(estimated rows a plan of the demo jobs on the demo cluster could read, all estimated rows)."""
    with (DATA / "jobs.csv").open(newline="") as handle:
        types = {(j["model"], j["batch_size"], j["scale_factor"] or "1") for j in csv.DictReader(handle)}
    with full_csv.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if "estimated" in (r["status"], r["source"])]
    usable = [
        r
        for r in rows
        if r["worker_type"] in ("a100", "v100", "t4")
        and (r["model"], r["batch_size"], r["scale_factor"]) in types
        and (not r["partner_model"] or (r["partner_model"], r["partner_batch_size"], r["scale_factor"]) in types)
    ]
    return len(usable), len(rows)


def test_plan_counts_estimated_co_locations_it_could_use(tmp_path):
    runner = CliRunner()
    partial, full = tmp_path / "partial.csv", tmp_path / "full.csv"
    _partial_demo_table(partial)
    result = runner.invoke(app, ["table", "estimate", str(partial), "--out", str(full), "--partial"])
    assert result.exit_code == 0, result.output
    expected, total = _expected_count(full)
    assert 0 < expected < total  # some estimates involve job types the job list lacks
    args = [
        "plan",
        "--table",
        str(full),
        "--jobs",
        str(DATA / "jobs.csv"),
        "--cluster",
        str(DATA / "cluster.yaml"),
        "--policy",
        "max_min_fairness_packed",
        "--out",
        str(tmp_path / "s.json"),
    ]
    result = runner.invoke(app, args + ["--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["estimated_throughputs_used"] == expected
    result = runner.invoke(app, args)
    assert f"note: {expected} of the throughputs used are estimated" in result.output
