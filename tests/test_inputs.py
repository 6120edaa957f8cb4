"""Cluster spec and job list validation."""

from __future__ import annotations

import pytest
from conftest import DATA

from planner.errors import InputError
from planner.formats.cluster import cluster_from_dict, read_cluster
from planner.formats.jobs import read_jobs
from planner.formats.table import read_table


def test_example_cluster():
    cluster = read_cluster(DATA / "cluster.yaml")
    assert cluster.names == ["a100", "v100", "t4"]
    assert cluster.worker_types["v100"].nodes == ("v100-0", "v100-1")
    assert cluster.worker_types["t4"].gpu_slots()[:3] == [("t4-0", 0), ("t4-0", 1), ("t4-1", 0)]
    assert cluster.total_gpus == 20


@pytest.mark.parametrize(
    "spec,field,message",
    [
        ({"worker_types": {"v100": {"gpus": 0}}}, "worker_types.v100.gpus", "positive"),
        ({"worker_types": {"v100": {"gpus": 6, "gpus_per_node": 4}}}, "worker_types.v100.gpus_per_node", "split"),
        ({"worker_types": {"v100": {"gpus": 4, "nodes": ["a", "b"]}}}, "worker_types.v100.nodes", "1 node"),
        ({"worker_types": {"v100": {"gpus": 2, "colour": 1}}}, "worker_types.v100.colour", "unknown key"),
        (
            {"worker_types": {"v100": {"gpus": 2, "cost_per_gpu_hour": -1}}},
            "worker_types.v100.cost_per_gpu_hour",
            "non-negative",
        ),
        ({"worker_types": {}}, "worker_types", "at least one"),
        (
            {"worker_types": {"a": {"gpus": 1, "nodes": ["n"]}, "b": {"gpus": 1, "nodes": ["n"]}}},
            "worker_types.b.nodes",
            "also used",
        ),
        ({"worker_types": {"a": 2}, "format": "v0"}, "format", "unsupported"),
        ({"worker_types": {"a": {"gpus_per_node": 2}}}, "worker_types.a.gpus", "required"),
    ],
)
def test_bad_cluster(spec, field, message):
    with pytest.raises(InputError) as info:
        cluster_from_dict(spec, path="c.yaml")
    assert f"field '{field}'" in str(info.value) and message in str(info.value)


def test_cluster_file_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("worker_types: [unclosed")
    with pytest.raises(InputError, match="cannot parse"):
        read_cluster(path)
    with pytest.raises(InputError, match="file not found"):
        read_cluster(tmp_path / "none.yaml")


@pytest.fixture
def inputs():
    return read_table(DATA / "throughputs.csv"), read_cluster(DATA / "cluster.yaml")


def write_jobs(tmp_path, body, header="job_id,model,batch_size,scale_factor,total_steps"):
    path = tmp_path / "jobs.csv"
    path.write_text(header + "\n" + body + "\n")
    return path


def test_example_jobs(inputs):
    table, cluster = inputs
    jobs = read_jobs(DATA / "jobs.csv", table=table, cluster=cluster)
    assert len(jobs) == 12
    lm = next(j for j in jobs if j.job_id == "lm-a")
    # duration on the fastest type (a100): 3600 s x its throughput
    assert lm.total_steps == pytest.approx(3600 * table.solo("a100", lm.job_type))


@pytest.mark.parametrize(
    "body,field,message",
    [
        ("a,Unknown,32,1,100", "model", "unknown model"),
        ("a,ResNet-18,7,1,100", "batch_size", "unknown job type"),
        ("a,ResNet-18,64,16,100", "scale_factor", "larger than any worker type"),
        ("a,ResNet-18,64,1,100\na,ResNet-18,64,1,50", "job_id", "duplicate job id"),
        ("a,ResNet-18,64,1,-5", "total_steps", "positive"),
        ("a,ResNet-18,64,1,nan", "total_steps", "NaN"),
        ("a,ResNet-18,64,1,", "total_steps", "exactly one"),
        (",ResNet-18,64,1,10", "job_id", "required"),
        ("a,Recommendation,1024,2,10", "scale_factor", "(it has scale factors 1)"),
        ("a,ResNet-18,64,3,10", "scale_factor", "(it has scale factors 1, 2, 4)"),
    ],
)
def test_bad_jobs(tmp_path, inputs, body, field, message):
    table, cluster = inputs
    path = write_jobs(tmp_path, body)
    with pytest.raises(InputError) as info:
        read_jobs(path, table=table, cluster=cluster)
    text = str(info.value)
    assert str(path) in text and f"field '{field}'" in text and message in text and "row" in text


