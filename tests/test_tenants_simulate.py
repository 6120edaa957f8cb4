"""Tenants in simulation: the cluster's tenants reach simulate, compare and sweep.

One tenant with eight long jobs and one with a single job share four GPUs. Job-level fairness
gives the single job 1/9 of the GPUs; with the tenants' equal weights, hierarchical fairness
gives it a whole GPU, and its JCT drops accordingly. The summary reports each tenant's GPU time,
quota use and JCTs.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app

JOBS = "job_id,model,total_steps,entity\n" + "".join(f"a{i},A,36000,big\n" for i in range(8)) + "b0,A,36000,small\n"
WATER = "max_min_fairness_water_filling_perf"


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "t.csv").write_text("worker_type,model,scale_factor,throughput\ng,A,1,1.0\n")
    (tmp_path / "jobs.csv").write_text(JOBS)
    (tmp_path / "plain.yaml").write_text("worker_types: {g: {gpus: 4}}\n")
    (tmp_path / "tenants.yaml").write_text("worker_types: {g: {gpus: 4}}\ntenants: {big: 1, small: 1}\n")
    (tmp_path / "quota.yaml").write_text(
        "worker_types: {g: {gpus: 4}}\ntenants: {big: {weight: 1, quota: {g: 2}}, small: 1}\n"
    )
    return tmp_path


def simulate(inputs, cluster: str, policy: str = WATER) -> dict:
    d = inputs
    result = CliRunner().invoke(
        app,
        ["simulate", "-t", str(d / "t.csv"), "-c", str(d / cluster), "--trace", str(d / "jobs.csv")]
        + ["-p", policy, "-o", str(d / f"out-{cluster}-{policy}"), "--json"],
    )
    assert result.exit_code == 0, result.output
    return json.loads((d / f"out-{cluster}-{policy}" / "summary.json").read_text())["metrics"]


def test_cluster_tenants_weights_reach_the_simulation(inputs):
    plain = simulate(inputs, "plain.yaml")["tenants"]
    weighted = simulate(inputs, "tenants.yaml")["tenants"]
    # job-level fairness: the lone job gets 4/9 of a GPU and finishes with the rest (81,000 s)
    assert plain["small"]["jct_s"]["mean"] == pytest.approx(81000, rel=0.01)
    assert plain["small"]["gpus_by_type"]["g"] == pytest.approx(4 / 9, rel=0.02)
    # its tenant's half of the weights: a whole GPU, done in about 36,000 s
    assert weighted["small"]["jct_s"]["mean"] < 0.5 * plain["small"]["jct_s"]["mean"]
    assert weighted["small"]["gpus_by_type"]["g"] == pytest.approx(1.0, rel=0.02)
    assert weighted["small"]["weight_share"] == 0.5
    total = sum(t["gpu_s"] for t in weighted.values())
    assert total == pytest.approx(9 * 36000)


def test_quota_use_is_reported(inputs):
    tenants = simulate(inputs, "quota.yaml")["tenants"]
    assert tenants["big"]["quota"] == {"g": 2.0}
    assert tenants["big"]["quota_use"]["g"] == pytest.approx(tenants["big"]["gpus_by_type"]["g"] / 2)


def test_policies_that_cannot_keep_quotas_are_refused_or_left_out(inputs):
    d = inputs
    base = ["-t", str(d / "t.csv"), "-c", str(d / "quota.yaml")]
    refused = CliRunner().invoke(
        app, ["simulate", *base, "--trace", str(d / "jobs.csv"), "-p", "fifo", "-o", str(d / "f")]
    )
    assert refused.exit_code == 2 and "cannot honour the tenant quotas" in refused.output
    sweep = CliRunner().invoke(
        app, ["sweep", *base, "--trace", str(d / "jobs.csv"), "--policies", "fifo", "--out", str(d / "s")]
    )
    assert sweep.exit_code == 2 and "cannot honour the tenant quotas" in sweep.output
    assert not (d / "s").exists()  # refused before any point ran
    compared = CliRunner().invoke(app, ["compare", "--jobs", str(d / "jobs.csv"), *base, "-o", str(d / "c.json")])
    assert compared.exit_code == 0, compared.output
    ran = {p["policy"]: p["status"] for p in json.loads((d / "c.json").read_text())["policies"]}
    assert "fifo" not in ran and ran["max_min_fairness_perf"] == "ok"
