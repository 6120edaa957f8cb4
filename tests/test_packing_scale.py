"""The bounded pair space of packing policies (`packing.PAIR_PARTNERS`) and the array-built packed LP.

Gavel's pair space pairs every job of a kind with every job of its partner kind: O(n²) job
pairs for the mechanism at a few hundred active jobs. Above `PAIR_PARTNERS` partners per job a
group is laid out as interval matchings instead (`packing._layout_pairs`). These tests check
that the bound keeps what the policy decided (the LP, each job's time next to each partner
kind), that it only ever kicks in on groups larger than the limit (small cases are the full
pair space, bit for bit), that every pair the mechanism runs is a valid pair, and that runs
stay deterministic. No test here times anything.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
import pytest
from conftest import DATA, GAVEL_DIR

from planner.formats.cluster import cluster_from_dict, parse_cluster
from planner.formats.jobs import Job
from planner.formats.table import JobType, read_table
from planner.policies import make_policy, packing
from planner.policies.lp.matrix import INF, Rows
from planner.policies.problem import build_problem
from planner.rounds.engine import Engine, EngineConfig
from planner.rounds.mechanism import RoundMechanism

KINDS = [("ResNet-18", 64), ("LM", 20), ("Recommendation", 1024), ("Transformer", 64)]


@pytest.fixture(scope="module")
def table():
    return read_table(DATA / "throughputs.csv")


@pytest.fixture(scope="module")
def gavel_table():
    from planner.formats.gavel_json import import_gavel

    return import_gavel(GAVEL_DIR / "simulation_throughputs.json")


def crowd(per_kind: int, kinds=KINDS, steps: float = 40_000.0, spacing_s: float = 0.0) -> list[Job]:
    """`per_kind` single-GPU jobs of each kind, interleaved, arriving `spacing_s` apart."""
    jobs = []
    for i in range(per_kind):
        for m, b in kinds:
            n = len(jobs)
            jobs.append(Job(f"{m}-{b}-{i}", JobType(m, b), total_steps=steps * (1 + n % 5), arrival_s=n * spacing_s))
    return jobs


def packed_allocation(problem, partners, monkeypatch):
    monkeypatch.setattr(packing, "PAIR_PARTNERS", partners)
    return make_policy("max_min_fairness_packed").allocate(problem)


def pair_time(problem, pair_x) -> dict[tuple[str, object, int], float]:
    """Each job's time next to each partner kind, per worker type."""
    kind = dict(zip(problem.job_ids, problem.job_types))
    out: dict[tuple[str, object, int], float] = defaultdict(float)
    for (a, b), row in pair_x.items():
        for j, share in enumerate(row):
            out[(a, kind[b], j)] += share
            out[(b, kind[a], j)] += share
    return out


# --------------------------------------------------------------------------- the layout itself


@pytest.mark.parametrize("layouts", [1, 2, 4, 8])
def test_layout_within_a_kind_keeps_every_jobs_time(layouts):
    rng = np.random.default_rng(layouts)
    for n in (3, 4, 9, 10, 41):
        u = rng.uniform(0.5, 1.0, n)  # n >= 3: every z at most the others' sum, as the LP keeps it
        ids = np.arange(100, 100 + n)
        a, b, share = packing._layout_pairs(ids, u, None, None, layouts)
        assert (a < b).all() and (share > 0).all()  # each unordered pair once, never a job with itself
        assert len(set(zip(a.tolist(), b.tolist()))) == len(a)
        total = np.zeros(n)
        np.add.at(total, a - 100, share)
        np.add.at(total, b - 100, share)
        assert total == pytest.approx(u, abs=1e-12)
        # equal shares (one class): at most two partners per matching
        a, b, _ = packing._layout_pairs(ids, np.full(n, 0.3), None, None, layouts)
        degree = np.bincount(np.concatenate((a, b)) - 100, minlength=n)
        assert degree.max() <= 2 * layouts


def test_layout_across_kinds_keeps_the_full_spaces_sums():
    rng = np.random.default_rng(0)
    for n_a, n_b in ((9, 3), (3, 12), (30, 30), (50, 7)):
        u, v = rng.uniform(0.1, 1, n_a), rng.uniform(0.1, 1, n_b)
        a, b, share = packing._layout_pairs(np.arange(n_a), u, np.arange(1000, 1000 + n_b), v, 4)
        to_a, to_b = np.zeros(n_a), np.zeros(n_b)
        np.add.at(to_a, a, share)
        np.add.at(to_b, b - 1000, share)
        # as x_ab = z_a z_b / Σz_A: each b gets z_b, each a z_a Σz_B / Σz_A
        assert to_b == pytest.approx(v, abs=1e-12)
        assert to_a == pytest.approx(u * v.sum() / u.sum(), abs=1e-12)
        assert len(a) <= 4 * (n_a + n_b)  # O(n) pairs, not n_a n_b
        assert len(a) < n_a * n_b or n_a * n_b <= 4 * (n_a + n_b)