def test_rows_of_a_type_seen_before_are_still_checked_field_by_field(tmp_path, inputs):
    # job types are checked once per distinct (model, batch size, scale factor): a later row that
    # differs in any of them is checked afresh and named
    table, cluster = inputs
    rows = [f"j{i},ResNet-18,64,1,100" for i in range(5)] + ["j5,ResNet-18,64,16,100", "j6,ResNet-18,7,1,100"]
    with pytest.raises(InputError, match=r"row 6: field 'scale_factor': scale factor 16 is larger"):
        read_jobs(write_jobs(tmp_path, "\n".join(rows)), table=table, cluster=cluster)
    with pytest.raises(InputError, match=r"row 6: field 'batch_size': unknown job type"):
        read_jobs(write_jobs(tmp_path, "\n".join(rows[:5] + rows[6:])), table=table, cluster=cluster)
    jobs = read_jobs(
        write_jobs(tmp_path, "\n".join(rows[:5] + ["j5,ResNet-18,64.0,1,100"])), table=table, cluster=cluster
    )
    assert {j.job_type for j in jobs} == {jobs[0].job_type} and jobs[0].job_type.batch_size == 64


def test_job_that_fits_nowhere(tmp_path, inputs):
    table, _ = inputs
    cluster = cluster_from_dict({"worker_types": {"t4": {"gpus": 2}}})
    path = write_jobs(tmp_path, "a,ResNet-50,64,1,10")  # oom on t4 in the demo table
    with pytest.raises(InputError, match="cannot run on any worker type"):
        read_jobs(path, table=table, cluster=cluster)


def test_jobs_json_and_unknown_column(tmp_path, inputs):
    table, cluster = inputs
    path = tmp_path / "jobs.json"
    path.write_text(
        '{"format": "rota.jobs/v1", "jobs": [{"job_id": "x", "model": "LM", "batch_size": 20, '
        '"total_steps": 1000, "priority_weight": 2}]}'
    )
    jobs = read_jobs(path, table=table, cluster=cluster)
    assert jobs[0].priority_weight == 2 and jobs[0].scale_factor == 1
    bad = write_jobs(tmp_path, "a,LM,20,1,10,1", header="job_id,model,batch_size,scale_factor,total_steps,speed")
    with pytest.raises(InputError, match="field 'speed': unknown column"):
        read_jobs(bad, table=table, cluster=cluster)


def test_csv_records_header_bom_blank_lines_and_short_rows(tmp_path):
    from planner.formats.files import read_csv_records

    path = tmp_path / "t.csv"
    path.write_text('\ufeff a , b ,c\n1,"x, y",3\n\n4,5\n', encoding="utf-8")
    columns, records = read_csv_records(path)
    assert columns == ["a", "b", "c"]
    assert records == [{"a": "1", "b": "x, y", "c": "3"}, {"a": "4", "b": "5", "c": ""}]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "empty file (no header row)"),
        ("a,b\n1,2\n3,4,5\n", "row 2: has 3 cells, the header has 2"),
        ("a,b\n\xff\xfe,1\n", "not UTF-8 text"),
    ],
)
def test_csv_records_errors_name_file_and_row(tmp_path, text, expected):
    from planner.formats.files import read_csv_records

    path = tmp_path / "t.csv"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(InputError) as caught:
        read_csv_records(path)
    assert str(caught.value).startswith(str(path)) and expected in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("steps,duration", [("100", ""), ("", "3600")])
def test_reference_worker_type_must_be_a_type_of_the_table(tmp_path, inputs, steps, duration):
    table, cluster = inputs
    header = "job_id,model,batch_size,scale_factor,total_steps,duration_s,reference_worker_type"
    path = write_jobs(tmp_path, f"a,ResNet-18,64,1,{steps},{duration},h100", header=header)
    with pytest.raises(InputError, match=r"row 1: field 'reference_worker_type': 'h100' is not a worker type of"):
        read_jobs(path, table=table, cluster=cluster)
    known = table.worker_types[0]
    jobs = read_jobs(
        write_jobs(tmp_path, f"a,ResNet-18,64,1,{steps},{duration},{known}", header=header),
        table=table,
        cluster=cluster,
    )
    assert jobs[0].total_steps > 0
