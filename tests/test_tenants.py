"""Tenants in the cluster spec: parsing, quotas as LP rows, weights for the hierarchical
policies, the policies that refuse quotas, the per-tenant summary, and `rota run` / `rota plan`
with tenants (docs/tenants.md)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, make_problem
from test_run_loop import FakeLauncher

from planner.errors import InputError
from planner.formats.cluster import NO_ENTITY, Tenant, Tenants, cluster_from_dict, cluster_to_dict, read_cluster
from planner.launch.adapter import ClusterState, NodeState
from planner.launch.events import EventLog
from planner.launch.loop import RunConfig, RunLoop, StopRequest
from planner.launch.nodes import usable_cluster
from planner.modes.plan import PlanOptions, plan_batch
from planner.modes.tenants import (
    TENANT_COLUMNS,
    JobRow,
    gpu_seconds_by_type,
    tenant_rows,
    tenant_summary,
    tenant_table,
)
from planner.policies import POLICY_NAMES, QUOTA_POLICIES, check_tenants, make_cluster_policy, make_policy
from planner.policies.problem import build_problem
from planner.rounds.mechanism import Placement

TYPES = {"v100": {"gpus": 4}, "k80": {"gpus": 4}}


def _cluster(tenants, **extra):
    return cluster_from_dict({"worker_types": TYPES, "tenants": tenants, **extra}, path="c.yaml")


# --------------------------------------------------------------------------- parsing


def test_tenants_parse_weights_quotas_and_defaults():
    cluster = _cluster(
        {"vc_a": {"weight": 2, "quota": {"v100": 3, "k80": 1.5}}, "vc_b": {"weight": 1}, "vc_c": 3, "vc_d": None},
        default_tenant_weight=0.5,
    )
    tenants = cluster.tenants
    assert tenants is not None and tenants.has_quotas
    assert tenants.weight("vc_a") == 2 and tenants.weight("vc_b") == 1 and tenants.weight("vc_c") == 3
    assert tenants.weight("vc_d") == 0.5  # listed without a weight: the default
    assert tenants.weight("unlisted") == 0.5 and tenants.weight(None) == 0.5
    assert tenants.quota("vc_a") == {"v100": 3.0, "k80": 1.5}
    assert tenants.quota("vc_b") == {} and tenants.quota("unlisted") == {} and tenants.quota(None) == {}
    # written back and read again: the same tenants
    again = cluster_from_dict(cluster_to_dict(cluster))
    assert again.tenants == tenants and again.tenants.listed["vc_a"].quota == tenants.listed["vc_a"].quota


def test_no_tenants_section_is_none_and_default_weight_alone_declares_tenants():
    assert cluster_from_dict({"worker_types": TYPES}).tenants is None
    assert "tenants" not in cluster_to_dict(cluster_from_dict({"worker_types": TYPES}))
    alone = cluster_from_dict({"worker_types": TYPES, "default_tenant_weight": 2})
    assert alone.tenants == Tenants({}, 2.0) and not alone.tenants.has_quotas
    assert cluster_from_dict({"worker_types": TYPES, "tenants": {}}).tenants == Tenants({}, 1.0)


def test_quota_larger_than_the_type_is_allowed():
    # it limits nothing (a run loop's cluster can shrink and grow back; capacity tries sizes)
    cluster = _cluster({"vc": {"quota": {"v100": 100}}})
    assert cluster.tenants.quota("vc") == {"v100": 100.0}


def test_tenants_from_yaml_file(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "worker_types:\n  v100: {gpus: 8}\n  k80: 4\n"
        "tenants:\n  vc_a: {weight: 2, quota: {v100: 8, k80: 4}}\n  vc_b: {weight: 1}\n"
        "default_tenant_weight: 1\n"
    )
    tenants = read_cluster(path).tenants
    assert tenants.weight("vc_a") == 2 and tenants.quota("vc_a") == {"v100": 8, "k80": 4}


@pytest.mark.parametrize(
    "tenants,extra,field,message",
    [
        ({"vc1": {"quota": {"v100": -1}}}, {}, "tenants.vc1.quota.v100", "non-negative"),
        ({"vc1": {"quota": {"v100": float("nan")}}}, {}, "tenants.vc1.quota.v100", "non-negative"),
        ({"vc1": {"quota": {"v100": float("inf")}}}, {}, "tenants.vc1.quota.v100", "non-negative"),
        ({"vc1": {"quota": {"v100": "8"}}}, {}, "tenants.vc1.quota.v100", "non-negative"),
        ({"vc1": {"quota": {"v100": True}}}, {}, "tenants.vc1.quota.v100", "non-negative"),
        ({"vc1": {"quota": {"a100": 2}}}, {}, "tenants.vc1.quota.a100", "unknown worker type"),
        ({"vc1": {"quota": [8, 4]}}, {}, "tenants.vc1.quota", "expected a mapping"),
        ({"vc1": {"quota": 8}}, {}, "tenants.vc1.quota", "expected a mapping"),
        ({"vc1": [1, 2]}, {}, "tenants.vc1", "expected a mapping"),
        ({"vc1": "two"}, {}, "tenants.vc1", "expected a mapping"),
        ({"vc1": {"weight": 0}}, {}, "tenants.vc1.weight", "positive"),
        ({"vc1": {"weight": -2}}, {}, "tenants.vc1.weight", "positive"),
        ({"vc1": {"weight": float("nan")}}, {}, "tenants.vc1.weight", "NaN"),
        ({"vc1": {"weight": 1e9}}, {}, "tenants.vc1.weight", "outside"),
        ({"vc1": -1}, {}, "tenants.vc1.weight", "positive"),
        ({"vc1": {"weight": 1, "qouta": {}}}, {}, "tenants.vc1.qouta", "unknown key"),
        ({NO_ENTITY: {"weight": 1}}, {}, f"tenants.{NO_ENTITY}", "rename"),
        ({"bad\nname": {}}, {}, "tenants", "not a valid name"),
        ([{"vc1": 1}], {}, "tenants", "expected a mapping"),
        ("vc1", {}, "tenants", "expected a mapping"),
        ({}, {"default_tenant_weight": 0}, "default_tenant_weight", "positive"),
        ({}, {"default_tenant_weight": "1"}, "default_tenant_weight", "expected a number"),
    ],
)
def test_bad_tenants_name_file_and_field(tenants, extra, field, message):
    with pytest.raises(InputError, match=message) as info:
        _cluster(tenants, **extra)
    assert info.value.field == field
    assert info.value.path == "c.yaml"


def test_unknown_top_level_key_lists_tenants():
    with pytest.raises(InputError, match="tenants"):
        cluster_from_dict({"worker_types": TYPES, "tenant": {}})


# --------------------------------------------------------------------------- quotas in the LP

# Tenant A has three jobs, B one; v100 is twice as fast as k80 for every job.
T = [[2.0, 1.0], [2.0, 1.0], [2.0, 1.0], [3.0, 1.5]]


def _problem(quota=None, weights=None, entity=("A", "A", "A", "B"), throughput=T, capacity=(4, 4), scale=None):
    problem = make_problem(throughput, list(capacity), scale=scale, names=["v100", "k80"])
    problem.entity = list(entity)
    if quota is not None or weights is not None:
        listed = {
            e: Tenant(e, (weights or {}).get(e, 1.0), (quota or {}).get(e, {}))
            for e in {*(quota or {}), *(weights or {})}
        }
        problem.tenants = Tenants(listed)
    return problem


def _used(problem, x, tenant):
    members = np.array([e == tenant for e in problem.entity])
    return (problem.scale[members, None] * x[members]).sum(axis=0)


@pytest.mark.parametrize("name", QUOTA_POLICIES)
@pytest.mark.parametrize("method", ["ipm", "simplex"])
def test_quota_caps_the_tenant_per_type(name, method):
    free = make_policy(name, method=method).allocate(_problem()).x
    # without quotas A holds more than one GPU of some type (3 V100s, or 3 K80s for the agnostic ones)
    assert _used(_problem(), free, "A").max() > 1.5
    problem = _problem(quota={"A": {"v100": 1, "k80": 1}})
    allocation = make_policy(name, method=method).allocate(problem)
    assert allocation.status.startswith("optimal")
    assert np.all(_used(problem, allocation.x, "A") <= np.array([1, 1]) + 1e-6)
    # still a valid allocation: capacity and time rows hold
    assert np.all((problem.scale[:, None] * allocation.x).sum(axis=0) <= problem.capacity + 1e-6)
    assert np.all(allocation.x.sum(axis=1) <= 1 + 1e-6)


def test_quota_row_binds_where_it_should():
    # heterogeneity-aware max-sum: A's jobs would all take V100s; with 1 V100 A fills the rest with K80s
    x = make_policy("max_sum_throughput_perf").allocate(_problem(quota={"A": {"v100": 1}})).x
    assert _used(_problem(), x, "A") == pytest.approx([1, 2], abs=1e-6)
    assert x[3] == pytest.approx([1, 0], abs=1e-6)  # B is not limited


def test_quota_counts_gang_gpus_and_classes():
    # two identical 2-GPU jobs of A (one class of 2): quota 3 V100s -> at most 1.5 job-fractions
    problem = _problem(quota={"A": {"v100": 3}}, entity=("A", "A", "B"), throughput=[[2.0, 1.0]] * 3, scale=[2, 2, 1])
    x = make_policy("max_sum_throughput_perf").allocate(problem).x
    assert _used(problem, x, "A")[0] == pytest.approx(3, abs=1e-6)
    no_aggregate = make_policy("max_sum_throughput_perf", aggregate=False).allocate(problem).x
    assert _used(problem, no_aggregate, "A")[0] == pytest.approx(3, abs=1e-6)


def test_identical_jobs_of_different_tenants_are_not_one_class():
    # A and B jobs are identical; only A is limited, so they must not share a class
    problem = _problem(quota={"A": {"v100": 0.5}}, entity=("A", "B", "B", "B"), throughput=[[2.0, 1.0]] * 4)
    x = make_policy("max_min_fairness_perf").allocate(problem).x
    assert _used(problem, x, "A")[0] <= 0.5 + 1e-6
    assert _used(problem, x, "B")[0] > 2


@pytest.mark.parametrize("name", QUOTA_POLICIES)
@pytest.mark.parametrize("method", ["ipm", "simplex"])
def test_quota_zero_on_a_type_still_solves(name, method):
    problem = _problem(quota={"A": {"v100": 0}})
    allocation = make_policy(name, method=method).allocate(problem)
    assert allocation.status.startswith("optimal")
    assert _used(problem, allocation.x, "A")[0] == pytest.approx(0, abs=1e-9)
    assert _used(problem, allocation.x, "A")[1] > 0.5  # A still runs on K80s


@pytest.mark.parametrize("name", QUOTA_POLICIES)
def test_tenant_barred_everywhere_does_not_stop_the_others(name):
    # A may use no GPU at all: its jobs get nothing, B still gets its V100
    problem = _problem(quota={"A": {"v100": 0, "k80": 0}})
    allocation = make_policy(name).allocate(problem)
    assert allocation.status.startswith("optimal")
    assert np.abs(allocation.x[:3]).max() == 0
    assert allocation.x[3].sum() > 0.5
    everyone = _problem(quota={"A": {"v100": 0, "k80": 0}, "B": {"v100": 0, "k80": 0}})
    assert np.abs(make_policy(name).allocate(everyone).x).max() == 0


def test_quota_problem_from_the_cluster_and_jobs():
    cluster = read_cluster(DATA / "cluster.yaml")
    from planner.formats.jobs import read_jobs
    from planner.formats.table import read_table

    table = read_table(DATA / "throughputs.csv")
    jobs = read_jobs(DATA / "jobs.csv", table=table, cluster=cluster)
    limited = cluster_from_dict(
        {**cluster_to_dict(cluster), "tenants": {"vision": {"quota": {"a100": 1, "v100": 2}}}}, path="c"
    )
    problem = build_problem(jobs, table, limited)
    assert problem.tenants is limited.tenants
    x = make_cluster_policy("max_min_fairness_perf", limited).allocate(problem).x
    used = _used(problem, x, "vision")
    assert used[0] <= 1 + 1e-6 and used[1] <= 2 + 1e-6
    unlimited = make_policy("max_min_fairness_perf").allocate(build_problem(jobs, table, cluster)).x
    assert _used(problem, unlimited, "vision")[:2].sum() > 3  # the quota binds


def test_no_quotas_no_change():
    # tenants with weights only (or none) leave every non-hierarchical LP exactly as it was
    for name in ("max_min_fairness_perf", "min_total_duration_perf", "max_sum_throughput_perf"):
        plain = make_policy(name).allocate(_problem()).x
        weighted = make_policy(name).allocate(_problem(weights={"A": 3})).x
        assert np.array_equal(plain, weighted)


def test_packed_policies_refuse_quotas():
    with pytest.raises(InputError, match="packing policies do not honour"):
        make_policy("max_min_fairness_packed").allocate(_problem(quota={"A": {"v100": 1}}))


def test_every_policy_is_either_honouring_or_refusing():
    quota = _cluster({"vc": {"quota": {"v100": 1}}})
    weights_only = _cluster({"vc": 2})
    assert set(QUOTA_POLICIES) <= set(POLICY_NAMES)
    for name in POLICY_NAMES:
        check_tenants(name, weights_only)  # weights alone: every policy runs
        if name in QUOTA_POLICIES:
            check_tenants(name, quota)
            make_cluster_policy(name, quota)
        else:
            with pytest.raises(InputError, match=f"policy '{name}' cannot honour the tenant quotas of cluster c.yaml"):
                make_cluster_policy(name, quota)
    with pytest.raises(InputError, match="cannot honour"):
        make_cluster_policy("allox_alpha=0.5", quota)
    with pytest.raises(InputError, match="unknown policy"):
        make_cluster_policy("nope", quota)


# --------------------------------------------------------------------------- weights


def _three_jobs_one_gpu(tenants=None):
    problem = make_problem([[1.0]] * 3, [1])
    problem.entity = ["A", "B", "B"]
    problem.tenants = tenants
    return problem


@pytest.mark.parametrize("name", ["max_min_fairness_water_filling", "max_min_fairness_water_filling_perf"])
def test_cluster_weights_act_as_entity_weights(name):
    by_option = make_policy(name, entity_weights={"A": 2, "B": 1}).allocate(_three_jobs_one_gpu()).x
    by_cluster = make_policy(name).allocate(_three_jobs_one_gpu(Tenants({"A": Tenant("A", 2.0)}))).x
    flat = make_policy(name).allocate(_three_jobs_one_gpu()).x
    assert by_cluster[:, 0] == pytest.approx([2 / 3, 1 / 6, 1 / 6], abs=1e-4)
    assert by_cluster == pytest.approx(by_option, abs=1e-6)
    assert flat[:, 0] == pytest.approx([1 / 3, 1 / 3, 1 / 3], abs=1e-4)  # without tenants: per job


def test_explicit_entity_weights_override_the_cluster_per_entity():
    tenants = Tenants({"A": Tenant("A", 1.0), "B": Tenant("B", 1.0)})
    x = make_policy("max_min_fairness_water_filling", entity_weights={"A": 2}).allocate(_three_jobs_one_gpu(tenants)).x
    assert x[:, 0] == pytest.approx([2 / 3, 1 / 6, 1 / 6], abs=1e-4)  # A from the option, B from the cluster


def test_unlisted_entities_and_jobs_without_entity_take_the_default_weight():
    problem = make_problem([[1.0]] * 4, [1])
    problem.entity = ["A", "C", None, None]
    problem.tenants = Tenants({"A": Tenant("A", 1.0)}, default_weight=2.0)
    x = make_policy("max_min_fairness_water_filling").allocate(problem).x
    # A 1, C 2, the no-entity jobs together 2 (split between them)
    assert x[:, 0] == pytest.approx([1 / 5, 2 / 5, 1 / 5, 1 / 5], abs=1e-4)
    problem.tenants = None
    with pytest.raises(InputError, match="has no weight"):  # without tenants: as before
        make_policy("max_min_fairness_water_filling", entity_weights={"A": 1}).allocate(problem)


def test_weights_and_quotas_together_in_water_filling():
    tenants = Tenants({"A": Tenant("A", 2.0, {"v100": 1})})
    problem = _problem(entity=("A", "A", "A", "B"), capacity=(2, 1))
    problem.tenants = tenants
    x = make_policy("max_min_fairness_water_filling_perf").allocate(problem).x
    assert _used(problem, x, "A")[0] <= 1 + 1e-6
    assert x[3, 0] > 0.9  # B gets the V100 A may not use


# --------------------------------------------------------------------------- summary


def test_tenant_summary_on_hand_made_rows():
    rows = [
        JobRow("a1", "A", 100.0, 100.0, 0.0),
        JobRow("a2", "A", 300.0, 400.0, 100.0),
        {"job_id": "b1", "entity": "B", "jct_s": None, "finish_s": None, "arrival_s": 50.0},
        {"job_id": "n1", "entity": None, "jct_s": 200.0, "finish_s": 200.0, "arrival_s": 0.0},
    ]
    gpu_s = {"a1": {"v100": 100.0}, "a2": {"v100": 300.0, "k80": 300.0}, "b1": {"k80": 500.0}, "n1": {"v100": 100.0}}
    tenants = Tenants({"A": Tenant("A", 3.0, {"v100": 2.0, "k80": 0.0})}, default_weight=1.0)
    summary = tenant_summary(rows, gpu_s, tenants, end_s=600.0)
    assert list(summary) == ["A", "B", NO_ENTITY]
    a, b, none = summary["A"], summary["B"], summary[NO_ENTITY]
    assert (a["jobs"], a["finished"], b["finished"], none["jobs"]) == (2, 2, 0, 1)
    assert a["gpu_s"] == 700 and a["gpu_s_by_type"] == {"v100": 400.0, "k80": 300.0}
    assert a["gpu_share"] == pytest.approx(700 / 1300) and b["gpu_share"] == pytest.approx(500 / 1300)
    assert (
        a["weight"] == 3 and a["weight_share"] == pytest.approx(3 / 5) and none["weight_share"] == pytest.approx(1 / 5)
    )
    assert a["active_s"] == 400 and b["active_s"] == 550  # B unfinished: until end_s
    assert a["gpus_by_type"]["v100"] == pytest.approx(1.0)
    assert a["quota_use"]["v100"] == pytest.approx(0.5) and math.isinf(a["quota_use"]["k80"])  # 0 quota, used
    assert b["quota"] is None and b["quota_use"] is None
    assert a["jct_s"]["n"] == 2 and a["jct_s"]["mean"] == pytest.approx(200) and a["jct_s"]["p90"] == pytest.approx(280)
    assert b["jct_s"]["n"] == 0 and b["jct_s"]["mean"] is None
    # rows to print, and the rich table
    printed = tenant_rows(summary)
    assert printed[0][0] == "A" and len(printed[0]) == len(TENANT_COLUMNS)
    assert printed[0][6] == "inf k80" and printed[1][6] == "-" and printed[1][7] == "-"
    assert tenant_table(summary).row_count == 3
    # JSON-ready
    import json

    json.dumps(summary, allow_nan=True)


def test_tenant_summary_without_tenants_or_per_type_seconds():
    rows = [JobRow("a", "A", 10.0, 10.0, 0.0), JobRow("b", "B", 30.0, 30.0, 0.0)]
    summary = tenant_summary(rows, {"a": 10.0, "b": 30.0})
    assert summary["A"]["weight"] is None and summary["A"]["gpu_share"] == pytest.approx(0.25)
    assert summary["A"]["gpu_s_by_type"] is None and summary["A"]["quota_use"] is None
    assert tenant_summary([], {}) == {}


def test_gpu_seconds_by_type_splits_pairs():
    rounds = [
        (360.0, [Placement(("a",), "v100", (("n0", 0), ("n0", 1))), Placement(("b", "c"), "k80", (("n1", 0),))]),
        (100.0, [Placement(("a",), "k80", (("n1", 0),))]),
    ]
    tally = gpu_seconds_by_type(rounds)
    assert tally == {"a": {"v100": 720.0, "k80": 100.0}, "b": {"k80": 180.0}, "c": {"k80": 180.0}}


# --------------------------------------------------------------------------- plan and run


def _tenant_cluster(tmp_path: Path, tenants: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text((DATA / "cluster.yaml").read_text() + tenants)
    return path


def test_plan_honours_quotas_and_refuses_fifo(tmp_path):
    cluster = _tenant_cluster(tmp_path, "tenants:\n  vision: {weight: 1, quota: {a100: 1, v100: 2}}\n")
    outcome = plan_batch(DATA / "throughputs.csv", DATA / "jobs.csv", cluster, PlanOptions(rounds=1))
    entity = {j.job_id: j.entity for j in outcome.jobs}
    scale = {j.job_id: j.scale_factor for j in outcome.jobs}
    types = outcome.result.worker_types
    for solve in outcome.result.solves:
        x = np.asarray(solve.allocation.x)
        held = sum(scale[jid] * x[i] for i, jid in enumerate(solve.job_ids) if entity[jid] == "vision")
        assert held[types.index("a100")] <= 1 + 1e-6 and held[types.index("v100")] <= 2 + 1e-6
    with pytest.raises(InputError, match="cannot honour the tenant quotas"):
        plan_batch(DATA / "throughputs.csv", DATA / "jobs.csv", cluster, PlanOptions(policy="fifo"))


def test_usable_cluster_keeps_tenants():
    cluster = _cluster({"vc": {"weight": 2, "quota": {"v100": 1}}})
    state = ClusterState({n: NodeState(n, n != "k80-0") for w in cluster.worker_types.values() for n in w.nodes})
    usable = usable_cluster(cluster, state)
    assert usable.capacity("k80") == 0 and usable.tenants is cluster.tenants and usable.path == cluster.path


def _run_loop(tmp_path: Path, policy: str | None = None) -> tuple[RunLoop, FakeLauncher]:
    cluster = _tenant_cluster(tmp_path, "tenants:\n  vision: {weight: 2, quota: {v100: 1, a100: 1}}\n")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "job_id,model,batch_size,scale_factor,total_steps,entity,command\n"
        "v1,ResNet-18,64,1,3000,vision,train v1\nv2,ResNet-18,64,1,3000,vision,train v2\n"
        "v3,ResNet-18,64,1,3000,vision,train v3\nn1,LM,20,1,3000,nlp,train n1\n"
    )
    config = RunConfig(
        state=tmp_path / "state.json",
        work_dir=tmp_path / "work",
        progress_dir=tmp_path / "work" / "progress",
        table=DATA / "throughputs.csv",
        cluster=cluster,
        jobs=jobs,
        policy=policy,
        round_s=360.0,
    )
    config.progress_dir.mkdir(parents=True, exist_ok=True)
    fake = FakeLauncher({}, config.progress_dir)
    return RunLoop(config, fake, EventLog(config.work_dir / "events.jsonl"), StopRequest()), fake


def test_run_loop_plans_with_quotas_and_reports_tenant_shares(tmp_path):
    loop, fake = _run_loop(tmp_path)
    summary = loop.run()
    assert summary.status == 0 and len(summary.finished) == 4
    assert set(summary.tenant_shares) == {"vision", "nlp"}
    assert sum(summary.tenant_shares.values()) == pytest.approx(1.0)
    events = [line for line in (tmp_path / "work" / "events.jsonl").read_text().splitlines() if '"plan"' in line]
    assert events and all('"tenants"' in line for line in events)
    # the allocation each round was planned from keeps vision within its quota
    assert fake.rounds and all(schedule.get("allocation") for schedule in fake.rounds)
    for schedule in fake.rounds:
        allocation = schedule["allocation"]
        types, x = allocation["worker_types"], np.asarray(allocation["x"])
        rows = [i for i, jid in enumerate(allocation["jobs"]) if jid.startswith("v")]
        assert x[rows, types.index("v100")].sum() <= 1 + 1e-6
        assert x[rows, types.index("a100")].sum() <= 1 + 1e-6


def test_run_loop_refuses_a_policy_that_cannot_honour_quotas(tmp_path):
    loop, fake = _run_loop(tmp_path, policy="fifo")
    with pytest.raises(InputError, match="cannot honour the tenant quotas"):
        loop.run()
    assert fake.rounds == []


def test_cli_plan_and_plan_next_with_tenants(tmp_path):
    from typer.testing import CliRunner

    from planner.cli import app

    runner = CliRunner()
    cluster = _tenant_cluster(tmp_path, "tenants:\n  vision: {weight: 2, quota: {v100: 1}}\n")
    inputs = ["--table", str(DATA / "throughputs.csv"), "--jobs", str(DATA / "jobs.csv"), "--cluster", str(cluster)]
    out = tmp_path / "s.json"
    ok = runner.invoke(app, ["plan", *inputs, "--out", str(out), "--rounds", "1"])
    assert ok.exit_code == 0, ok.output
    refused = runner.invoke(app, ["plan", *inputs, "--out", str(out), "--policy", "gandiva"])
    assert refused.exit_code == 2 and "cannot honour the tenant quotas" in refused.output
    # --entity-weights on top of the cluster's tenants: no error for entities the option leaves out
    weighted = runner.invoke(
        app,
        ["plan", *inputs, "--out", str(out), "--policy", "max_min_fairness_water_filling_perf", "--rounds", "1"]
        + ["--entity-weights", "nlp=3"],
    )
    assert weighted.exit_code == 0, weighted.output
    state = tmp_path / "state.json"
    refused = runner.invoke(app, ["plan-next", "--state", str(state), *inputs, "--out", str(out), "--policy", "fifo"])
    assert refused.exit_code == 2 and "cannot honour the tenant quotas" in refused.output
    assert not state.exists()
    first = runner.invoke(app, ["plan-next", "--state", str(state), *inputs, "--out", str(out)])
    assert first.exit_code == 0, first.output


def test_barred_jobs_are_found_and_refused(tmp_path):
    from planner.formats.jobs import read_jobs
    from planner.formats.table import read_table
    from planner.modes.tenants import barred_jobs

    table = read_table(DATA / "throughputs.csv")
    everywhere = "tenants:\n  rl: {quota: {a100: 0, v100: 0, t4: 0}}\n  vision: {quota: {v100: 0}}\n"
    cluster = read_cluster(_tenant_cluster(tmp_path, everywhere))
    jobs = read_jobs(DATA / "jobs.csv", table=table, cluster=cluster)
    barred = barred_jobs(jobs, table, cluster)
    assert list(barred) == ["a3c-a"] and "quota of 0 on" in barred["a3c-a"]
    assert barred_jobs(jobs, table, read_cluster(DATA / "cluster.yaml")) == {}
    with pytest.raises(InputError, match="job 'a3c-a' can never run: tenant rl has a quota of 0"):
        plan_batch(DATA / "throughputs.csv", DATA / "jobs.csv", _tenant_cluster(tmp_path, everywhere), PlanOptions())