# --------------------------------------------------------------------------- the policy's answer


def test_bound_keeps_the_lp_and_each_jobs_time_next_to_each_kind(table, monkeypatch):
    """60 jobs of 4 kinds on 6 GPUs: groups of 15 jobs, well above the default limit."""
    cluster = cluster_from_dict({"worker_types": {"a100": 2, "v100": 2, "t4": 2}})
    problem = build_problem(crowd(15), table, cluster)
    full = packed_allocation(problem, None, monkeypatch)
    bounded = packed_allocation(problem, packing.PAIR_PARTNERS or 8, monkeypatch)
    assert full.pair_x and bounded.pair_x
    # the LP is the same: same objective and solo time, bit for bit
    assert bounded.objective == full.objective
    assert np.array_equal(bounded.x, full.x)
    # each job spends the same time next to each partner kind on each type
    want, got = pair_time(problem, full.pair_x), pair_time(problem, bounded.pair_x)
    assert want.keys() >= {k for k, v in got.items() if v > 1e-12}
    for key, value in want.items():
        assert got.get(key, 0.0) == pytest.approx(value, abs=1e-9), key
    # so the GPUs each type gives to pairs are the same too
    assert sum(bounded.pair_x.values()) == pytest.approx(sum(full.pair_x.values()), abs=1e-9)
    # and far fewer pairs: one or two partners per job, type, partner kind and matching
    assert len(bounded.pair_x) < len(full.pair_x) / 2
    assert max(partner_counts(problem, bounded.pair_x).values()) <= 2 * packing.PAIR_LAYOUTS
    assert max(partner_counts(problem, full.pair_x).values()) > (packing.PAIR_PARTNERS or 8)


def partner_counts(problem, pair_x) -> dict[tuple[str, object, int], int]:
    """How many partners each job has of each kind on each type."""
    kind = dict(zip(problem.job_ids, problem.job_types))
    out: dict[tuple[str, object, int], int] = defaultdict(int)
    for (a, b), row in pair_x.items():
        for j in np.flatnonzero(row > 0).tolist():
            out[(a, kind[b], j)] += 1
            out[(b, kind[a], j)] += 1
    return out


def test_full_pair_space_is_gavels_formula(table, monkeypatch):
    """PAIR_PARTNERS = None: every job of A with every job of B, x_ab = z_a z_b / Σ_A z."""
    cluster = cluster_from_dict({"worker_types": {"a100": 1, "v100": 1, "t4": 2}})
    problem = build_problem(crowd(12, KINDS[:2]), table, cluster)
    alloc = packed_allocation(problem, None, monkeypatch)
    assert alloc.pair_x
    kind = dict(zip(problem.job_ids, problem.job_types))
    across = [(a, b) for a, b in alloc.pair_x if kind[a] != kind[b]]
    if across:  # then every cross pair exists, each with the same share (one class per kind)
        assert len(across) == 12 * 12
        rows = np.array([alloc.pair_x[p] for p in across])
        assert np.allclose(rows, rows[0])


def test_small_groups_are_the_full_pair_space(table, monkeypatch):
    """Groups with at most PAIR_PARTNERS partners per job are not bounded: the same pairs, bit for bit."""
    cluster = cluster_from_dict({"worker_types": {"a100": 2, "v100": 2, "t4": 2}})
    problem = build_problem(crowd(3), table, cluster)  # at most 3 jobs a kind
    full = packed_allocation(problem, None, monkeypatch)
    bounded = packed_allocation(problem, 8, monkeypatch)
    assert list(full.pair_x) == list(bounded.pair_x)
    assert all(np.array_equal(full.pair_x[k], bounded.pair_x[k]) for k in full.pair_x)


# --------------------------------------------------------------------------- runs


class Recording:
    """A policy that keeps every pair it ever allocated."""

    def __init__(self, inner):
        self.inner, self.pairs = inner, set()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def allocate(self, problem):
        allocation = self.inner.allocate(problem)
        self.pairs.update(allocation.pair_x or {})
        return allocation


def run(jobs, table, cluster, partners, monkeypatch, policy="max_min_fairness_packed"):
    monkeypatch.setattr(packing, "PAIR_PARTNERS", partners)
    recorder = Recording(make_policy(policy))
    result = Engine(table, cluster, recorder, EngineConfig(), jobs).run()
    return result, recorder.pairs


