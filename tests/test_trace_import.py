"""`rota trace import gavel|philly|helios|alibaba-pai`: public traces in, rota job lists and summaries out.

Inputs are small slices written here in each trace's documented columns (and four of Gavel's
real msr files, shipped in data/examples/traces/msr/); nothing is downloaded.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.formats.files import forget_inputs
from planner.formats.inputs import load_cluster, load_table
from planner.formats.jobs import read_jobs
from planner.formats.table import JobType
from planner.formats.trace import read_gavel_trace
from planner.formats.trace_import import ImportOptions, ImportSummary, Sizer, SourceJob, convert
from planner.formats.trace_import.common import parse_time
from planner.formats.trace_import.philly import run_time

runner = CliRunner()
GAVEL_TABLE = DATA / "gavel" / "simulation_throughputs.csv"
TABLE = GAVEL_TABLE  # the imports read its solo rows only (see _solo_table): the same speeds, read faster
SAMPLES = DATA / "examples" / "traces"
MSR = sorted((SAMPLES / "msr").glob("*.trace"))


@pytest.fixture(scope="module")
def table():
    return load_table(GAVEL_TABLE)


@pytest.fixture(scope="module", autouse=True)
def _solo_table(tmp_path_factory):
    """Gavel's table without its co-location rows (500 of 10,830): what an import reads of it."""
    global TABLE
    with GAVEL_TABLE.open(newline="") as f:
        rows = list(csv.reader(f))
    partner = rows[0].index("partner_model")
    path = tmp_path_factory.mktemp("table") / "gavel_solo.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([rows[0], *(r for r in rows[1:] if not r[partner])])
    TABLE = path
    yield
    TABLE = GAVEL_TABLE


@pytest.fixture(autouse=True)
def _fresh_inputs():
    forget_inputs()  # many commands in one process: each reads its inputs anew
    yield
    forget_inputs()


def rota(*args: object) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def imported(tmp_path: Path, fmt: str, *args: object, name: str = "out.csv") -> tuple[list[dict], dict, str]:
    out = tmp_path / name
    code, output = rota("trace", "import", fmt, *args, "--table", TABLE, "--out", out)
    assert code == 0, output
    with out.open() as f:
        rows = list(csv.DictReader(f))
    summary = json.loads(out.with_name(out.stem + ".summary.json").read_text())
    return rows, summary, output


def fails(tmp_path: Path, fmt: str, *args: object) -> str:
    code, output = rota("trace", "import", fmt, *args, "--table", TABLE, "--out", tmp_path / "out.csv")
    assert code == 2, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


# --------------------------------------------------------------------------- Gavel: 7-column msr traces

MSR_LINE = "{label}\tcd %s/x && python3 train.py\t--num_steps\t1\t{steps}\t{arrival}\t{scale}\n"


def msr(path: Path, *jobs: tuple[str, int, float, int]) -> Path:
    path.write_text("".join(MSR_LINE.format(label=j[0], steps=j[1], arrival=f"{j[2]:f}", scale=j[3]) for j in jobs))
    return path


def test_gavel_msr_files_merge_in_arrival_order_with_their_vc_as_entity(tmp_path):
    a = msr(tmp_path / "aaa111.trace", ("ResNet-18 (batch size 32)", 1000, 0, 1), ("A3C", 50, 300, 1))
    b = msr(tmp_path / "bbb222.trace", ("LM (batch size 20)", 700, 100, 2), ("CycleGAN", 9, 100, 1))
    rows, summary, output = imported(tmp_path, "gavel", a, b)
    assert [r["job_id"] for r in rows] == ["aaa111-0", "bbb222-0", "bbb222-1", "aaa111-1"]
    assert [float(r["arrival_s"]) for r in rows] == [0, 100, 100, 300]
    assert [r["entity"] for r in rows] == ["aaa111", "bbb222", "bbb222", "aaa111"]
    assert [(r["model"], r["batch_size"], r["scale_factor"], r["total_steps"]) for r in rows] == [
        ("ResNet-18", "32", "1", "1000"),
        ("LM", "20", "2", "700"),
        ("CycleGAN", "", "1", "9"),
        ("A3C", "", "1", "50"),
    ]
    assert summary["format"] == "rota.trace-import/v1"
    assert (summary["jobs_read"], summary["jobs_kept"], summary["entities"]) == (4, 4, 2)
    assert summary["scale_factors"] == {"1": 3, "2": 1}
    assert output.startswith("wrote ") and "4 of 4 jobs (3 x1, 1 x2 GPUs), 2 entities" in output


