"""Integers where integers are meant: every trainer does int(os.environ["ROTA_TOTAL_STEPS"]), which
'1.01127e+06' (the demo's lm-b under '%g') broke; a job given by duration_s has whole steps."""

from __future__ import annotations

import json
import math

from conftest import DATA

from planner.export import export_schedule, load_context
from planner.formats.cluster import read_cluster
from planner.formats.jobs import parse_jobs, read_jobs
from planner.formats.schedule import write_schedule
from planner.formats.table import read_table
from planner.modes.next_round import next_round

INTEGER_VARIABLES = ("ROTA_TOTAL_STEPS", "ROTA_PLANNED_STEPS", "ROTA_ROUND_S", "ROTA_GRACE_S", "ROTA_ROUND")


def test_every_count_in_the_environment_is_an_integer(tmp_path):
    table, cluster = read_table(DATA / "throughputs.csv"), read_cluster(DATA / "cluster.yaml")
    jobs = read_jobs(DATA / "jobs.csv", table=table, cluster=cluster)
    planned = next_round(table, cluster, jobs=jobs, round_s=300.5, inputs={"jobs": DATA / "jobs.csv"})
    write_schedule(planned.schedule, tmp_path / "round.json")
    context = load_context(tmp_path / "round.json", cluster=DATA / "cluster.yaml", jobs=DATA / "jobs.csv")
    export_schedule("ray", context, tmp_path / "ray", grace_s=20.5)
    plan = json.loads((tmp_path / "ray" / "ray_plan.json").read_text())
    envs = {j["job_id"]: j["env"] for r in plan["rounds"] for g in r["groups"] for j in g["jobs"]}
    assert envs["lm-b"]["ROTA_TOTAL_STEPS"] == "1011269"
    for jid, env in envs.items():
        for name in INTEGER_VARIABLES:
            assert env[name].isdigit(), (jid, name, env[name])
    assert {env["ROTA_ROUND_S"] for env in envs.values()} == {"301"}  # a length, rounded up


def test_a_job_given_by_duration_has_whole_steps():
    table, cluster = read_table(DATA / "throughputs.csv"), read_cluster(DATA / "cluster.yaml")
    (job,) = parse_jobs(
        [{"job_id": "d", "model": "ResNet-18", "batch_size": 64, "duration_s": 1000.3}], table=table, cluster=cluster
    )
    rate = table.solo("a100", job.job_type)
    assert job.total_steps == math.ceil(1000.3 * rate) and job.total_steps >= 1000.3 * rate