def test_every_pair_the_mechanism_runs_is_a_valid_pair(table, monkeypatch):
    cluster = cluster_from_dict({"worker_types": {"a100": 2, "v100": 2, "t4": {"gpus": 4, "gpus_per_node": 2}}})
    jobs = crowd(10, spacing_s=300.0)
    by_id = {j.job_id: j for j in jobs}
    result, allocated = run(jobs, table, cluster, 2, monkeypatch)
    assert all(o.finish_s is not None for o in result.outcomes.values())
    pairs = 0
    for r in result.rounds:
        running = [jid for p in r.placements for jid in p.jobs]
        assert len(running) == len(set(running))  # a job runs once a round
        for p in r.placements:
            if len(p.jobs) == 2:
                pairs += 1
                a, b = (by_id[jid] for jid in p.jobs)
                assert p.jobs in allocated  # a pair the policy allocated
                assert a.scale_factor == b.scale_factor and len(p.gpus) == a.scale_factor
                own, other = table.pair(p.worker_type, a.job_type, b.job_type)
                assert own > 0 and other > 0
                for job in (a, b):  # both had arrived and were not finished
                    assert job.arrival_s <= r.start_s < result.outcomes[job.job_id].finish_s
    assert pairs > 0


def test_bounded_runs_are_deterministic(table, monkeypatch):
    cluster = cluster_from_dict({"worker_types": {"a100": 2, "v100": 2, "t4": 2}})
    jobs = crowd(12, spacing_s=120.0)
    first, _ = run(jobs, table, cluster, 4, monkeypatch)
    second, _ = run(jobs, table, cluster, 4, monkeypatch)
    assert [o.finish_s for o in first.outcomes.values()] == [o.finish_s for o in second.outcomes.values()]
    assert [[dataclasses.astuple(p) for p in r.placements] for r in first.rounds] == [
        [dataclasses.astuple(p) for p in r.placements] for r in second.rounds
    ]


def average_jct(result) -> float:
    return float(np.mean([o.finish_s - o.job.arrival_s for o in result.outcomes.values()]))


def test_bounded_jct_stays_close_to_the_full_pair_space(table, monkeypatch):
    """48 jobs of 4 kinds on 6 GPUs, groups of up to 12 jobs (the bound kicks in): average JCT
    within 15 % of the full pair space's. Crowded traces of a few kinds are the bound's worst
    case seen: +5 to +10 % (here +7 %); on the msr trace's 500- and 1,000-job slices (26 kinds)
    it was within -3.4 % to +0.5 %."""
    cluster = cluster_from_dict({"worker_types": {"a100": 2, "v100": 2, "t4": 2}})
    jobs = crowd(12, spacing_s=60.0)
    full, full_pairs = run(jobs, table, cluster, None, monkeypatch)
    bounded, bounded_pairs = run(jobs, table, cluster, 8, monkeypatch)
    assert len(bounded_pairs) < 0.7 * len(full_pairs)  # the bound was in force (541 of 849 pairs here)
    reference = average_jct(full)
    assert abs(average_jct(bounded) - reference) <= 0.15 * reference


def test_gavel_small_case_is_unchanged_by_the_bound(gavel_table, monkeypatch):
    """Gavel's static 30-job case on 4:4:4 (spec §11.3): no group reaches the limit, so the
    bounded and the full pair space give the very same run."""
    from planner.modes.generator import GeneratorConfig, JobGenerator
    from planner.modes.simulate import SimulationConfig, Workload, run_simulation

    results = []
    for partners in (None, packing.PAIR_PARTNERS):
        monkeypatch.setattr(packing, "PAIR_PARTNERS", partners)
        result = run_simulation(
            gavel_table,
            parse_cluster("4:4:4"),
            Workload(generator=JobGenerator(gavel_table, GeneratorConfig(seed=0)), num_jobs=30),
            SimulationConfig(policy="max_min_fairness_packed", seed=0, gavel_compat=True),
        )
        results.append(result.metrics)
    for key in ("jct_s", "makespan_s", "utilisation", "lease_extension_rate"):
        assert results[0][key] == results[1][key]


# --------------------------------------------------------------------------- the packed LP's rows