def test_gavel_unmeasured_scale_factors_keep_cap_or_drop(tmp_path):
    # Gavel's table has A3C only on 1 GPU, ResNet-18 up to 8, nothing at 16.
    trace = msr(
        tmp_path / "vc.trace",
        ("A3C", 10, 0, 8),
        ("ResNet-18 (batch size 32)", 10, 1, 16),
        ("ResNet-18 (batch size 32)", 10, 2, 4),
        ("CycleGAN", 10, 3, 0),
    )
    rows, summary, _ = imported(tmp_path, "gavel", trace)
    assert [(r["model"], r["scale_factor"]) for r in rows] == [("A3C", "8"), ("ResNet-18", "16"), ("ResNet-18", "4")]
    assert summary["unmeasured_kept"] == 2 and summary["dropped"] == {"zero_gpus": 1}
    rows, summary, output = imported(tmp_path, "gavel", trace, "--unmeasured", "cap")
    assert [(r["model"], r["scale_factor"]) for r in rows] == [("A3C", "1"), ("ResNet-18", "8"), ("ResNet-18", "4")]
    assert summary["gpus_capped_unmeasured"] == 2
    assert "changed: 2 jobs' GPU counts lowered to the largest the table measures" in output
    rows, summary, output = imported(tmp_path, "gavel", trace, "--unmeasured", "drop")
    assert [r["scale_factor"] for r in rows] == ["4"]
    assert summary["dropped"] == {"zero_gpus": 1, "unmeasured": 2}
    assert "dropped 3: 2 GPU count not in the table (--unmeasured drop); 1 no GPUs" in output
    rows, summary, _ = imported(tmp_path, "gavel", trace, "--max-gpus", "2")
    assert [r["scale_factor"] for r in rows] == ["2", "2", "2"]
    assert summary["gpus_capped_max"] == 3
    rows, summary, _ = imported(tmp_path, "gavel", trace, "--max-gpus", "4", "--max-gpus-action", "drop")
    assert [r["scale_factor"] for r in rows] == ["4"] and summary["dropped"]["over_max_gpus"] == 2


def test_gavel_shipped_msr_files_convert_and_simulate(tmp_path):
    """Four of Gavel's real msr traces: imported with measured GPU counts, then `rota simulate`d."""
    rows, summary, _ = imported(tmp_path, "gavel", *MSR, "--unmeasured", "cap", "--max-gpus", "4")
    assert len(MSR) == 4 and summary["jobs_read"] == summary["jobs_kept"] == 34
    assert {r["entity"] for r in rows} == {"23dbec", "51b7ef", "795a4c", "925e2b"}
    arrivals = [float(r["arrival_s"]) for r in rows]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0
    # total steps are the trace's, exactly
    first = (SAMPLES / "msr" / "23dbec.trace").read_text().splitlines()[0].split("\t")
    assert rows[[r["job_id"] for r in rows].index("23dbec-0")]["total_steps"] == str(int(first[4]))
    sim = tmp_path / "sim"
    code, output = rota(
        "simulate",
        "--table",
        GAVEL_TABLE,
        "--cluster",
        "4:4:4",
        "--policy",
        "max_min_fairness_perf",
        "--trace",
        tmp_path / "out.csv",
        "--out",
        sim,
    )
    assert code == 0, output
    assert "jobs 0-33 measured, 34 finished" in output
    assert json.loads((sim / "summary.json").read_text())["status"] == "ok"


def test_gavel_generated_10_column_traces_read_as_rota_reads_them(tmp_path, table):
    small = DATA / "gavel" / "traces" / "small_test.trace"
    rows, summary, _ = imported(tmp_path, "gavel", small)
    jobs = read_jobs(tmp_path / "out.csv", table=table, cluster=load_cluster("36:36:36"))
    gavel = read_gavel_trace(small, table)
    assert summary["jobs_kept"] == len(gavel) == 20
    assert [(j.job_type, j.total_steps, j.arrival_s, j.priority_weight) for j in jobs] == [
        (j.job_type, j.total_steps, j.arrival_s, j.priority_weight) for j in gavel
    ]
    assert {j.entity for j in jobs} == {"small_test"}


