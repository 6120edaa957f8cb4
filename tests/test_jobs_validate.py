"""`rota jobs validate`: every problem of a job list in one run, each with its remedy; `rota plan`
refuses a list with several faults by listing them all; YAML errors keep PyYAML's line and column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.formats.cluster import read_cluster
from planner.formats.jobs import MAX_LISTED, JobListError, check_jobs, read_jobs
from planner.formats.table import read_table

runner = CliRunner()
NO_SCALE_ESTIMATE = ("--max-scale-extrapolation", "1")  # x8 from x1, x2, x4 would be 2x beyond: refused
CLUSTER = DATA / "cluster.yaml"
HEADER = "job_id,model,batch_size,scale_factor,duration_s,command"

# One row per kind of fault (row numbers count data rows from 1).
FAULTY = [
    "chat-a,gemma-2b-sft,16,1,3600,python finetune.py --lr 1e-4",  # 1: unknown model
    "chat-b,gemma-2b-sft,16,1,3600,python finetune.py --lr 3e-4",  # 2: the same, another row
    "vision-a,Resnet-18,64,1,7200,python train.py",  # 3: unknown model, a typo
    "vision-b,ResNet-50,48,1,7200,python train.py",  # 4: unknown batch size
    "vision-c,ResNet-50,64,8,7200,python train.py",  # 5: a scale factor the table has no row for (and, with
    # NO_SCALE_ESTIMATE, none estimated: by default x8 is estimated from x1, x2, x4, a warning)
    "lm-a,LM,40,2,3600,python lm.py --name 'big",  # 6: valid; no t4 row (gappy table), unsplittable
    "lm-a,LM,20,1,3600,python lm.py",  # 7: duplicate id
    "tf-a,Transformer,64,16,3600,python tf.py",  # 8: larger than any worker type
    "rec-a,Recommendation,1024,1,3600,python rec.py",  # 9: valid
]


@pytest.fixture
def gappy(tmp_path: Path) -> Path:
    """The demo table without the t4 row of LM (batch size 40) x2 (a solo row no pair names)."""
    lines = (DATA / "throughputs.csv").read_text(encoding="utf-8").splitlines()
    path = tmp_path / "gappy.csv"
    path.write_text("\n".join(line for line in lines if not line.startswith("t4,LM,40,2,")) + "\n")
    return path


def _jobs(tmp_path: Path, rows: list[str], name: str = "jobs.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def _validate(jobs: Path, table: Path, cluster: Path = CLUSTER, *extra: str):
    return runner.invoke(app, ["jobs", "validate", str(jobs), "--table", str(table), "--cluster", str(cluster), *extra])


def test_every_fault_is_reported_in_one_run_with_its_remedy(tmp_path, gappy):
    jobs = _jobs(tmp_path, FAULTY)
    result = _validate(jobs, gappy, CLUSTER, *NO_SCALE_ESTIMATE)
    assert result.exit_code == 2, result.output
    err = result.stderr
    expected = [
        # the same fault in two rows: one entry naming both, with how to measure the model
        f"error: {jobs}: rows 1, 2: field 'model': unknown model 'gemma-2b-sft'",
        "fix: measure it: rota profile --workload gemma-2b-sft=MODULE:FACTORY --batch-sizes 16",
        f"rota table estimate {gappy} --out FULL.csv --solo",
        f"or add hand-written rows to {gappy}",
        f"error: {jobs}: row 3: field 'model': unknown model 'Resnet-18'",
        "fix: did you mean 'ResNet-18'?",
        f"error: {jobs}: row 4: field 'batch_size': unknown job type 'ResNet-50 (batch size 48)'",
        "fix: the table has ResNet-50 with batch sizes 32, 64: use one of them, or measure batch size 48",
        f"error: {jobs}: row 5: field 'scale_factor': no row for 'ResNet-50 (batch size 64) x8'",
        "(it has scale factors 1, 2, 4)",
        "--scale-factors 8",
        f"warning: {jobs}: row 6: field 'model': LM (batch size 40) x2 has no t4 row in the table",
        f"fix: estimate the row: rota table estimate {gappy} --out FULL.csv --solo",
        f"warning: {jobs}: row 6: field 'command': a shell cannot split the command (no closing quotation)",
        f"error: {jobs}: row 7: field 'job_id': duplicate job id 'lm-a' (first in row 6)",
        "fix: give each job its own job_id",
        f"error: {jobs}: row 8: field 'scale_factor': scale factor 16 is larger than any worker type's GPU count (8)",
        f"lower scale_factor to at most 8, or add a worker type with at least 16 GPUs to {CLUSTER}",
    ]
    for text in expected:
        assert text in err, text
    positions = [err.index(text) for text in expected]
    assert positions == sorted(positions), "in file order"
    assert result.stdout.strip() == f"{jobs}: 6 errors, 2 warnings; 2 of 9 jobs valid"
    assert "Traceback" not in result.output


def test_json_lists_the_same_problems(tmp_path, gappy):
    jobs = _jobs(tmp_path, FAULTY)
    result = _validate(jobs, gappy, CLUSTER, "--json", *NO_SCALE_ESTIMATE)
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert report["format"] == "rota.jobs-validation/v1"
    assert (report["valid"], report["rows"], report["valid_rows"]) == (False, 9, 2)
    assert (report["errors"], report["warnings"], report["unlisted"]) == (6, 2, 0)
    found = [(p["severity"], p["rows"], p["field"]) for p in report["problems"]]
    assert found == [
        ("error", [1, 2], "model"),
        ("error", [3], "model"),
        ("error", [4], "batch_size"),
        ("error", [5], "scale_factor"),
        ("warning", [6], "model"),
        ("warning", [6], "command"),
        ("error", [7], "job_id"),
        ("error", [8], "scale_factor"),
    ]
    first = report["problems"][0]
    assert first["row_count"] == 2 and first["message"].startswith("unknown model 'gemma-2b-sft'")
    assert first["remedy"].startswith("measure it: rota profile --workload")
    assert all(p["remedy"] for p in report["problems"])


def test_a_valid_list_exits_0_and_warnings_alone_do_not_fail(tmp_path, gappy):
    result = _validate(DATA / "jobs.csv", DATA / "throughputs.csv")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"ok {DATA / 'jobs.csv'}: 0 errors, 0 warnings; 12 of 12 jobs valid"
    assert result.stderr == ""
    warned = _validate(_jobs(tmp_path, [FAULTY[5], FAULTY[8]]), gappy)
    assert warned.exit_code == 0, warned.output
    assert warned.stderr.count("warning:") == 2 and "error:" not in warned.output
    assert warned.stdout.strip().endswith("0 errors, 2 warnings; 2 of 2 jobs valid")


def test_gangs_larger_than_any_node_are_a_warning(tmp_path):
    cluster = tmp_path / "narrow.yaml"
    cluster.write_text("worker_types:\n  v100: {gpus: 8, gpus_per_node: 2}\n  t4: {gpus: 4, gpus_per_node: 1}\n")
    table = DATA / "throughputs.csv"
    result = _validate(_jobs(tmp_path, ["big,ResNet-18,64,4,3600,", "small,ResNet-18,64,2,3600,"]), table, cluster)
    assert result.exit_code == 0, result.output
    assert "warning:" in result.stderr and "row 1: field 'scale_factor'" in result.stderr
    assert "ResNet-18 (batch size 64) x4 needs 4 GPUs, more than any node it can run on has" in result.stderr
    assert "fix: lower scale_factor to at most 2 to keep each run on one node" in result.stderr
    assert "row 2" not in result.stderr


def test_a_command_with_a_control_character_is_an_error(tmp_path):
    path = tmp_path / "jobs.json"
    jobs = [
        {"job_id": "a", "model": "LM", "batch_size": 20, "total_steps": 100, "command": "python a.py\nrm -rf /"},
        {"job_id": "b", "model": "LM", "batch_size": 20, "total_steps": 100, "command": "python\tb.py"},
    ]
    path.write_text(json.dumps(jobs))
    result = _validate(path, DATA / "throughputs.csv")
    assert result.exit_code == 2, result.output
    assert f"error: {path}: row 1: field 'command': the command holds the control character '\\n'" in result.stderr
    assert "row 2" not in result.stderr  # a tab is allowed
    assert result.stdout.strip().endswith("1 error, 0 warnings; 1 of 2 jobs valid")


def test_cluster_types_without_rows_and_unknown_columns_are_listed_too(tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text("worker_types:\n  v100: 8\n  h100: 8\n")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,model,batch_size,total_step\na,LM,20,100\n")
    result = _validate(jobs, DATA / "throughputs.csv", cluster)
    assert result.exit_code == 2
    err = result.stderr
    assert f"error: {DATA / 'throughputs.csv'}: field 'worker_type': worker type(s) h100 of cluster {cluster}" in err
    assert f"error: {jobs}: field 'total_step': unknown column" in err and "fix: did you mean 'total_steps'?" in err
    assert f"error: {jobs}: row 1: field 'total_steps': give exactly one of total_steps and duration_s" in err


def test_unreadable_inputs_are_one_line(tmp_path):
    result = _validate(tmp_path / "none.csv", DATA / "throughputs.csv")
    assert result.exit_code == 2 and "file not found" in result.stderr and "Traceback" not in result.output
    result = _validate(DATA / "jobs.csv", tmp_path / "none.csv")
    assert result.exit_code == 2 and "none.csv" in result.stderr


# --------------------------------------------------------------------------- rota plan and read_jobs


def test_plan_lists_every_error_at_once(tmp_path, gappy):
    jobs = _jobs(tmp_path, FAULTY)
    out = tmp_path / "schedule.json"
    args = ["plan", "--table", str(gappy), "--jobs", str(jobs), "--cluster", str(CLUSTER), "--out", str(out)]
    result = runner.invoke(app, [*args, *NO_SCALE_ESTIMATE])
    assert result.exit_code == 2 and not out.exists()
    text = result.stderr
    assert f"error: {jobs}: 6 problems in the job list:" in text
    for where in ("rows 1, 2: field 'model'", "row 3: field 'model'", "row 4: field 'batch_size'"):
        assert where in text, where
    for where in ("row 5: field 'scale_factor'", "row 7: field 'job_id'", "row 8: field 'scale_factor'"):
        assert where in text, where
    assert "did you mean 'ResNet-18'?" in text and "warning" not in text  # warnings are validate's


def test_read_jobs_error_lists_every_fault_one_per_line(tmp_path, gappy):
    table, cluster = read_table(gappy), read_cluster(CLUSTER)
    jobs = _jobs(tmp_path, FAULTY)
    with pytest.raises(JobListError) as caught:
        read_jobs(jobs, table=table, cluster=cluster)
    lines = caught.value.lines
    assert lines[0] == f"{jobs}: 6 problems in the job list:"
    assert [line.split(": field")[0] for line in lines[1:]] == [
        "  rows 1, 2",
        "  row 3",
        "  row 4",
        "  row 5",
        "  row 7",
        "  row 8",
    ]
    assert str(caught.value) == "\n".join(lines)


def test_one_fault_stays_one_line_with_its_remedy(tmp_path):
    table, cluster = read_table(DATA / "throughputs.csv"), read_cluster(CLUSTER)
    with pytest.raises(InputError) as caught:
        read_jobs(_jobs(tmp_path, [FAULTY[0]]), table=table, cluster=cluster)
    text = str(caught.value)
    assert "\n" not in text and not isinstance(caught.value, JobListError)
    assert text.startswith(f"{tmp_path / 'jobs.csv'}: row 1: field 'model': unknown model 'gemma-2b-sft'")
    assert "; measure it: rota profile --workload gemma-2b-sft=MODULE:FACTORY" in text
    # the same fault in several rows is still one line, naming them
    with pytest.raises(InputError) as caught:
        read_jobs(_jobs(tmp_path, FAULTY[:2]), table=table, cluster=cluster)
    assert "\n" not in str(caught.value) and ": rows 1, 2: field 'model': unknown model" in str(caught.value)


def test_many_faults_are_capped_and_point_to_validate(tmp_path):
    table, cluster = read_table(DATA / "throughputs.csv"), read_cluster(CLUSTER)
    rows = [f"j{i},LM,20,1,-{i + 1}," for i in range(MAX_LISTED + 5)]  # a different fault in each row
    jobs = _jobs(tmp_path, rows)
    with pytest.raises(JobListError) as caught:
        read_jobs(jobs, table=table, cluster=cluster)
    lines = caught.value.lines
    assert lines[0].endswith(f"{MAX_LISTED + 5} problems in the job list:") and len(lines) == MAX_LISTED + 2
    assert lines[-1] == (
        f"  and 5 more (rota jobs validate {jobs} --table {DATA / 'throughputs.csv'} --cluster {CLUSTER} "
        "lists them all)"
    )


def test_check_jobs_keeps_the_valid_rows(tmp_path, gappy):
    table, cluster = read_table(gappy), read_cluster(CLUSTER)
    check = check_jobs(
        [
            {"job_id": "a", "model": "LM", "batch_size": "20", "total_steps": "10"},
            {"job_id": "a", "model": "LM", "batch_size": "20"},
        ],
        table=table,
        cluster=cluster,
    )
    assert [j.job_id for j in check.jobs] == ["a"] and check.rows == [1]
    assert [(p.field, p.rows) for p in check.errors] == [("job_id", [2]), ("total_steps", [2])]


# --------------------------------------------------------------------------- YAML syntax errors


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("worker_types:\n  v100:\n    gpus: 8\n   t4: 2\n", "line 4, column 4: "),
        ("worker_types:\n  v100: gpus: 8\n", "cannot parse: line 2, column 13: mapping values are not allowed here"),
        ("worker_types: [v100\n", "line 2, column 1: expected ',' or ']'"),
        ("worker_types:\n  v100: {gpus: 4}\n  v100: {gpus: 8}\n", "line 3, column 3: duplicate key 'v100'"),
    ],
)
def test_a_yaml_syntax_error_names_line_and_column(tmp_path, text, expected):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(text)
    with pytest.raises(InputError) as caught:
        read_cluster(cluster)
    assert expected in str(caught.value) and "\n" not in str(caught.value)
    result = _validate(DATA / "jobs.csv", DATA / "throughputs.csv", cluster)
    assert result.exit_code == 2 and f"error: {cluster}: cannot parse: " in result.stderr
    assert expected in result.stderr


def test_a_yaml_error_says_where_the_construct_began(tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text('worker_types:\n  v100: "8\n')
    with pytest.raises(InputError) as caught:
        read_cluster(cluster)
    assert str(caught.value) == (
        f"{cluster}: cannot parse: line 3, column 1: found unexpected end of stream "
        "(while scanning a quoted scalar that starts at line 2, column 9)"
    )