def reference_cells(throughput, mult, job_types, worker_types, table):
    """The pair cells row by row, type by type, partner by partner (what the array version replaced)."""
    k, m = throughput.shape
    kinds = list(dict.fromkeys(job_types))
    kind_of = [kinds.index(jt) for jt in job_types]
    count = np.zeros(len(kinds))
    for c in range(k):
        count[kind_of[c]] += mult[c]
    scale = np.array([jt.scale_factor for jt in kinds])
    rates = [table.pair_matrix(w, kinds) for w in worker_types]
    cells, coef = [], []
    for c in range(k):
        a = kind_of[c]
        partners = scale == scale[a]
        if count[a] < 2:
            partners[a] = False
        for j in range(m):
            if throughput[c, j] > 0:
                own, other = rates[j]
                for p in np.flatnonzero(partners & (own[a] > 0) & (other[a] > 0)).tolist():
                    cells.append((c, j, p))
                    coef.append(float(own[a, p]))
    return cells, coef, kind_of


def reference_rows(throughput, gpus, capacity, mult, pairs, x_ids, z0):
    """The packed rows written term by term (the implementation the array version replaced)."""
    by_row, by_type = defaultdict(list), defaultdict(list)
    for n, (c, j, p) in enumerate(pairs.cells):
        by_row[c].append(n)
        by_type[(j, pairs.kind_of[c], p)].append(n)
    runnable, gpus, x_id, mult = (throughput > 0).tolist(), gpus.tolist(), x_ids.tolist(), mult.tolist()
    k, m = throughput.shape
    paired_types = {j for _, j, _ in pairs.cells}
    head, head_upper = [], []
    for j in range(m):
        terms = [(x_id[c][j], float(gpus[c])) for c in range(k) if runnable[c][j]]
        if terms and j not in paired_types:
            head.append(terms)
            head_upper.append(float(capacity[j]))
    for c in range(k):
        terms = [(x_id[c][j], 1.0) for j in range(m) if runnable[c][j]]
        if terms and not by_row.get(c):
            head.append(terms)
            head_upper.append(1.0)
    tail, lower, upper = [], [], []
    for c in range(k):
        if by_row.get(c):
            tail.append([(x_id[c][j], 1.0) for j in range(m) if runnable[c][j]] + [(z0 + n, 1.0) for n in by_row[c]])
            lower.append(-INF)
            upper.append(1.0)
    for j in range(m):
        shared = [(z0 + n, 0.5 * float(gpus[c])) for n, (c, jj, _) in enumerate(pairs.cells) if jj == j]
        if shared:
            tail.append([(x_id[c][j], float(gpus[c])) for c in range(k) if runnable[c][j]] + shared)
            lower.append(-INF)
            upper.append(float(capacity[j]))
    reference_kind_rows(pairs, mult, by_type, z0, tail, lower, upper)
    fixed = np.zeros(len(pairs.cells), dtype=bool)
    for (j, a, b), group in by_type.items():
        if a != b and (j, b, a) not in by_type:
            fixed[group] = True
    return Rows.from_terms(head, [-INF] * len(head), head_upper), Rows.from_terms(tail, lower, upper), fixed


def reference_kind_rows(pairs, mult, by_type, z0, tail, lower, upper):
    """Same-type and consistency rows, term by term, appended to (tail, lower, upper)."""
    done = set()
    cells = pairs.cells
    for (j, a, b), group in by_type.items():
        if a == b:
            total = [(z0 + n, -float(mult[cells[n][0]])) for n in group]
            for n in group:
                tail.append([(z0 + n, 2.0)] + total)  # z_n <= every job's z but its own
                lower.append(-INF)
                upper.append(0.0)
            continue
        if (j, b, a) in done:
            continue
        done.add((j, a, b))
        tail.append(
            [(z0 + n, float(mult[cells[n][0]])) for n in group]
            + [(z0 + n, -float(mult[cells[n][0]])) for n in by_type.get((j, b, a), [])]
        )
        lower.append(0.0)
        upper.append(0.0)