def test_gavel_bad_lines_are_one_line_errors_or_skipped(tmp_path):
    trace = tmp_path / "vc.trace"
    trace.write_text(MSR_LINE.format(label="A3C", steps=5, arrival="0", scale=1) + "A3C\tx\t-n\t1\tmany\t1\t1\n")
    assert fails(tmp_path, "gavel", trace) == (
        f"error: {trace}: row 2: field 'total_steps': expected an integer, got 'many'"
    )
    rows, summary, _ = imported(tmp_path, "gavel", trace, "--skip-bad-rows")
    assert len(rows) == 1 and summary["dropped"] == {"bad_row": 1}
    assert summary["bad_rows"][0]["row"] == 2 and summary["bad_rows"][0]["field"] == "total_steps"
    trace.write_text("A3C\tonly three\tcolumns\n")
    assert "row 1: expected 7 tab-separated columns" in fails(tmp_path, "gavel", trace)
    trace.write_text(MSR_LINE.format(label="NoSuchNet", steps=5, arrival="0", scale=1))
    assert "field 'job_type': job type 'NoSuchNet' is not in the throughput table" in fails(tmp_path, "gavel", trace)


def test_outputs_never_replace_inputs(tmp_path):
    trace = msr(tmp_path / "vc.trace", ("A3C", 5, 0, 1))
    before = trace.read_text()
    code, output = rota("trace", "import", "gavel", trace, "--table", TABLE, "--out", trace)
    assert code == 2 and "is an input of this import" in output
    code, output = rota(
        "trace", "import", "gavel", trace, "--table", TABLE, "--out", tmp_path / "o.csv", "--summary", trace
    )
    assert code == 2 and "field '--summary'" in output
    assert trace.read_text() == before
    code, output = rota("trace", "import", "gavel", trace, "--table", TABLE, "--out", tmp_path / "o.txt")
    assert code == 2 and "unsupported job list format" in output


def test_summary_path_json_and_other_output_formats(tmp_path):
    trace = msr(tmp_path / "vc.trace", ("A3C", 5, 0, 1), ("CycleGAN", 6, 10, 1))
    summary = tmp_path / "elsewhere.json"
    code, output = rota(
        "trace",
        "import",
        "gavel",
        trace,
        "--table",
        TABLE,
        "--out",
        tmp_path / "jobs.json",
        "--summary",
        summary,
        "--json",
    )
    assert code == 0, output
    assert json.loads(output) == json.loads(summary.read_text())
    assert json.loads((tmp_path / "jobs.json").read_text())["jobs"][1]["entity"] == "vc"
    code, output = rota("trace", "import", "gavel", trace, "--table", TABLE, "--out", tmp_path / "jobs.trace")
    assert code == 0 and len((tmp_path / "jobs.trace").read_text().splitlines()) == 2


# --------------------------------------------------------------------------- Philly


def philly_job(job_id, status="Pass", vc="vc1", submitted="2017-10-03 08:00:00", attempts=None, user="u1"):
    if attempts is None:
        attempts = [("2017-10-03 08:01:00", "2017-10-03 09:01:00", [["gpu0"]])]
    return {
        "status": status,
        "vc": vc,
        "jobid": job_id,
        "user": user,
        "submitted_time": submitted,
        "attempts": [
            {"start_time": s, "end_time": e, "detail": [{"ip": f"m{i}", "gpus": g} for i, g in enumerate(d)]}
            for s, e, d in attempts
        ],
    }


