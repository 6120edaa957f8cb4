"""Whole gangs (planner.rounds.mechanism): a gang that fits one node is never split, a bigger one
takes the fewest nodes of one domain, a gang that finds no room waits (and says why) or moves
lower-priority smaller jobs, and Gavel's compatibility mode keeps Gavel's spill placement.
The property test runs the engine over random clusters, jobs and rounds (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import InputError
from planner.formats.cluster import Cluster, cluster_from_dict
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.policies import make_policy
from planner.rounds.engine import Engine, EngineConfig, run_engine
from planner.rounds.mechanism import FreeGpus, Key, Placement, RoundMechanism, Topology
from planner.rounds.restart import RestartCosts


def cluster_of(per_node: int, nodes: list, name: str = "g") -> Cluster:
    spec = {"gpus": per_node * len(nodes), "gpus_per_node": per_node, "nodes": nodes}
    return cluster_from_dict({"worker_types": {name: spec}})


def mechanism(cluster: Cluster, scale: dict[Key, int], leases: dict[Key, list[tuple[str, int]]]) -> RoundMechanism:
    """A mechanism holding `scale`'s entries; `leases`: last round's GPUs (no fill ran: the chosen
    order given to `place` is the priority order)."""
    mech = RoundMechanism(cluster, round_s=100)
    for key in scale:
        mech.add(key)
    w = cluster.names[0]
    mech.previous = {key: Placement(key, w, tuple(gpus)) for key, gpus in leases.items()}
    return mech


def nodes_of(p: Placement) -> set[str]:
    return {node for node, _ in p.gpus}


# ----------------------------------------------------------------- the mechanism, by hand


def test_a_gang_that_outranks_a_lease_moves_it_and_gets_a_whole_node():
    cluster = cluster_of(4, ["n0", "n1"])
    scale: dict[Key, int] = {("gang",): 4, ("a",): 1, ("b",): 1}
    mech = mechanism(cluster, scale, {("a",): [("n0", 0)], ("b",): [("n1", 0)]})
    chosen = [(("gang",), 0), (("a",), 0), (("b",), 0)]  # the gang ranks first
    placed = {p.jobs: p for p in mech.place(chosen, scale, protected=[("a",), ("b",)])}
    assert len(nodes_of(placed[("gang",)])) == 1 and mech.unplaced == []
    assert placed[("b",)].gpus == (("n1", 0),)  # kept its lease: the gang needed only one node
    assert placed[("a",)].gpus != (("n0", 0),) and nodes_of(placed[("a",)]) == {"n1"}  # moved, still runs


def test_a_gang_that_ranks_below_the_leases_waits_and_says_why():
    cluster = cluster_of(4, ["n0", "n1"])
    scale: dict[Key, int] = {("gang",): 4, ("a",): 1, ("b",): 1}
    mech = mechanism(cluster, scale, {("a",): [("n0", 0)], ("b",): [("n1", 0)]})
    chosen = [(("a",), 0), (("b",), 0), (("gang",), 0)]  # both single jobs rank above the gang
    placed = {p.jobs: p for p in mech.place(chosen, scale, protected=[("a",), ("b",)])}
    assert set(placed) == {("a",), ("b",)}  # the gang is not split 3 + 1
    (waiting,) = mech.unplaced
    assert (waiting.jobs, waiting.worker_type, waiting.gpus) == (("gang",), "g", 4)
    assert "no g node had 4 GPUs free" in waiting.reason and "not split" in waiting.reason
    assert ("gang",) not in mech.previous  # it runs nowhere this round: no lease either


def test_gavel_spill_is_kept_without_whole_gangs():
    cluster = cluster_of(4, ["n0", "n1"])
    scale: dict[Key, int] = {("gang",): 4, ("a",): 1, ("b",): 1}
    mech = mechanism(cluster, scale, {("a",): [("n0", 0)], ("b",): [("n1", 0)]})
    chosen = [(("a",), 0), (("b",), 0), (("gang",), 0)]
    placed = {p.jobs: p for p in mech.place(chosen, scale, protected=[("a",), ("b",)], whole_gangs=False)}
    assert nodes_of(placed[("gang",)]) == {"n0", "n1"} and mech.unplaced == []  # Gavel: 3 + 1


def test_bigger_gangs_take_the_fewest_nodes_of_one_switch():
    nodes = [{"name": f"n{k}", "switch": "sw0" if k < 2 else "sw1"} for k in range(4)]
    cluster = cluster_of(2, nodes)
    scale: dict[Key, int] = {("big",): 4, ("x",): 1}
    # x holds a GPU of n2 (switch sw1): only sw0 still has two whole nodes
    mech = mechanism(cluster, scale, {("x",): [("n2", 0)]})
    placed = {p.jobs: p for p in mech.place([(("x",), 0), (("big",), 0)], scale, protected=[("x",)])}
    assert nodes_of(placed[("big",)]) == {"n0", "n1"}  # 2 nodes = ceil(4 / 2), one switch
    assert mech.spread == set()


def test_no_switch_with_room_the_gang_spreads_only_where_the_table_says_how_fast():
    nodes = [{"name": f"n{k}", "switch": "sw0" if k < 2 else "sw1"} for k in range(4)]
    cluster = cluster_of(2, nodes)
    scale: dict[Key, int] = {("big",): 4, ("x",): 1, ("y",): 1}
    leases = {("x",): [("n0", 0)], ("y",): [("n2", 0)]}  # one whole node left per switch
    chosen = [(("x",), 0), (("y",), 0), (("big",), 0)]
    mech = mechanism(cluster, scale, leases)
    mech.place(chosen, scale, protected=[("x",), ("y",)])
    (waiting,) = mech.unplaced
    assert "switch or NVLink domain" in waiting.reason and "g_unconsolidated" in waiting.reason
    mech = mechanism(cluster, scale, leases)
    placed = {p.jobs: p for p in mech.place(chosen, scale, protected=[("x",), ("y",)], spread_ok=lambda k, j: True)}
    assert nodes_of(placed[("big",)]) == {"n1", "n3"} and mech.spread == {("big",)} and mech.unplaced == []


def test_an_nvlink_domain_is_preferred_to_a_switch():
    nodes = [{"name": "n0", "switch": "sw"}, {"name": "n1", "switch": "sw", "nvlink_domain": "nvl"}]
    nodes += [{"name": "n2", "switch": "sw", "nvlink_domain": "nvl"}]
    topology = Topology(cluster_of(4, nodes).worker_types["g"])
    assert topology.groups == [["n1", "n2"], ["n0", "n1", "n2"]]
    free = FreeGpus(["n0", "n1", "n2"], 4)
    assert {n for n, _ in free.fit(8, topology.groups) or ()} == {"n1", "n2"}
    gang = tuple((n, g) for n in ("n0", "n1") for g in range(4))
    assert topology.consolidated(gang)  # 2 nodes of one switch
    assert not topology.consolidated((*gang[:4], ("n1", 0), ("n1", 1), ("n2", 0), ("n2", 1)))  # 3 nodes
    assert not topology.consolidated((("n0", 0), ("n1", 0)))  # 2 GPUs fit one node


def test_free_gpus_fit_and_spread():
    free = FreeGpus(["n0", "n1", "n2"], 4)
    free.claim([("n0", 0), ("n1", 0), ("n1", 1)])  # free: n0 3, n1 2, n2 4
    assert free.fit(2, [["n0", "n1", "n2"]]) == (("n1", 2), ("n1", 3))  # the fullest node with room
    assert free.fit(6, [["n0", "n1", "n2"]]) == (("n2", 0), ("n2", 1), ("n2", 2), ("n2", 3), ("n1", 2), ("n1", 3))
    assert free.fit(6, [["n0", "n1"]]) is None  # 5 free in that group
    free.claim([("n2", 0)])
    assert free.fit(4, [["n0", "n1", "n2"]]) is None  # never 3 + 1 for a gang that fits a node
    assert free.spread(4) == (("n0", 1), ("n0", 2), ("n0", 3), ("n2", 1))  # emptiest nodes first
    assert free.spread(9) is None
    free.release([("n2", 0)])
    assert free.free["n2"] == [0, 1, 2, 3] and free.total() == 9


# ----------------------------------------------------------------- the engine


def _table(rows: list[tuple[str, str, int, float]]) -> ThroughputTable:
    return ThroughputTable.from_records(
        [{"worker_type": w, "model": m, "scale_factor": s, "throughput": r} for w, m, s, r in rows]
    )


ODD_SIZES = _table([("g", "m", 1, 1.0), ("g", "m", 2, 1.8), ("g", "m", 3, 2.5)])


def _odd_jobs() -> list[Job]:
    """Two 3-GPU gangs and a 2-GPU one on two 4-GPU nodes: the counts fit (8), the nodes do not."""
    sizes = {"a": 3, "b": 3, "c": 2, "d": 1, "e": 1}
    return [Job(jid, JobType("m", None, s), total_steps=3000.0) for jid, s in sizes.items()]


def test_unplaced_gangs_wait_and_their_gpus_go_to_the_next_jobs():
    cluster = cluster_of(4, ["n0", "n1"])
    result = run_engine(_odd_jobs(), ODD_SIZES, cluster, make_policy("max_min_fairness_perf"), EngineConfig(round_s=60))
    waited = [r for r in result.rounds if r.unplaced]
    assert waited, "the scenario must leave a gang without a node"
    for r in result.rounds:
        for p in r.placements:
            assert len(nodes_of(p)) == 1  # every gang here fits one node
        running = {jid for p in r.placements for jid in p.jobs}
        for u in r.unplaced:
            assert not running.intersection(u.jobs) and u.jobs[0] not in r.planned_steps
    # the GPUs a waiting gang leaves are used: 1-GPU jobs run beside the two 3-GPU gangs
    assert any(sum(len(p.gpus) for p in r.placements) == 8 for r in waited)
    assert all(o.finish_s is not None for o in result.outcomes.values())


def test_a_waiting_gang_gets_no_time_in_its_books():
    cluster = cluster_of(4, ["n0", "n1"])
    engine = Engine(ODD_SIZES, cluster, make_policy("max_min_fairness_perf"), EngineConfig(round_s=60), _odd_jobs())
    for _ in range(40):
        before = {key: row.copy() for key, row in engine.mech.job_time.items()}
        steps = {jid: out.steps_done for jid, out in engine.outcomes.items()}
        record = engine.step()
        assert record is not None
        for u in record.unplaced:
            if u.jobs in before and engine.mech.last_reset != record.start_s:  # no re-solve this round
                assert np.array_equal(engine.mech.job_time[u.jobs], before[u.jobs])  # no service booked
            assert engine.outcomes[u.jobs[0]].steps_done == steps[u.jobs[0]]
        if record.unplaced:
            return
    pytest.fail("no round left a gang unplaced")


def test_gavel_compat_keeps_gavels_spill_placement():
    cluster = cluster_of(4, ["n0", "n1"])
    config = EngineConfig(round_s=60, gavel_compat=True)
    result = run_engine(_odd_jobs(), ODD_SIZES, cluster, make_policy("max_min_fairness_perf"), config)
    assert any(len(nodes_of(p)) > 1 for r in result.rounds for p in r.placements)
    assert not any(r.unplaced for r in result.rounds)


def test_a_spread_gang_runs_at_the_tables_spread_throughput():
    nodes = [{"name": "n0", "switch": "sw0"}, {"name": "n1", "switch": "sw1"}]
    cluster = cluster_of(4, nodes)
    job = Job("big", JobType("m", None, 8), total_steps=1e6)
    spread = _table([("g", "m", 8, 10.0), ("g_unconsolidated", "m", 8, 4.0)])
    record = Engine(spread, cluster, make_policy("max_min_fairness_perf"), EngineConfig(round_s=100), [job]).step()
    assert record is not None and record.planned_steps["big"] == 400  # 4 steps/s, not 10
    assert record.domains == {}  # the two nodes share no switch
    no_spread = _table([("g", "m", 8, 10.0)])
    with pytest.raises(InputError, match="no remaining job can be placed"):
        run_engine([job], no_spread, cluster, make_policy("max_min_fairness_perf"))


def test_a_gang_in_one_switch_runs_at_the_tables_throughput_and_records_the_switch():
    nodes = [{"name": "n0", "switch": "sw0", "nvlink_domain": "nvl"}, {"name": "n1", "switch": "sw0"}]
    cluster = cluster_of(4, nodes)
    job = Job("big", JobType("m", None, 8), total_steps=1e6)
    table = _table([("g", "m", 8, 10.0), ("g_unconsolidated", "m", 8, 4.0)])
    record = Engine(table, cluster, make_policy("max_min_fairness_perf"), EngineConfig(round_s=100), [job]).step()
    assert record is not None and record.planned_steps["big"] == 1000
    assert record.domains == {("big",): {"switch": "sw0"}}  # n1 is in no NVLink domain


# ----------------------------------------------------------------- properties


@st.composite
def topology_scenarios(draw):
    types: dict = {}
    records = []
    for t in range(draw(st.integers(1, 2))):
        name = f"t{t}"
        per_node = draw(st.sampled_from([1, 2, 4, 8]))
        n_nodes = draw(st.integers(1, 4))
        nodes = []
        for k in range(n_nodes):
            switch = draw(st.sampled_from([None, "s0", "s1"]))
            nvlink = draw(st.sampled_from([None, None, "l0"]))
            entry = {"name": f"{name}-{k}", "switch": switch, "nvlink_domain": nvlink}
            nodes.append({key: v for key, v in entry.items() if v is not None})
        types[name] = {"gpus": per_node * n_nodes, "gpus_per_node": per_node, "nodes": nodes}
        for s in (1, 2, 3, 4, 8):
            records.append({"worker_type": name, "model": "m", "scale_factor": s, "throughput": float(s)})
            if draw(st.booleans()):  # a stated spread throughput, or none
                records.append(
                    {"worker_type": f"{name}_unconsolidated", "model": "m", "scale_factor": s, "throughput": s / 2}
                )
    cluster = cluster_from_dict({"worker_types": types})
    table = ThroughputTable.from_records(records)
    jobs = []
    for i in range(draw(st.integers(1, 10))):
        size = draw(st.sampled_from([1, 2, 3, 4, 8]))
        jobs.append(Job(f"j{i}", JobType("m", None, size), total_steps=draw(st.floats(50.0, 4000.0))))
    return cluster, table, jobs


def _placeable(job: Job, cluster: Cluster, table: ThroughputTable) -> bool:
    size = job.scale_factor
    for w, spec in cluster.worker_types.items():
        ok = spec.gpus >= size and (
            Topology(spec).can_consolidate(size) or table.solo(f"{w}_unconsolidated", job.job_type) > 0
        )
        if ok:
            return True
    return False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    topology_scenarios(),
    st.sampled_from(["max_min_fairness_perf", "finish_time_fairness_perf", "max_min_fairness"]),
    st.booleans(),
)
def test_gangs_that_fit_a_node_are_never_split_and_bigger_ones_use_the_fewest_nodes(scenario, policy, aware):
    cluster, table, jobs = scenario
    jobs = [j for j in jobs if _placeable(j, cluster, table)]
    if not jobs:
        return
    restart = RestartCosts(override=30.0) if aware else None  # leases that cost a restart to move
    engine = Engine(
        table,
        cluster,
        make_policy(policy),
        EngineConfig(round_s=60, max_rounds=150),
        jobs,
        restart=restart,
        migration_aware=aware,
    )
    by_id = {j.job_id: j for j in jobs}
    while (record := engine.step()) is not None:
        used: set = set()
        running = {jid for p in record.placements for jid in p.jobs}
        for p in record.placements:
            spec = cluster.worker_types[p.worker_type]
            size, nodes = len(p.gpus), nodes_of(p)
            assert size == by_id[p.jobs[0]].scale_factor and not used.intersection(p.gpus)
            used.update(p.gpus)
            topology = Topology(spec)
            if size <= spec.gpus_per_node:
                assert len(nodes) == 1, f"a {size}-GPU gang split over {sorted(nodes)}"
            elif topology.consolidated(p.gpus):
                assert len(nodes) == math.ceil(size / spec.gpus_per_node)  # the fewest nodes
            else:  # spread: only with a stated spread throughput, and at that rate (half the gang's here)
                spread_rate = table.solo(f"{p.worker_type}_unconsolidated", by_id[p.jobs[0]].job_type)
                assert spread_rate > 0 and record.planned_steps[p.jobs[0]] <= max(1, math.floor(spread_rate * 60))
            shared = record.domains.get(p.jobs, {})
            assert shared == (spec.shared_domains(nodes) if len(nodes) > 1 else {})
        for u in record.unplaced:
            assert not running.intersection(u.jobs)
