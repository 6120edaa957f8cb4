"""Finish estimates of a short plan (planner.estimate.finish): the policy's allocation run forward as a fluid."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import DATA

import planner.modes.plan as plan_mode
from planner.estimate.finish import (
    FluidJobs,
    PolicyRates,
    Rates,
    engine_finishes,
    fluid_finishes,
    round_shares,
    starts_per_round,
)
from planner.formats.cluster import cluster_from_dict, read_cluster
from planner.formats.jobs import Job, read_jobs
from planner.formats.table import JobType, ThroughputTable, read_table
from planner.modes.plan import PlanOptions, plan_batch
from planner.policies import make_policy
from planner.policies.fifo import Fifo
from planner.rounds.engine import Engine, EngineConfig
from planner.rounds.restart import charged_restarts

M8 = JobType("M", 8, 1)
WIDE = JobType("W", 8, 4)  # needs 4 GPUs at once
ONE_GPU = cluster_from_dict({"worker_types": {"g": {"gpus": 1}}})


def _table(*rows: tuple[str, JobType, float]) -> ThroughputTable:
    return ThroughputTable.from_records(
        [
            {
                "worker_type": w,
                "model": jt.model,
                "batch_size": jt.batch_size,
                "scale_factor": jt.scale_factor,
                "throughput": r,
                "status": "ok",
            }
            for w, jt, r in rows
        ]
    )


def _fluid(jobs: list[Job], table, cluster, policy="max_min_fairness_perf") -> dict[str, float]:
    rates = PolicyRates(table, cluster, make_policy(policy), jobs)
    fluid = FluidJobs.of({j.job_id: j.total_steps for j in jobs}, arrival_s={j.job_id: j.arrival_s for j in jobs})
    return fluid_finishes(fluid, 0.0, rates)


# --------------------------------------------------------------------------- by hand


def test_two_jobs_on_one_gpu_share_it_then_the_longer_one_has_it_alone():
    """Max-min fairness on one GPU at 2 steps/s: each job gets half (1 step/s). a (3600 steps)
    finishes at 3600 s; b has done 3600 of its 10800 steps, and runs the other 7200 alone at
    2 steps/s: 3600 s more, so 7200 s."""
    jobs = [Job("a", M8, total_steps=3600), Job("b", M8, total_steps=10800)]
    finish = _fluid(jobs, _table(("g", M8, 2.0)), ONE_GPU)
    assert finish == pytest.approx({"a": 3600.0, "b": 7200.0})


def test_weights_split_the_gpu_in_their_ratio():
    """Weights 3 and 1 at 1 step/s: a runs at 0.75, finishing its 2700 steps at 3600 s; b has done
    900 by then and runs its 2700 left alone at 1 step/s: 6300 s."""
    jobs = [Job("a", M8, total_steps=2700, priority_weight=3.0), Job("b", M8, total_steps=3600)]
    finish = _fluid(jobs, _table(("g", M8, 1.0)), ONE_GPU)
    assert finish == pytest.approx({"a": 3600.0, "b": 6300.0})


def test_a_job_arriving_later_joins_at_its_arrival():
    """a alone at 1 step/s until b arrives at 1000 s (1000 of a's 3000 steps done); then half each:
    a's 2000 left take 4000 s (5000 s); b did 2000 of its 4000 by then, the rest alone: 7000 s."""
    jobs = [Job("a", M8, total_steps=3000), Job("b", M8, total_steps=4000, arrival_s=1000.0)]
    finish = _fluid(jobs, _table(("g", M8, 1.0)), ONE_GPU)
    assert finish == pytest.approx({"a": 5000.0, "b": 7000.0})


def test_a_job_that_fits_nowhere_gets_no_finish():
    jobs = [Job("a", M8, total_steps=3600), Job("wide", WIDE, total_steps=3600)]
    table = _table(("g", M8, 1.0), ("g", WIDE, 4.0))  # measured, but the cluster has one GPU
    assert _fluid(jobs, table, ONE_GPU) == pytest.approx({"a": 3600.0})


def test_the_loop_follows_any_rate_function():
    """Three jobs sharing 1 step/s equally (processor sharing), the third arriving at t = 2:
    x finishes at 2 (1 step), then y and z share: y (2 steps, 1 done) at 4, z (3 steps) at 6."""

    def equal_shares(present, now, left):
        return Rates(np.full(len(present), 1.0 / len(present)), float(len(present)))

    jobs = FluidJobs.of({"x": 1.0, "y": 2.0, "z": 3.0}, arrival_s={"z": 2.0})
    assert fluid_finishes(jobs, 0.0, equal_shares) == pytest.approx({"x": 2.0, "y": 4.0, "z": 6.0})


def test_a_small_budget_lets_several_events_pass_in_one_step():
    """With no budget for re-solves every job finishes at the first call's rates."""
    calls = []

    def equal_shares(present, now, left):
        calls.append(len(present))
        return Rates(np.full(len(present), 1.0 / len(present)), float(len(present)))

    jobs = FluidJobs.of({"x": 1.0, "y": 2.0, "z": 3.0})
    finish = fluid_finishes(jobs, 0.0, equal_shares, min_work=0.0, work_factor=0.0)
    assert calls == [3] and finish == pytest.approx({"x": 3.0, "y": 6.0, "z": 9.0})


def test_idle_gpus_go_to_jobs_with_time_to_spare_fastest_type_first():
    """Two 1-GPU jobs, 2 GPUs of type 0 (visited first) and 2 of type 1. The allocation gives
    each half its time on type 1 only: the mechanism runs both on type 0 all the time instead."""
    x = np.array([[0.0, 0.5], [0.0, 0.5]])
    runnable = np.ones((2, 2), dtype=bool)
    shares = round_shares(x, runnable, np.ones(2), np.array([2.0, 2.0]), np.ones(2), [0, 1])
    assert shares == pytest.approx(np.array([[1.0, 0.0], [1.0, 0.0]]))
    # FIFO's mechanism runs jobs only where they are allocated (but there, whenever there is room)
    fifo = round_shares(x, runnable, np.ones(2), np.array([2.0, 2.0]), np.ones(2), [0, 1], fill=False)
    assert fifo == pytest.approx(np.array([[0.0, 1.0], [0.0, 1.0]]))


def test_allocated_jobs_short_of_room_share_in_proportion():
    """One GPU, allocations 0.6 and 0.3 (sum within 1): both get theirs; then the idle 0.1 goes to
    the allocated jobs evenly (0.05 each)."""
    x = np.array([[0.6], [0.3]])
    shares = round_shares(x, np.ones((2, 1), dtype=bool), np.ones(2), np.array([1.0]), np.ones(2), [0])
    assert shares == pytest.approx(np.array([[0.65], [0.35]]))


def test_starts_per_round():
    # always on one type: never restarts; half the rounds on each of two types: every round a start;
    # one round in three, alone: every run a start; without moves, only returns after a pause count
    x = np.array([[1.0, 0.0], [0.5, 0.5], [1 / 3, 0.0], [0.75, 0.0]])
    busy = x.sum(axis=1)
    assert starts_per_round(x, busy) == pytest.approx([0.0, 1.0, 1 / 3, 0.25])
    assert starts_per_round(x, busy, moves=False) == pytest.approx([0.0, 0.0, 1 / 3, 0.25])


# --------------------------------------------------------------------------- from an engine


def test_jobs_not_yet_arrived_when_the_rounds_end_are_estimated_too():
    table = _table(("g", M8, 1.0))
    jobs = [Job("a", M8, total_steps=7200), Job("late", M8, total_steps=3600, arrival_s=36000.0)]
    engine = Engine(table, ONE_GPU, make_policy("max_min_fairness_perf"), EngineConfig(max_rounds=2), jobs)
    engine.run()
    estimates = engine_finishes(engine)
    full = Engine(table, ONE_GPU, make_policy("max_min_fairness_perf"), EngineConfig(), jobs).run()
    assert set(estimates) == {"a", "late"}
    assert estimates["a"] == pytest.approx(7200.0)
    assert estimates["late"] == pytest.approx(36000.0 + 3600.0) == full.outcomes["late"].finish_s


def test_the_engines_policy_keeps_its_state():
    table = _table(("g", M8, 1.0), ("h", M8, 1.0))
    cluster = cluster_from_dict({"worker_types": {"g": {"gpus": 1}, "h": {"gpus": 1}}})
    policy = Fifo(perf_aware=False, seed=3)  # remembers where jobs run, draws types at random
    jobs = [Job(f"j{i}", M8, total_steps=3600 * (i + 1)) for i in range(4)]
    engine = Engine(table, cluster, policy, EngineConfig(max_rounds=1), jobs)
    engine.run()
    before = policy.get_state()
    assert len(engine_finishes(engine)) == 4
    after = policy.get_state()
    assert after["_previous"] == before["_previous"] and after["_rng"].getstate() == before["_rng"].getstate()


# --------------------------------------------------------------------------- against full plans

DEMO = (DATA / "throughputs.csv", DATA / "jobs.csv", DATA / "cluster.yaml")
LAB = (DATA / "gavel" / "simulation_throughputs.csv", DATA / "examples" / "lab" / "jobs.csv")
LAB += (DATA / "examples" / "lab" / "cluster.yaml",)


@pytest.mark.parametrize(
    ("inputs", "hours"),
    [(DEMO, 0.1), (DEMO, 2), (DEMO, 4), (LAB, 2), (LAB, 12)],
    ids=["demo-1-round", "demo-2h", "demo-4h", "lab-2h", "lab-12h"],
)
def test_the_fluid_alone_is_within_a_quarter_of_the_full_plan(inputs, hours, monkeypatch):
    # What a list too long to simulate on gets: no look-ahead, the fluid from the last round.
    monkeypatch.setattr(plan_mode, "estimate_finishes", lambda engine: engine_finishes(engine, lookahead=0))
    full = plan_batch(*inputs, PlanOptions()).schedule.jobs
    rounds = round(hours * 3600 / 360)
    short = plan_batch(*inputs, PlanOptions(rounds=rounds))
    assert short.finish_estimated  # some jobs are still running when the rounds end
    for jid in short.finish_estimated:
        assert short.schedule.jobs[jid]["expected_finish_s"] == pytest.approx(full[jid]["expected_finish_s"], rel=0.25)


@pytest.mark.parametrize("aware", [False, True], ids=["lab", "lab-migration-aware"])
def test_a_short_list_is_simulated_to_its_end_and_its_estimates_are_the_full_plans(aware):
    options = PlanOptions(migration_aware=aware)
    full = plan_batch(*LAB, options).schedule.jobs
    short = plan_batch(*LAB, replace(options, rounds=1))
    assert len(short.finish_estimated) == 60
    for jid in short.finish_estimated:
        assert short.schedule.jobs[jid]["expected_finish_s"] == pytest.approx(full[jid]["expected_finish_s"], abs=1e-6)
    assert len(short.schedule.to_json()["rounds"]) == 1, "the look-ahead's rounds are not written"


def _lab_engine(max_rounds: int | None = 1) -> Engine:
    table, jobs_path, cluster_path = LAB
    cluster, thr = read_cluster(cluster_path), read_table(table)
    jobs = read_jobs(jobs_path, table=thr, cluster=cluster)
    restart = charged_restarts(thr, cluster, None, False, False)
    config = EngineConfig() if max_rounds is None else EngineConfig(max_rounds=max_rounds)
    return Engine(thr, cluster, make_policy("max_min_fairness_perf"), config, jobs, restart=restart)


def test_past_its_budget_the_look_ahead_hands_over_to_the_fluid():
    full = _lab_engine(None)
    full.run()
    engine = _lab_engine(1)
    engine.run()
    before = (engine.t, {jid: out.steps_done for jid, out in engine.outcomes.items()}, engine.n_rounds)
    budget = 60 * 40  # about 40 more rounds of the lab's 60 jobs
    estimates = engine_finishes(engine, lookahead=budget)
    after = (engine.t, {jid: out.steps_done for jid, out in engine.outcomes.items()}, engine.n_rounds)
    assert after == before, "the engine itself is not moved on"
    assert len(estimates) == 60
    exact = {jid: out.finish_s for jid, out in full.outcomes.items()}
    ahead_end = engine.t + 41 * 360
    early = [jid for jid in estimates if exact[jid] <= engine.t + 30 * 360]
    late = [jid for jid in estimates if exact[jid] > ahead_end + 3600]
    assert early and late
    for jid in early:  # finished inside the simulated rounds: the rounds' own finish
        assert estimates[jid] == pytest.approx(exact[jid], abs=1e-6)
    for jid in late:  # the fluid's, from where the look-ahead stopped: close, not exact
        assert estimates[jid] == pytest.approx(exact[jid], rel=0.25)
    assert any(abs(estimates[jid] - exact[jid]) > 1.0 for jid in late)