def test_philly_durations_gpus_and_drops(tmp_path, table):
    log = tmp_path / "cluster_job_log"
    two = [
        ("2017-10-03 08:00:00", "2017-10-03 08:30:00", [["gpu0", "gpu1"], ["gpu0", "gpu1"]]),  # 4 GPUs, 30 min
        ("2017-10-03 09:00:00", "2017-10-03 10:00:00", [["gpu0"]]),  # 1 GPU, 1 h: the first attempt's count wins
    ]
    log.write_text(
        json.dumps(
            [
                philly_job("j1", attempts=two),
                philly_job("j2", status="Killed", submitted="2017-10-03 08:10:00"),
                philly_job("j3", attempts=[]),
                philly_job("j4", attempts=[("2017-10-03 08:01:00", None, [["gpu0"]])]),
                philly_job("j5", attempts=[("2017-10-03 08:01:00", "2017-10-03 08:02:00", [])]),
                philly_job("j6", submitted=None),
                philly_job("j7", vc="vc2", submitted="2017-10-03 07:00:00"),
            ]
        )
    )
    rows, summary, output = imported(tmp_path, "philly", log, "--job-types", "ResNet-18 (batch size 32)")
    assert [r["job_id"] for r in rows] == ["j7", "j1", "j2"]
    assert [float(r["arrival_s"]) for r in rows] == [0, 3600, 4200]
    assert [r["scale_factor"] for r in rows] == ["1", "4", "1"]
    rate4 = table.solo("v100", JobType("ResNet-18", 32, 4))
    assert float(rows[1]["total_steps"]) == round(5400 * rate4)  # sum of attempts: 30 min + 1 h
    assert summary["dropped"] == {"no_submit_time": 1, "no_attempts": 1, "running": 1, "zero_gpus": 1}
    assert summary["statuses_read"] == {"Killed": 1, "Pass": 6}
    assert "steps = run time x throughput on v100" in output
    rows, _, _ = imported(tmp_path, "philly", log, "--job-types", "ResNet-18 (batch size 32)", "--duration", "last")
    assert float(rows[1]["total_steps"]) == round(3600 * rate4)
    rows, _, _ = imported(tmp_path, "philly", log, "--job-types", "ResNet-18 (batch size 32)", "--duration", "span")
    assert float(rows[1]["total_steps"]) == round(7200 * rate4)
    rows, summary, _ = imported(tmp_path, "philly", log, "--status", "pass", "--vc", "vc1")
    assert [r["job_id"] for r in rows] == ["j1"]
    assert summary["dropped"]["status"] == 1 and summary["dropped"]["entity"] == 1
    assert fails(tmp_path, "philly", log, "--status", "Done") == (
        "error: field '--status': unknown status 'Done' (this trace's: Pass, Killed, Failed)"
    )


def test_philly_attempt_times_per_readme():
    t = [(0.0, 10.0), (None, 20.0), (30.0, 50.0)]  # an attempt without a start: a logging error
    assert run_time(t, "sum") == (30.0, None)
    assert run_time(t, "last") == (20.0, None)
    assert run_time(t, "span") == (50.0, None)
    assert run_time([], "sum") == (None, "no_attempts")
    assert run_time([(0.0, None)], "sum") == (None, "running")
    assert run_time([(None, None)], "sum") == (None, "no_duration")


def test_philly_sample_and_bad_json(tmp_path):
    rows, summary, _ = imported(tmp_path, "philly", SAMPLES / "philly_cluster_job_log.json")
    assert summary["jobs_read"] == 10 and summary["jobs_kept"] == 7
    assert summary["unmeasured_kept"] == 1 and summary["steps_extrapolated"] == 1  # the 16-GPU job
    bad = tmp_path / "log.json"
    bad.write_text('[{"jobid": "a", "submitted_time": "2017-10-03 08:00:00", "attempts": 3}]')
    assert fails(tmp_path, "philly", bad) == (
        f"error: {bad}: row 1: field 'attempts': expected a list of attempts (objects), got 3"
    )
    bad.write_text('[{"jobid": "a", "submitted_time": "yesterday"}]')
    assert "field 'submitted_time': expected a date and time" in fails(tmp_path, "philly", bad)
    bad.write_text("{not json")
    assert fails(tmp_path, "philly", bad).startswith(f"error: {bad}: invalid JSON")


# --------------------------------------------------------------------------- job types drawn from the table


def _jobs(n: int, gpus: int = 1, duration: float = 3600.0) -> list[SourceJob]:
    from planner.formats.fields import Where

    return [SourceJob(Where("t", i + 1), f"j{i}", float(i), duration_s=duration, gpus=gpus) for i in range(n)]


def _convert(table, jobs, **options):
    opts = ImportOptions(**options)
    summary = ImportSummary("test", ["t"])
    return convert(jobs, Sizer(table, opts, summary), opts, summary), summary


