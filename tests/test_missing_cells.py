"""Cells never silent: a job type with no table row on a worker type is said once; table show marks guesses."""

from __future__ import annotations

import json

from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.formats.cluster import read_cluster
from planner.formats.coverage import missing_cells
from planner.formats.jobs import read_jobs
from planner.formats.table import JobType, read_table

runner = CliRunner()
CLUSTER = DATA / "examples" / "observed" / "cluster.yaml"  # a100: 1 GPU, t4: 3
JOBS = DATA / "examples" / "observed" / "jobs.csv"  # vision (ResNet-18 bs64), lm-a and lm-b (LM bs10)
TABLE = """worker_type,model,batch_size,scale_factor,throughput,status,source
a100,ResNet-18,64,1,40.0,ok,measured
a100,LM,10,1,20.0,ok,measured
t4,LM,10,1,0,oom,measured
"""  # ResNet-18 on t4: no row at all; LM on t4: a row saying it cannot run


def _inputs(tmp_path):
    table = tmp_path / "table.csv"
    table.write_text(TABLE)
    return ["--table", str(table), "--jobs", str(JOBS), "--cluster", str(CLUSTER)]


def test_only_absent_rows_count_and_each_job_type_once(tmp_path):
    _inputs(tmp_path)
    table, cluster = read_table(tmp_path / "table.csv"), read_cluster(CLUSTER)
    found = missing_cells(table, read_jobs(JOBS, table=table, cluster=cluster), cluster)
    assert [(m.job_type, m.worker_types, m.jobs) for m in found] == [(JobType("ResNet-18", 64, 1), ("t4",), 1)]


def test_a_gang_too_big_for_a_type_is_not_a_gap(tmp_path):
    one_gpu_t4 = tmp_path / "c.yaml"
    one_gpu_t4.write_text("worker_types:\n  a100: {gpus: 4}\n  t4: {gpus: 1}\n")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,model,batch_size,scale_factor,total_steps\nbig,ResNet-18,64,2,100\n")
    rows = "a100,ResNet-18,64,2,70.0,ok,measured\n"
    (tmp_path / "t2.csv").write_text(TABLE + rows)
    table = read_table(tmp_path / "t2.csv")
    cluster = read_cluster(one_gpu_t4)
    assert missing_cells(table, read_jobs(jobs, table=table, cluster=cluster), cluster) == []


def test_plan_warns_once_per_job_type_and_names_the_remedy(tmp_path):
    res = runner.invoke(app, ["plan", *_inputs(tmp_path), "--out", str(tmp_path / "s.json")])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if "has no t4 row" in line]
    assert len(lines) == 1, res.output
    assert "ResNet-18 (batch size 64) (1 job) has no t4 row in the table: it will not run on t4" in lines[0]
    assert "rota table estimate --solo" in lines[0]
    res = runner.invoke(app, ["plan", *_inputs(tmp_path), "--out", str(tmp_path / "s.json"), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["missing_cells"] == [
        {"model": "ResNet-18", "batch_size": 64, "scale_factor": 1, "worker_types": ["t4"], "jobs": 1}
    ]
    assert any("has no t4 row" in w for w in summary["warnings"])


def test_simulate_of_a_job_list_says_it_too(tmp_path):
    inputs = _inputs(tmp_path)
    args = [
        "simulate",
        "--table",
        inputs[1],
        "--trace",
        inputs[3],
        "--cluster",
        inputs[5],
        "--out",
        str(tmp_path / "sim"),
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if "has no t4 row" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: ResNet-18 (batch size 64) (1 job)"), res.output
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert summary["missing_cells"] == [
        {"model": "ResNet-18", "batch_size": 64, "scale_factor": 1, "worker_types": ["t4"], "jobs": 1}
    ]


def test_strict_cells_refuses_in_one_line_naming_the_table(tmp_path):
    out = tmp_path / "s.json"
    res = runner.invoke(app, ["plan", *_inputs(tmp_path), "--out", str(out), "--strict-cells"])
    assert res.exit_code == 2
    assert "table.csv: field 'worker_type': --strict-cells: ResNet-18 (batch size 64) (1 job) has no t4 row" in (
        " ".join(res.output.split())
    )
    assert "Traceback" not in res.output and not out.exists()


def test_plan_next_says_it_on_the_first_call_only(tmp_path):
    state = tmp_path / "state.json"
    first = ["plan-next", "--state", str(state), *_inputs(tmp_path), "--out", str(tmp_path / "r0.json")]
    res = runner.invoke(app, first)
    assert res.exit_code == 0 and "has no t4 row" in res.output, res.output
    res = runner.invoke(app, ["plan-next", "--state", str(state), "--out", str(tmp_path / "r1.json")])
    assert res.exit_code == 0 and "has no t4 row" not in res.output, res.output
    strict = ["plan-next", "--state", str(tmp_path / "s2.json"), *_inputs(tmp_path), "--out", str(tmp_path / "x.json")]
    res = runner.invoke(app, [*strict, "--strict-cells"])
    assert res.exit_code == 2 and "--strict-cells" in res.output and not (tmp_path / "s2.json").exists()


def test_the_shipped_examples_have_no_gaps():
    # The README's and docs' examples plan without this warning (their tables cover their jobs).
    for table, jobs, cluster in [
        (DATA / "throughputs.csv", DATA / "jobs.csv", DATA / "cluster.yaml"),
        (
            DATA / "gavel" / "simulation_throughputs.csv",
            DATA / "examples" / "lab" / "jobs.csv",
            DATA / "examples" / "lab" / "cluster.yaml",
        ),
    ]:
        t, c = read_table(table), read_cluster(cluster)
        assert missing_cells(t, read_jobs(jobs, table=t, cluster=c), c) == []


def test_table_show_marks_estimated_and_observed_cells(tmp_path):
    table = tmp_path / "marked.csv"
    table.write_text(
        "worker_type,model,batch_size,scale_factor,throughput,status,source,device_name\n"
        "a100,ResNet-18,64,1,40.0,ok,measured,\n"
        "a100,LM,10,1,20.0,ok,observed,\n"
        "t4,ResNet-18,64,1,10.0,estimated,estimated,estimated: log-speed rank 1 from 3 measured cells; p90 error 23 %\n"
        "t4,LM,10,1,5.0,estimated,estimated,estimated: log-speed rank 1 from 1 measured cell; error unknown\n"
    )
    res = runner.invoke(app, ["table", "show", str(table)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "40.000 │" in text and "~40.000" not in text  # measured: as it is
    assert "20.000 obs" in text
    assert "~10.000 ±23 %" in text
    assert "~5.000 │" in text  # estimated, band unknown
    assert "~ estimated (± p90 error, where known); obs: observed" in text
    plain = runner.invoke(app, ["table", "show", str(DATA / "throughputs.csv")])
    assert plain.exit_code == 0 and "~" not in plain.output and "obs" not in plain.output
