"""Gavel's job generator (streams, distributions) and trace files (Gavel .trace, rota job lists)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import typer
from typer.testing import CliRunner

from planner.errors import InputError
from planner.formats.cluster import cluster_from_dict
from planner.formats.table import JobType, ThroughputTable
from planner.formats.trace import read_gavel_trace, read_trace, write_trace
from planner.modes.generator import GeneratorConfig, JobGenerator, job_templates, rate_to_lam

SINGLE = [("ResNet-18", 16), ("LM", 5), ("Recommendation", 512), ("A3C", None)]
DISTRIBUTED = {("ResNet-18", 16), ("LM", 5)}


def synthetic_table(types=("v100", "k80")) -> ThroughputTable:
    """Four job types on two worker types; two of them also at 2/4/8 GPUs."""
    rows = []
    for t_index, w in enumerate(types):
        for j_index, (model, bs) in enumerate(SINGLE):
            scales = (1, 2, 4, 8) if (model, bs) in DISTRIBUTED else (1,)
            for s in scales:
                rows.append(
                    {
                        "worker_type": w,
                        "model": model,
                        "batch_size": "" if bs is None else bs,
                        "scale_factor": s,
                        "throughput": (j_index + 1) * s / (t_index + 1),
                    }
                )
    return ThroughputTable.from_records(rows)


def cluster(**gpus):
    return cluster_from_dict({"worker_types": gpus or {"v100": 2, "k80": 2}})


def test_generator_is_reproducible_and_seed_dependent():
    table = synthetic_table()
    a = JobGenerator(table, GeneratorConfig(seed=3, rate_per_hour=2, multi_gpu=True)).take(50)
    b = JobGenerator(table, GeneratorConfig(seed=3, rate_per_hour=2, multi_gpu=True)).take(50)
    c = JobGenerator(table, GeneratorConfig(seed=4, rate_per_hour=2, multi_gpu=True)).take(50)
    assert a == b
    assert a != c
    assert [j.job_id for j in a] == [str(i) for i in range(50)]


def test_generator_distributions():
    table = synthetic_table()
    gen = JobGenerator(table, GeneratorConfig(seed=0, rate_per_hour=4, multi_gpu=True, multi_priority=True))
    jobs = gen.take(20000)
    n = len(jobs)
    scales = Counter(j.scale_factor for j in jobs)
    for s, share in {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}.items():
        assert scales[s] / n == pytest.approx(share, abs=0.015)
    long = sum(gen.durations[j.job_id] >= 60 * 1000 for j in jobs) / n
    assert long == pytest.approx(0.2, abs=0.015)
    assert all(60 * 10**1.5 <= d <= 60 * 10**4 for d in gen.durations.values())
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(jobs, jobs[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(rate_to_lam(4), rel=0.03)
    assert sum(j.priority_weight == 5 for j in jobs) / n == pytest.approx(0.2, abs=0.015)
    singles = Counter(j.job_type.model for j in jobs if j.scale_factor == 1)
    assert min(singles.values()) / max(singles.values()) > 0.9  # uniform over job types
    assert all((j.job_type.model, j.job_type.batch_size) in DISTRIBUTED for j in jobs if j.scale_factor > 1)
    for j in jobs[:200]:  # steps = duration x reference (v100) throughput
        assert j.total_steps == pytest.approx(gen.durations[j.job_id] * table.solo("v100", j.job_type))


def test_static_and_single_gpu_traces():
    jobs = JobGenerator(synthetic_table(), GeneratorConfig(seed=1)).take(30)
    assert all(j.arrival_s == 0 and j.scale_factor == 1 for j in jobs)


def test_templates_follow_gavels_job_table_order():
    names = [t.job_type.name for t in job_templates(synthetic_table(), "v100")]
    assert names == ["ResNet-18 (batch size 16)", "LM (batch size 5)", "Recommendation (batch size 512)", "A3C"]


def test_generator_rejects_bad_options():
    with pytest.raises(InputError, match="reference worker type"):
        JobGenerator(synthetic_table(), GeneratorConfig(reference_type="h100"))
    with pytest.raises(InputError, match="rate"):
        JobGenerator(synthetic_table(), GeneratorConfig(rate_per_hour=-1))


def test_matches_gavels_streams(gavel_dir):
    """Spec §11.2: Scheduler seed 0, the first ten jobs and arrivals with lam = 1800 s."""
    from planner.formats.gavel_json import import_gavel

    table = import_gavel(gavel_dir / "simulation_throughputs.json")
    gen = JobGenerator(table, GeneratorConfig(seed=0, rate_per_hour=2.0))
    jobs = gen.take(10)
    expected = [
        ("ResNet-18", 64, 68344.350, 1646636.276),
        ("Transformer", 16, 31016.609, 343170.469),
        ("Recommendation", 2048, 2146.609, 16034.378),
        ("Recommendation", 8192, 7386.675, 20989.313),
        ("LM", 5, 6858.698, 748740.885),
        ("Transformer", 64, 445845.327, 3842187.573),
        ("LM", 20, 7049.749, 456418.007),
        ("ResNet-50", 16, 4207.802, 47952.651),
        ("LM", 20, 11053.174, 715609.596),
        ("CycleGAN", None, 41544.024, 183877.515),
    ]
    for job, (model, bs, duration, steps) in zip(jobs, expected):
        assert (job.job_type.model, job.job_type.batch_size) == (model, bs)
        assert gen.durations[job.job_id] == pytest.approx(duration, abs=1e-3)
        assert job.total_steps == pytest.approx(steps, abs=1e-3)
    arrivals = [0, 489.172, 1903.550, 2735.085, 4402.136, 6171.089, 6293.083, 6316.943, 9587.340, 10127.759]
    assert [j.arrival_s for j in jobs] == pytest.approx(arrivals, abs=1e-3)
    multi = JobGenerator(table, GeneratorConfig(seed=0, rate_per_hour=2.0, multi_gpu=True)).take(10)
    assert [j.scale_factor for j in multi] == [8, 1, 1, 1, 4, 1, 1, 1, 1, 1]
    assert multi[0].total_steps == pytest.approx(17484476.261, abs=1e-3)
    assert multi[4].total_steps == pytest.approx(869104.869, abs=1e-3)


@pytest.mark.parametrize(
    "name,count", [("small_test.trace", 20), ("max_min_fairness.trace", 96), ("minimize_makespan.trace", 100)]
)
def test_gavel_traces_parse_every_line(gavel_dir, name, count):
    from planner.formats.gavel_json import import_gavel

    table = import_gavel(gavel_dir / "simulation_throughputs.json")
    path = gavel_dir / "traces" / name
    jobs = read_gavel_trace(path, table, cluster(v100=8, p100=8, k80=8))
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert len(jobs) == len(lines) == count
    first = lines[0].split("\t")
    assert jobs[0].job_type.name == first[0]
    assert jobs[0].total_steps == int(first[5]) and jobs[0].scale_factor == int(first[6])
    assert jobs[-1].arrival_s == float(lines[-1].split("\t")[9])
    assert [j.arrival_s for j in jobs] == sorted(j.arrival_s for j in jobs)


def test_trace_round_trip(tmp_path):
    table = synthetic_table()
    jobs = JobGenerator(table, GeneratorConfig(seed=2, rate_per_hour=1, multi_gpu=True)).take(40)
    for suffix in (".trace", ".csv", ".json"):
        path = tmp_path / f"jobs{suffix}"
        write_trace(jobs, path, table)
        back = read_trace(path, table, cluster(v100=8, k80=8))
        assert [(j.job_id, j.job_type, j.arrival_s, j.priority_weight) for j in back] == [
            (j.job_id, j.job_type, pytest.approx(j.arrival_s, abs=1e-6), j.priority_weight) for j in jobs
        ]
        exact = suffix != ".trace"  # Gavel writes integer steps
        for a, b in zip(back, jobs):
            assert a.total_steps == (b.total_steps if exact else int(b.total_steps))


GOOD = "LM (batch size 5)\tpython main.py\tlm\t--steps\t1\t1000\t1\t1\t-1.000000\t0\n"


@pytest.mark.parametrize(
    "text,line,field,message",
    [
        (GOOD + "LM (batch size 5)\tpython\tlm\t--steps\t1\t1000\t1\t1\t-1\n", 2, "arrival_s", "10 tab-separated"),
        (GOOD + GOOD.replace("\t1000\t", "\tmany\t"), 2, "total_steps", "expected a number"),
        (GOOD.replace("\t0\n", "\t50\n") + GOOD, 2, "arrival_s", "earlier than the previous"),
        (GOOD + GOOD.replace("LM (batch size 5)", "BERT (batch size 8)"), 2, "model", "not in the throughput table"),
        (GOOD.replace("\t1\t1\t-1", "\t2.5\t1\t-1"), 1, "scale_factor", "expected an integer"),
        (GOOD.replace("\t1000\t", "\t0\t"), 1, "total_steps", "must be positive"),
        (GOOD.replace("\t1\t1\t-1", "\t16\t1\t-1"), 1, "scale_factor", "larger than any worker type"),
    ],
)
def test_bad_traces_name_line_and_field(tmp_path, text, line, field, message):
    path = tmp_path / "bad.trace"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        read_gavel_trace(path, synthetic_table(), cluster())
    assert info.value.row == line and info.value.field == field
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_empty_and_missing_traces(tmp_path):
    (tmp_path / "empty.trace").write_text("\n")
    with pytest.raises(InputError, match="no jobs"):
        read_gavel_trace(tmp_path / "empty.trace", synthetic_table())
    with pytest.raises(InputError, match="file not found"):
        read_trace(tmp_path / "nope.trace", synthetic_table(), cluster())
    with pytest.raises(InputError, match="unsupported trace format"):
        read_trace(tmp_path / "jobs.txt", synthetic_table(), cluster())


def cli_app() -> typer.Typer:
    from planner.cli import user_errors
    from planner.cli.simulate import simulate_command, trace_generate_command
    from planner.cli.sweep import sweep_command

    app = typer.Typer()
    trace_app = typer.Typer()
    app.add_typer(trace_app, name="trace")
    trace_app.command("generate")(user_errors(trace_generate_command))
    app.command("simulate")(user_errors(simulate_command))
    app.command("sweep")(user_errors(sweep_command))
    return app


def test_cli_trace_generate(tmp_path):
    from planner.formats.table import write_table

    write_table(synthetic_table(), tmp_path / "t.csv")
    result = CliRunner().invoke(
        cli_app(),
        [
            "trace",
            "generate",
            "-t",
            str(tmp_path / "t.csv"),
            "-n",
            "25",
            "--rate",
            "3",
            "--multi-gpu",
            "-o",
            str(tmp_path / "j.trace"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "25 jobs" in result.output
    assert len((tmp_path / "j.trace").read_text().splitlines()) == 25
    bad = CliRunner().invoke(
        cli_app(), ["trace", "generate", "-t", str(tmp_path / "t.csv"), "-n", "5", "-o", str(tmp_path / "j.txt")]
    )
    assert bad.exit_code == 2 and "unsupported trace format" in bad.output


def test_job_type_of_trace_keeps_scale_factor(tmp_path):
    path = tmp_path / "x.trace"
    path.write_text(GOOD.replace("\t1\t1\t-1", "\t4\t1\t-1"))
    job = read_gavel_trace(path, synthetic_table(), cluster(v100=4))[0]
    assert job.job_type == JobType("LM", 5, 4) and math.isclose(job.total_steps, 1000)