def test_drawn_types_are_seeded_measured_at_the_gpu_count_and_sized_on_the_reference(table):
    a, _ = _convert(table, _jobs(300, gpus=2), seed=7)
    b, summary = _convert(table, _jobs(300, gpus=2), seed=7)
    c, _ = _convert(table, _jobs(300, gpus=2), seed=8)
    assert a == b and a != c
    assert all(j.job_type in set(table.job_types) for j in a)  # every type measured at 2 GPUs
    assert summary.types_redrawn > 0  # Gavel's table has 7 single-GPU-only types
    for job in a[:20]:
        assert job.total_steps == max(1, round(3600 * table.solo("v100", job.job_type)))
    singles = {jt.name for jt in table.job_types if jt.scale_factor == 1}
    names = {j.job_type.name for j in _convert(table, _jobs(2000), seed=1)[0]}
    assert names == singles  # every single-GPU type of the table is drawn


def test_job_types_option_restricts_and_unmeasured_counts(table):
    jobs, summary = _convert(table, _jobs(50, gpus=16), job_types=("ResNet-50",))
    assert {j.job_type.model for j in jobs} == {"ResNet-50"} and {j.scale_factor for j in jobs} == {16}
    assert summary.unmeasured_kept == summary.steps_extrapolated == 50
    job = jobs[0]
    x8 = JobType(job.job_type.model, job.job_type.batch_size, 8)
    assert job.total_steps == round(3600 * table.solo("v100", x8) * 2)  # linear from 8 GPUs
    jobs, summary = _convert(table, _jobs(50, gpus=16), job_types=("ResNet-50",), unmeasured="cap")
    assert {j.scale_factor for j in jobs} == {8} and summary.gpus_capped_unmeasured == 50
    with pytest.raises(InputError, match="no job left to write: 50 read, dropped: 50 GPU count not in the table"):
        _convert(table, _jobs(50, gpus=16), unmeasured="drop")


def test_window_max_jobs_and_rebased_arrivals(table):
    jobs, summary = _convert(table, _jobs(100), start_s=10, end_s=50, max_jobs=30)
    assert [j.arrival_s for j in jobs] == list(range(30))  # first kept (submitted at 10) arrives at 0
    assert summary.dropped["window"] == 60 and summary.dropped["max_jobs"] == 10
    assert summary.arrival_offset_s == 10
    with pytest.raises(InputError, match="no job left to write: 10 read, dropped: 10 shorter than --min-duration-s"):
        _convert(table, _jobs(10, duration=30), min_duration_s=60)


def test_min_duration_and_duplicate_ids(table):
    jobs = _jobs(4)
    jobs[1].duration_s = 30.0
    jobs[3].job_id = "j0"
    kept, summary = _convert(table, jobs, min_duration_s=60)
    assert [j.job_id for j in kept] == ["j0", "j2", "j0~2"]
    assert summary.dropped == {"short": 1} and summary.ids_renamed == 1


# --------------------------------------------------------------------------- Helios


HELIOS_HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"


def test_helios_columns_drops_and_duration_fallback(tmp_path):
    rows, summary, _ = imported(tmp_path, "helios", SAMPLES / "helios_cluster_log.csv", "--status", "completed")
    assert summary["jobs_read"] == 10
    assert summary["dropped"] == {"status": 3, "zero_gpus": 1, "zero_duration": 1}
    assert [r["job_id"] for r in rows] == ["1425511", "1425515", "1425516", "1425517", "1425520"]
    assert [r["entity"] for r in rows] == ["vcJkd", "vchbv", "vcpDC", "vcJkd", "vcJkd"]
    assert float(rows[-1]["arrival_s"]) == 8339  # 21:00:00 - 18:41:01
    log = tmp_path / "cluster_log.csv"
    log.write_text(HELIOS_HEADER + "1,u,vc,one,1,1,COMPLETED,2020-06-09 18:41:01,,,60,0\n")
    assert (
        fails(tmp_path, "helios", log)
        == f"error: {log}: row 1: field 'gpu_num': expected a whole number of GPUs, got 'one'"
    )
    log.write_text("job_id,vc,gpu_num,state\n1,vc,1,COMPLETED\n")
    assert fails(tmp_path, "helios", log).startswith(f"error: {log}: field 'submit_time': missing column")
    log.write_text(HELIOS_HEADER + "1,u,vc,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01\n")
    assert "row 1: has 9 cells, the header has 12" in fails(tmp_path, "helios", log)


# --------------------------------------------------------------------------- Alibaba PAI


