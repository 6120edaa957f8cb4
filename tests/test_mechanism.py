"""Round mechanism: priorities, deficits, gang placement, lease extension, and
property tests over random clusters (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_problem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.formats.cluster import cluster_from_dict
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.policies import POLICY_NAMES, make_policy
from planner.rounds.engine import EngineConfig, run_engine
from planner.rounds.mechanism import FreeGpus, Key, RoundMechanism, visiting_order

# Policies that need no co-location rows (the packed ones are tested with pair tables).
SOLO_POLICIES = [p for p in POLICY_NAMES if "packed" not in p and p != "gandiva"]
SINGLE_GPU_ONLY = {"allox"}


def one_type(gpus, per_node):
    return cluster_from_dict({"worker_types": {"g": {"gpus": gpus, "gpus_per_node": per_node}}})


def test_priority_is_allocation_over_received_share():
    mech = RoundMechanism(one_type(1, 1), round_s=100)
    for k in ("a", "b"):
        mech.add((k,))
    mech.reset(0.0)
    mech.set_allocation({("a",): np.array([0.75]), ("b",): np.array([0.25])})
    mech.record(("a",), 0, 100.0)  # a ran a whole round
    prio = mech.priorities({("a",): np.array([True]), ("b",): np.array([True])})
    # job_time starts at tau/2 = 50: a has 150 of 200 seconds, b 50 of 200.
    assert prio[("a",)][0] == pytest.approx(0.75 / (150 / 200))
    assert prio[("b",)][0] == pytest.approx(0.25 / (50 / 200))


def test_deficit_accumulates_what_was_owed():
    mech = RoundMechanism(one_type(1, 1), round_s=100)
    mech.add(("a",))
    mech.reset(0.0)
    mech.set_allocation({("a",): np.array([0.5])})
    mech.record(("a",), 0, 100.0)
    mech.reset(1000.0)  # owed 500 s, received 100 s
    assert mech.deficit[("a",)][0] == pytest.approx(400.0)


def test_free_gpus_best_fit_then_fewest_nodes():
    free = FreeGpus(["n0", "n1", "n2"], 4)
    free.claim([("n0", 0), ("n1", 0), ("n1", 1)])  # free: n0 3, n1 2, n2 4
    assert free.gang(2) == (("n1", 2), ("n1", 3))  # the fullest node that fits
    assert free.gang(3) == (("n0", 1), ("n0", 2), ("n0", 3))  # n0 (3 free) is fuller than n2 (4)
    free.claim(free.gang(4))  # n2 whole
    free.claim([("n0", 1)])  # free: n0 2, n1 2
    assert free.gang(3) == (("n0", 2), ("n0", 3), ("n1", 2))  # no node fits: spill, fullest nodes first
    assert not free.all_free([("n2", 0)]) and free.all_free([("n1", 3)])
    assert not free.all_free([("elsewhere", 0)])  # a GPU not in this type is never taken
    with pytest.raises(RuntimeError, match="internal error"):
        free.gang(5)
    assert FreeGpus(["a", "b"], 2).gang(1) == (("a", 0),)  # ties: the first node in spec order


def test_take_one_is_gang_of_one_claimed():
    free, twin = FreeGpus(["n0", "n1", "n2"], 3), FreeGpus(["n0", "n1", "n2"], 3)
    for f in (free, twin):
        f.claim([("n1", 0), ("n2", 1)])  # free: n0 3, n1 2, n2 2
    for _ in range(7):
        expected = twin.gang(1)
        twin.claim(expected)
        assert free.take_one() == expected and free.free == twin.free
    with pytest.raises(RuntimeError, match="internal error"):
        free.take_one()


def test_gang_stays_on_one_node_and_lease_is_extended():
    mech = RoundMechanism(one_type(8, 4), round_s=100)
    scale: dict[Key, int] = {("big",): 4, ("s1",): 1, ("s2",): 2}
    for k in scale:
        mech.add(k)
    mech.reset(0.0)
    mech.set_allocation({k: np.array([1.0]) for k in scale})
    runnable: dict[Key, np.ndarray] = {k: np.array([True]) for k in scale}
    first = mech.place(mech.select([0], scale, runnable), scale)
    by_job = {p.jobs: p for p in first}
    assert len({node for node, _ in by_job[("big",)].gpus}) == 1
    second = mech.place(mech.select([0], scale, runnable), scale)
    assert {p.jobs: p.gpus for p in second} == {p.jobs: p.gpus for p in first}


def test_fifo_skips_zero_priority_entries():
    mech = RoundMechanism(one_type(2, 2), round_s=100)
    scale: dict[Key, int] = {("a",): 1, ("b",): 1}
    for k in scale:
        mech.add(k)
    mech.reset(0.0)
    mech.set_allocation({("a",): np.array([1.0]), ("b",): np.array([0.0])})
    runnable: dict[Key, np.ndarray] = {k: np.array([True]) for k in scale}
    assert [k for k, _ in mech.select([0], scale, runnable, fifo=True)] == [("a",)]
    assert len(mech.select([0], scale, runnable, fifo=False)) == 2  # work conserving


def test_snapshot_restores_the_books_and_drops_leases_on_departed_nodes():
    cluster = cluster_from_dict({"worker_types": {"g": {"gpus": 4, "gpus_per_node": 2}}})
    mech = RoundMechanism(cluster, round_s=100)
    scale: dict[Key, int] = {("a",): 1, ("b",): 2, ("c",): 1}
    for k in scale:
        mech.add(k)
    mech.reset(0.0)
    mech.set_allocation({("a",): np.array([0.5]), ("b",): np.array([1.0]), ("c",): np.array([0.5])})
    runnable: dict[Key, np.ndarray] = {k: np.array([True]) for k in scale}
    for placement in mech.place(mech.select([0], scale, runnable), scale):
        mech.record(placement.jobs, 0, 100.0)
    mech.reset(100.0)
    snapshot = mech.snapshot()
    chosen = mech.select([0], scale, runnable)
    placed = mech.place(chosen, scale)
    received = snapshot.job_time[("a",)][0]
    mech.record(("a",), 0, 50.0)
    assert snapshot.job_time[("a",)][0] == received  # the snapshot is a copy

    twin = RoundMechanism(cluster, round_s=100)
    twin.restore(snapshot)
    assert list(twin.job_time) == [("a",), ("b",), ("c",)]  # arrival order: the tie-break
    assert twin.select([0], scale, runnable) == chosen
    assert twin.place(chosen, scale) == placed  # the leases carried over too

    # The same books on a cluster whose nodes were renamed: every lease is dropped.
    renamed = cluster_from_dict({"worker_types": {"g": {"gpus": 4, "gpus_per_node": 2, "nodes": ["x", "y"]}}})
    moved = RoundMechanism(renamed, round_s=100)
    moved.restore(snapshot)
    assert moved.previous == {} and list(moved.deficit) == list(snapshot.deficit)


def test_visiting_order_is_fastest_first_from_data():
    assert visiting_order(np.array([[1.0, 3.0, 2.0], [1.0, 2.0, 4.0]])) == [2, 1, 0]


def test_plan_follows_allocation_over_rounds():
    # Two identical jobs on one GPU of a fast and one of a slow type: LAS gives
    # each half of each; over many rounds each job's time on the fast GPU ~ 1/2.
    table = ThroughputTable.from_records(
        [
            {"worker_type": "fast", "model": "m", "scale_factor": 1, "throughput": 2.0},
            {"worker_type": "slow", "model": "m", "scale_factor": 1, "throughput": 1.0},
        ]
    )
    cluster = cluster_from_dict({"worker_types": {"fast": 1, "slow": 1}})
    jobs = [Job(f"j{i}", JobType("m", None), total_steps=1e9) for i in range(2)]
    result = run_engine(
        jobs, table, cluster, make_policy("max_min_fairness_perf"), EngineConfig(round_s=10, max_rounds=200)
    )
    fast = sum(1 for r in result.rounds for p in r.placements if p.worker_type == "fast" and p.jobs == ("j0",))
    assert abs(fast / len(result.rounds) - 0.5) < 0.05


# ----------------------------------------------------------------- properties


@st.composite
def scenarios(draw):
    n_types = draw(st.integers(1, 3))
    types = {}
    for t in range(n_types):
        per_node = draw(st.sampled_from([1, 2, 4]))
        types[f"t{t}"] = {
            "gpus": per_node * draw(st.integers(1, 3)),
            "gpus_per_node": per_node,
            "cost_per_gpu_hour": draw(st.floats(0.1, 5.0)),
        }
    n_models = draw(st.integers(1, 3))
    records = []
    for mi in range(n_models):
        for s in (1, 2, 4):
            for name in types:
                rate = draw(st.one_of(st.just(0.0), st.floats(0.05, 20.0)))
                records.append(
                    {
                        "worker_type": name,
                        "model": f"m{mi}",
                        "scale_factor": s,
                        "throughput": rate,
                        "status": "ok" if rate > 0 else "oom",
                    }
                )
    table = ThroughputTable.from_records(records)
    cluster = cluster_from_dict({"worker_types": types})
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        jt = JobType(f"m{draw(st.integers(0, n_models - 1))}", None, draw(st.sampled_from([1, 2, 4])))
        if not any(table.solo(w, jt) > 0 and cluster.capacity(w) >= jt.scale_factor for w in types):
            continue
        jobs.append(
            Job(
                f"j{i}", jt, total_steps=draw(st.floats(1.0, 3000.0)), priority_weight=draw(st.sampled_from([1.0, 2.0]))
            )
        )
    return table, cluster, jobs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(SOLO_POLICIES))
def test_schedules_never_double_book_and_keep_gangs_whole(scenario, policy_name):
    table, cluster, jobs = scenario
    if policy_name in SINGLE_GPU_ONLY:
        jobs = [j for j in jobs if j.scale_factor == 1]
    if not jobs:
        return
    result = run_engine(jobs, table, cluster, make_policy(policy_name), EngineConfig(round_s=360))
    by_id = {j.job_id: j for j in jobs}
    for r in result.rounds:
        used: set[tuple[str, int]] = set()
        seen_jobs: set[str] = set()
        assert r.end_s > r.start_s
        for p in r.placements:
            spec = cluster.worker_types[p.worker_type]
            assert len(p.gpus) == by_id[p.jobs[0]].scale_factor  # gang complete
            assert len(set(p.gpus)) == len(p.gpus)
            assert all(node in spec.nodes and 0 <= g < spec.gpus_per_node for node, g in p.gpus)
            assert not used.intersection(p.gpus)  # no double booking
            used.update(p.gpus)
            assert not seen_jobs.intersection(p.jobs)
            seen_jobs.update(p.jobs)
            assert table.solo(p.worker_type, by_id[p.jobs[0]].job_type) > 0
    assert all(o.finish_s is not None for o in result.outcomes.values())  # everything finishes


@st.composite
def problems(draw):
    n, m = draw(st.integers(1, 12)), draw(st.integers(1, 4))
    tput = [[draw(st.one_of(st.just(0.0), st.floats(0.1, 50.0))) for _ in range(m)] for _ in range(n)]
    for row in tput:
        if not any(row):
            row[0] = 1.0
    capacity = [draw(st.integers(1, 8)) for _ in range(m)]
    scale = [draw(st.sampled_from([1, 2, 4])) for _ in range(n)]
    for i in range(n):  # each job must fit somewhere it can run
        if not any(tput[i][j] > 0 and capacity[j] >= scale[i] for j in range(m)):
            scale[i] = 1
            capacity[next(j for j in range(m) if tput[i][j] > 0)] = max(capacity)
    weight = [draw(st.sampled_from([1.0, 2.0, 5.0])) for _ in range(n)]
    return make_problem(tput, capacity, scale=scale, weight=weight)


@settings(max_examples=60, deadline=None)
@given(problems(), st.sampled_from(SOLO_POLICIES))
def test_allocations_respect_capacity_and_time(problem, policy_name):
    if policy_name in SINGLE_GPU_ONLY:
        problem.scale[:] = 1
    problem.throughput[problem.scale[:, None] > problem.capacity[None, :]] = 0.0
    x = make_policy(policy_name).allocate(problem).x
    assert (x >= 0).all() and (x <= 1 + 1e-9).all()
    assert (x.sum(axis=1) <= 1 + 1e-6).all()
    assert ((problem.scale[:, None] * x).sum(axis=0) <= problem.capacity + 1e-6).all()
    assert (x[problem.throughput == 0] == 0).all()


@settings(max_examples=60, deadline=None)
@given(
    n_jobs=st.integers(1, 8),
    pair_mask=st.lists(st.booleans(), min_size=28, max_size=28),
    drop=st.lists(st.integers(0, 40), max_size=12),
    alloc_first=st.booleans(),
)
def test_removing_entries_together_equals_one_at_a_time(n_jobs, pair_mask, drop, alloc_first):
    """remove_many (one pass over the books) leaves the books exactly as removing one by one."""
    jobs = [(f"j{i}",) for i in range(n_jobs)]
    pairs = [(a[0], b[0]) for a in jobs for b in jobs if a < b]
    pairs = [p for p, keep in zip(pairs, pair_mask) if keep]
    entries = jobs + pairs

    def built() -> RoundMechanism:
        mech = RoundMechanism(cluster_from_dict({"worker_types": {"g": 2, "h": 3}}), round_s=60)
        mech.add_jobs(jobs)
        for pair in pairs:
            mech.add_pair(pair)
        mech.reset(0.0)
        for i, key in enumerate(entries):  # distinct books per entry, so a misplaced row shows
            mech.record(key, i % 2, float(i + 1))
        mech.set_allocation({key: np.array([0.1 * (i % 5), 0.05 * i]) for i, key in enumerate(entries)})
        if alloc_first:
            mech.priorities({key: np.array([True, True]) for key in entries})  # builds the alloc rows
        return mech

    gone = [entries[i % len(entries)] for i in drop] + [("not-an-entry",)]
    together, one_by_one = built(), built()
    together.remove_many(gone)
    for key in gone:
        one_by_one.remove_many([key])
    assert together.keys == one_by_one.keys == [k for k in entries if k not in gone]
    assert together.rows == one_by_one.rows == {k: i for i, k in enumerate(together.keys)}
    assert together._pairs == one_by_one._pairs == sum(len(k) > 1 for k in together.keys)
    before = built()
    kept_rows = [before.rows[k] for k in together.keys]
    assert np.array_equal(together._spent, before._spent[kept_rows])
    assert np.array_equal(together._deficit, before._deficit[kept_rows])
    assert np.array_equal(together._spent, one_by_one._spent)
    assert np.array_equal(together._deficit, one_by_one._deficit)
    assert np.array_equal(together._alloc_matrix(), one_by_one._alloc_matrix())
    assert set(together.alloc) == set(one_by_one.alloc) == set(together.keys)
    ok = {key: np.array([True, True]) for key in together.keys}
    prio_a, prio_b = together.priorities(ok), one_by_one.priorities(ok)
    assert all(np.array_equal(prio_a[k], prio_b[k]) for k in together.keys)
