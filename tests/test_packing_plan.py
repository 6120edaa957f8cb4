"""Packing end to end: co-located pairs share one GPU and progress at pair throughputs."""

from __future__ import annotations

import math

from conftest import DATA

from planner.formats.cluster import cluster_from_dict
from planner.formats.jobs import Job
from planner.formats.table import JobType, read_table
from planner.policies import make_policy
from planner.rounds.engine import Engine, EngineConfig, run_engine


def test_packed_plan_colocates_and_uses_pair_throughputs():
    table = read_table(DATA / "throughputs.csv")
    cluster = cluster_from_dict({"worker_types": {"a100": 2, "v100": 2, "t4": {"gpus": 4, "gpus_per_node": 2}}})
    kinds = [
        ("ResNet-18", 64),
        ("LM", 20),
        ("Recommendation", 1024),
        ("A3C", None),
        ("CycleGAN", None),
        ("Transformer", 64),
        ("ResNet-50", 32),
        ("LM", 40),
    ]
    jobs = [Job(f"{m}-{b}-{k}", JobType(m, b), total_steps=50_000) for k in range(2) for m, b in kinds]
    packed = run_engine(jobs, table, cluster, make_policy("max_min_fairness_packed"), EngineConfig())
    alone = run_engine(jobs, table, cluster, make_policy("max_min_fairness_perf"), EngineConfig())
    by_id = {j.job_id: j for j in jobs}
    pairs = 0
    for r in packed.rounds:
        for p in r.placements:
            if len(p.jobs) == 2:
                pairs += 1
                a, b = (by_id[j].job_type for j in p.jobs)
                own, other = table.pair(p.worker_type, a, b)
                assert own > 0 and other > 0 and len(p.gpus) == 1
                for jid, rate in zip(p.jobs, (own, other)):
                    left = by_id[jid].total_steps  # planned steps never exceed the pair rate x tau
                    assert r.planned_steps[jid] <= max(1, math.floor(rate * 360)) and r.planned_steps[jid] <= left
    assert pairs > 0
    assert all(o.finish_s is not None for o in packed.outcomes.values())
    # with twice as many jobs as GPUs, sharing pays on this table
    assert packed.makespan_s < alone.makespan_s


def test_a_run_keeps_only_the_first_and_latest_allocations_in_full():
    """Earlier re-solves keep their scalars (the schedule's `resolves` list) but not their
    per-job arrays and pair shares: a long packed plan re-solves hundreds of times."""
    table = read_table(DATA / "throughputs.csv")
    cluster = cluster_from_dict({"worker_types": {"a100": 1, "v100": 1, "t4": 2}})
    kinds = [("ResNet-18", 64), ("LM", 20), ("Recommendation", 1024), ("Transformer", 64), ("ResNet-50", 32)]
    jobs = [Job(f"j{i}", JobType(m, b), total_steps=5_000.0 * (i + 1)) for i, (m, b) in enumerate(kinds * 2)]
    engine = Engine(table, cluster, make_policy("max_min_fairness_packed"), EngineConfig(), jobs)
    result = engine.run()
    assert len(result.solves) >= 4  # a re-solve at every finish
    first, *middle, last = result.solves
    assert first.allocation.x.shape[0] == len(first.job_ids) and first.allocation.pair_x
    assert last is engine.last_solve and last.allocation.x.shape[0] == len(last.job_ids)
    for solve in middle:
        assert solve.allocation.x.shape == (0, 3) and solve.allocation.pair_x is None
        assert solve.allocation.status and solve.allocation.objective is not None and solve.job_ids