def test_alibaba_pai_gpu_shares_run_time_and_drops(tmp_path):
    jobs, tasks = SAMPLES / "pai_job_table.csv", SAMPLES / "pai_task_table.csv"
    rows, summary, output = imported(tmp_path, "alibaba-pai", jobs, tasks)
    by_id = {r["job_id"][:4]: r for r in rows}
    assert summary["jobs_read"] == 8 and summary["dropped"] == {"running": 1, "zero_gpus": 1}
    # worker 2 x 100 % (+ a ps without GPUs) = 2; 4 x 25 % = 4 per instance; 2 x 100 % + 1 x 50 % = 3
    assert (by_id["6a1d"]["scale_factor"], by_id["8c3f"]["scale_factor"], by_id["bf6c"]["scale_factor"]) == (
        "2",
        "4",
        "3",
    )
    assert by_id["4f05"]["scale_factor"] == "1" and summary["fractional_gpus_rounded_up"] == 3
    assert summary["options"]["task_rows"] == 10 and summary["options"]["orphan_task_jobs"] == 0
    assert "3 jobs' GPU shares rounded up to whole GPUs" in output
    rows, summary, _ = imported(tmp_path, "alibaba-pai", jobs, tasks, "--fractional-gpus", "total")
    by_id = {r["job_id"][:4]: r for r in rows}
    assert (by_id["8c3f"]["scale_factor"], by_id["bf6c"]["scale_factor"]) == ("1", "3")
    rows, summary, _ = imported(tmp_path, "alibaba-pai", jobs, tasks, "--fractional-gpus", "drop")
    assert summary["dropped"]["fractional_gpus"] == 3
    rows, summary, _ = imported(tmp_path, "alibaba-pai", jobs, tasks, "--status", "Terminated")
    assert summary["dropped"] == {"running": 1, "zero_gpus": 1, "status": 1}  # the reader's findings come first


def test_alibaba_pai_header_line_orphans_and_bad_rows(tmp_path):
    jobs, tasks = tmp_path / "pai_job_table.csv", tmp_path / "pai_task_table.csv"
    jobs.write_text("job_name,inst_id,user,status,start_time,end_time\nj1,i1,u1,Terminated,100.0,200.0\n")
    tasks.write_text(
        "j1,worker,1.0,Terminated,110.0,190.0,600.0,29.3,100.0,V100\n"
        "j9,worker,1.0,Terminated,110.0,190.0,600.0,29.3,100.0,V100\n"
    )
    rows, summary, _ = imported(tmp_path, "alibaba-pai", jobs, tasks, name="a.csv")
    assert len(rows) == 1 and summary["options"]["orphan_task_jobs"] == 1
    assert summary["mean_duration_s"] == 80
    rows, _, _ = imported(tmp_path, "alibaba-pai", jobs, tasks, "--duration", "wall", name="b.csv")
    assert json.loads((tmp_path / "b.summary.json").read_text())["mean_duration_s"] == 100
    tasks.write_text("j1,worker,1.5,Terminated,110.0,190.0,600.0,29.3,100.0,V100\n")
    assert "field 'inst_num': expected a whole number of instances" in fails(tmp_path, "alibaba-pai", jobs, tasks)
    tasks.write_text("j1,worker,1.0,Terminated\n")
    assert "row 1: has 4 cells, expected 10" in fails(tmp_path, "alibaba-pai", jobs, tasks)


# --------------------------------------------------------------------------- cells


def test_times_are_dates_or_seconds():
    from planner.formats.fields import Where

    at = Where("f", 1)
    assert parse_time("2017-10-03 08:00:10", at, "t") - parse_time("2017-10-03 08:00:00", at, "t") == 10
    assert parse_time("4550879.0", at, "t") == 4550879.0
    assert parse_time(None, at, "t") is None and parse_time("None", at, "t") is None
    with pytest.raises(InputError, match=r"field 't': time 1e\+300 is out of range"):
        parse_time(1e300, at, "t")


def test_help_has_an_example():
    for fmt in ("gavel", "philly", "helios", "alibaba-pai"):
        code, output = rota("trace", "import", fmt, "--help")
        assert code == 0 and "Example: rota trace import " + fmt in output


def test_seeded_draws_do_not_use_the_global_random(table):
    random.seed(1)
    a, _ = _convert(table, _jobs(20))
    random.seed(2)
    b, _ = _convert(table, _jobs(20))
    assert a == b