@pytest.mark.parametrize("seed", range(4))
def test_packed_rows_are_the_term_by_term_rows(gavel_table, seed):
    """The array-built cells and rows equal, entry for entry, the ones written term by term: the
    same LP, so the same interior-point answer."""
    rng = np.random.default_rng(seed)
    types = ["v100", "p100", "k80"]
    kinds = list(gavel_table.job_types)
    for _ in range(40):
        k = int(rng.integers(1, 40))
        job_types = [kinds[i] for i in rng.integers(0, len(kinds), k)]
        if rng.random() < 0.5:  # several rows of one kind
            job_types = [job_types[i] for i in rng.integers(0, max(1, k // 3), k)]
        throughput = np.array([[gavel_table.solo(w, jt) for w in types] for jt in job_types])
        throughput[rng.random(throughput.shape) < 0.1] = 0.0
        mult = rng.integers(1, 5, k).astype(float)
        gpus = np.array([jt.scale_factor for jt in job_types]) * mult
        capacity = np.array([36.0, 36.0, 36.0])
        pairs = packing.pair_cells(throughput, mult, job_types, types, gavel_table)
        assert (pairs.cells, pairs.coef, pairs.kind_of) == reference_cells(
            throughput, mult, job_types, types, gavel_table
        )
        cell_type, cell_class = np.nonzero((throughput > 0).T)
        x_ids = np.full(throughput.shape, -1, dtype=np.int64)
        x_ids[cell_class, cell_type] = np.arange(len(cell_class))
        rows = packing.packed_rows(throughput, gpus, capacity, mult, pairs, x_ids, len(cell_class))
        head, tail, fixed = reference_rows(throughput, gpus, capacity, mult, pairs, x_ids, len(cell_class))
        for got, want in ((rows.head, head), (rows.tail, tail)):
            for field in ("index", "value", "lengths", "lower", "upper"):
                assert np.array_equal(getattr(got, field), getattr(want, field)), field
        assert np.array_equal(rows.fixed, fixed)


# --------------------------------------------------------------------------- the mechanism with pairs


def reference_select(mech, order, scale, ok):
    """The greedy fill as written before pairs were dropped up front: every entry ranked, a
    pair sharing a job with a chosen entry skipped when its turn comes."""
    prio, deficit, alloc, ok = mech._matrices({}, ok)
    free, taken, chosen = mech.cluster_capacity(), set(), []
    picked = np.zeros(len(mech.keys), dtype=bool)
    for j in order:
        ranked = np.lexsort((-alloc[:, j], -deficit[:, j], -prio[:, j]))
        visit = ok[:, j] & ~picked
        left, newly = free[j], []
        for i in ranked[visit[ranked]].tolist():
            if left == 0:
                break
            key = mech.keys[i]
            if not taken.isdisjoint(key) or scale[key] > left:
                continue
            chosen.append((key, j))
            newly.append(i)
            left -= scale[key]
            taken.update(key)
        free[j] = left
        picked[newly] = True
    return chosen


@pytest.mark.parametrize("seed", range(6))
def test_fill_with_pairs_is_the_plain_greedy_fill(seed):
    """Pairs of a job chosen on an earlier type are dropped before ranking: the same choices."""
    rng = np.random.default_rng(seed)
    cluster = cluster_from_dict({"worker_types": {"a": 6, "b": 5, "c": 4}})
    mech = RoundMechanism(cluster, round_s=360.0)
    jobs = [f"j{i}" for i in range(40)]
    mech.add_jobs([(jid,) for jid in jobs])
    pairs = {tuple(sorted(rng.choice(jobs, 2, replace=False).tolist())) for _ in range(150)}
    mech.add_pairs(sorted(pairs))
    mech.remove_many([k for k in mech.keys if len(k) > 1 and rng.random() < 0.2])
    mech.reset(0.0)
    mech.set_allocation({k: rng.random(3) * (rng.random(3) < 0.6) for k in mech.keys})
    for _ in range(3):  # a few rounds of received time, so priorities differ
        for key in mech.keys:
            j = int(rng.integers(0, 3))
            if rng.random() < 0.3:
                mech.record(key, j, 360.0)
    scale = {k: 1 for k in mech.keys}
    ok = rng.random((len(mech.keys), 3)) < 0.8
    for order in ([0, 1, 2], [2, 0, 1]):
        assert mech.select(order, scale, {}, ok=ok) == reference_select(mech, order, scale, ok)


def test_add_pairs_is_add_pair_one_by_one():
    cluster = cluster_from_dict({"worker_types": {"a": 2, "b": 2}})
    one, many = RoundMechanism(cluster), RoundMechanism(cluster)
    for mech in (one, many):
        mech.add_jobs([("x",), ("y",), ("z",)])
    pairs = [("x", "y"), ("x", "z"), ("y", "z")]
    for key in pairs:
        one.add_pair(key)
    many.add_pairs(pairs)
    assert one.keys == many.keys and one.rows == many.rows
    assert np.array_equal(one._spent, many._spent) and np.array_equal(one._deficit, many._deficit)
    assert np.array_equal(one._member_rows.array, many._member_rows.array)
    one.remove_many([("x", "z")])
    many.remove_many([("x", "z")])
    assert np.array_equal(one._member_rows.array, many._member_rows.array)
    assert one.entries_of("x") == many.entries_of("x") == [("x",), ("x", "y")]
