"""Absurd sizes and values on the command line: every count, size and grid option has a stated
maximum and is refused with it in one line (exit 2, no traceback); nothing hangs or eats memory.
Also: a failed sweep is marked as such, a corrupt sweep.json is one line naming the file."""

from __future__ import annotations

import json

import pytest
from test_trace import cli_app, synthetic_table
from typer.testing import CliRunner

import planner.modes.sweep as sweep
from planner.cli import app
from planner.errors import InputError
from planner.formats.table import write_table
from planner.modes.generator import MAX_JOBS, MAX_SEED, GeneratorConfig, JobGenerator, rate_to_lam
from planner.modes.sweep import MAX_GRID_VALUES, MAX_POINTS, SweepSpec, rate_grid, run_sweep, worker_limit


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "t.csv"
    write_table(synthetic_table(), path)
    return str(path)


def _refused(args: list[str], *needles: str) -> str:
    result = CliRunner().invoke(app, args)
    text = result.output
    assert result.exit_code == 2, text
    assert "Traceback" not in text and result.exception is None or isinstance(result.exception, SystemExit), text
    flat = " ".join(text.replace("│", " ").split())
    for needle in needles:
        assert needle in flat, flat
    return flat


def _sim(table, tmp_path, *extra):
    return ["simulate", "-t", table, "-c", "v100=4,k80=4", "-o", str(tmp_path / "sim"), *extra]


def _gen(table, tmp_path, *extra):
    return ["trace", "generate", "-t", table, "-o", str(tmp_path / "a.csv"), *extra]


def _sweep(table, tmp_path, *extra):
    return ["sweep", "-t", table, "-c", "v100=4,k80=4", "--no-plots", "-o", str(tmp_path / "sw"), *extra]


# --------------------------------------------------------------------------- counts and sizes


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["-n", "1000000000000"], ["--num-jobs", str(MAX_JOBS)]),
        (["-w", "0:1000000000000"], ["--window", str(MAX_JOBS)]),
        (["-n", "5", "--max-active", "1000000000"], ["--max-active", str(MAX_JOBS)]),
        (["-n", "5", "--seed=-1"], ["--seed", "greater than or equal to 0"]),
        (["-n", "5", f"--seed={MAX_SEED + 1}"], ["--seed", str(MAX_SEED)]),
        (["-n", "5", "--rate", "1e-310"], ["--rate", "1e-06"]),
        (["-n", "5", "--rate", "1e400"], ["--rate"]),
        (["-n", "5", "--rate", "nan"], ["--rate"]),
        (["-n", "5", "--round-length", "nan"], ["--round-length"]),
        (["-n", "5", "--resolve-interval", "inf"], ["--resolve-interval"]),
        (["-n", "5", "--restart-cost", "1e400"], ["--restart-cost"]),
    ],
)
def test_simulate_options_are_bounded(table, tmp_path, extra, needles):
    _refused(_sim(table, tmp_path, *extra), *needles)
    assert not (tmp_path / "sim").exists()


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["-n", "1000000000000"], ["--num-jobs", str(MAX_JOBS)]),
        (["-n", "5", "--rate", "1e-310"], ["--rate", "1e-06"]),
        (["-n", "5", "--seed=-1"], ["--seed"]),
        (["-n", "5", "--duration-h", "nan"], ["--duration-h"]),
    ],
)
def test_trace_generate_options_are_bounded(table, tmp_path, extra, needles):
    _refused(_gen(table, tmp_path, *extra), *needles)
    assert not (tmp_path / "a.csv").exists()


def test_the_smallest_rate_still_generates(table, tmp_path):
    result = CliRunner().invoke(cli_app(), _gen(table, tmp_path, "-n", "3", "--rate", "1e-6"))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("rate", [1e-310, 1e-7, 1e7, float("inf"), float("nan"), -1.0])
def test_the_generator_refuses_rates_out_of_range(table, rate):
    with pytest.raises(InputError, match="jobs per hour"):
        rate_to_lam(rate)
    with pytest.raises(InputError):
        JobGenerator(synthetic_table(), GeneratorConfig(rate_per_hour=rate))


def test_the_generator_refuses_more_jobs_than_the_maximum():
    with pytest.raises(InputError, match=str(MAX_JOBS)):
        JobGenerator(synthetic_table()).take(MAX_JOBS + 1)


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["-p", "fifo", "--rates", "0.1:1:1000000000", "-w", "0:10"], ["--rates", f"at most {MAX_GRID_VALUES}"]),
        (["-p", "fifo", "--rates", "1e-310", "-w", "0:10"], ["--rates", "1e-06"]),
        (["-p", "fifo", "--rates", "0.5,nan", "-w", "0:10"], ["--rates"]),
        (["-p", "fifo", "--rates", "0.5,0.5", "-w", "0:10"], ["--rates", "twice"]),
        (["-p", "fifo", "--rates", "1:1:3", "-w", "0:10"], ["--rates", "twice"]),
        (["-p", "fifo", "--rates", "1", "-w", "0:1000000000"], ["--window", str(MAX_JOBS)]),
        (["-p", "fifo", "--static-jobs", "1000000000"], ["--static-jobs", str(MAX_JOBS)]),
        (["-p", "fifo", "--static-jobs", "1e9"], ["--static-jobs", "integers"]),
        (["-p", "fifo", "--static-jobs", "2,2"], ["--static-jobs", "twice"]),
        (["-p", "fifo", "--static-jobs", ","], ["--static-jobs", "empty"]),
        (["-p", "fifo,fifo", "--static-jobs", "2"], ["--policies", "twice"]),
        (["-p", ",", "--static-jobs", "2"], ["--policies", "empty"]),
        (["-p", "fifo", "--static-jobs", "2", "--seeds", ","], ["--seeds", "empty"]),
        (["-p", "fifo", "--static-jobs", "2", "--seeds", "1,1"], ["--seeds", "twice"]),
        (["-p", "fifo", "--static-jobs", "2", "--seeds", "-1"], ["--seeds", str(MAX_SEED)]),
        (["-p", "fifo", "--static-jobs", "2", "--workers", "1000000"], ["--workers", "1024"]),
        (["-p", "fifo", "--static-jobs", "2", "--max-active", "1000000000"], ["--max-active", str(MAX_JOBS)]),
        (["-p", "fifo", "--static-jobs", "2", "--cdf-rate", "nan"], ["--cdf-rate"]),
    ],
)
def test_sweep_grids_are_bounded_and_distinct(table, tmp_path, extra, needles):
    _refused(_sweep(table, tmp_path, *extra), *needles)
    assert not (tmp_path / "sw").exists()


def test_a_grid_with_too_many_points_is_refused(table, tmp_path):
    seeds = ",".join(str(s) for s in range(MAX_GRID_VALUES))
    counts = ",".join(str(n) for n in range(1, MAX_POINTS // MAX_GRID_VALUES + 2))
    _refused(_sweep(table, tmp_path, "-p", "fifo", "--static-jobs", counts, "--seeds", seeds), str(MAX_POINTS))


def test_rate_grid_limits():
    assert len(rate_grid(f"0:1:{MAX_GRID_VALUES + 1}")) == MAX_GRID_VALUES  # the leading 0 is dropped
    for bad in (f"0.1:1:{MAX_GRID_VALUES + 2}", "1e-310", "0.1,0.1", "2:2:2", "1e9"):
        with pytest.raises(InputError, match="--rates"):
            rate_grid(bad)


def test_workers_are_capped_at_points_and_cpus(table, tmp_path, monkeypatch):
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    assert worker_limit(1024, 3) == min(3, cpus)
    assert worker_limit(None, 50) == 1
    with pytest.raises(InputError, match="--workers"):
        worker_limit(10**6, 3)
    limits: list[int] = []

    def in_this_process(work, args, todo, limit, skip, finish):
        limits.append(limit)
        for p in todo:
            finish(p, work(*args(p)))

    monkeypatch.setattr(sweep, "run_in_processes", in_this_process)
    spec = SweepSpec(table=table, cluster="v100=4,k80=4", policies=["fifo"], seeds=[0, 1], static_jobs=[2])
    run_sweep(spec, tmp_path / "sw", jobs=512)
    assert limits == ([2] if cpus >= 2 else [])  # two points: two processes, not 512
    with pytest.raises(InputError, match="--workers"):
        run_sweep(spec, tmp_path / "sw2", jobs=10**6)


# --------------------------------------------------------------------------- table estimate, compare


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--rank", "1000000000"], ["--rank", "100"]),
        (["--seed=-1"], ["--seed"]),
        (["--reg", "nan"], ["--reg"]),
        (["--reg", "1e400"], ["--reg"]),
        (["--holdout", "nan"], ["--holdout"]),
        (["--min-measured", "1000000000"], ["--min-measured", "10000"]),
    ],
)
def test_table_estimate_options_are_bounded(table, tmp_path, extra, needles):
    _refused(["table", "estimate", table, "-o", str(tmp_path / "full.csv"), *extra], *needles)
    assert not (tmp_path / "full.csv").exists()


def test_estimate_rank_is_bounded_in_the_library():
    from planner.estimate.completion import MAX_RANK, estimate_table

    with pytest.raises(InputError, match=f"0 to {MAX_RANK}"):
        estimate_table(synthetic_table(), rank=10**9)


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["-p", "fifo,fifo"], ["--policies", "twice"]),
        (["-p", ","], ["--policies", "empty"]),
        (["--seed=-1"], ["--seed"]),
        (["--round-length", "nan"], ["--round-length"]),
    ],
)
def test_compare_options_are_bounded(table, tmp_path, extra, needles):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,model,batch_size,duration_s\nj1,resnet18,64,600\n")
    _refused(["compare", "--jobs", str(jobs), "-c", "v100=4,k80=4", "-t", table, *extra], *needles)


# --------------------------------------------------------------------------- partial sweeps


def test_a_corrupt_sweep_json_is_one_line_naming_it(table, tmp_path):
    out = tmp_path / "sw"
    out.mkdir()
    cases = {"{oops": "not a sweep description", "[1, 2]": "not a sweep description"}
    cases |= {'{"setup": 3}': "not a sweep description", "\xff\xfe": "not UTF-8 text"}  # the input layer's words
    for text, expected in cases.items():
        (out / "sweep.json").write_bytes(text.encode("latin-1"))
        said = _refused(_sweep(table, tmp_path, "-p", "fifo", "--static-jobs", "2"), str(out / "sweep.json"))
        assert expected in said


def _spec(table, **kw):
    base = dict(table=table, cluster="v100=4,k80=4", policies=["fifo", "isolated"], seeds=[0], static_jobs=[2, 3])
    return SweepSpec(**{**base, **kw})


def test_a_failed_sweep_is_marked_failed_and_leaves_no_summary(table, tmp_path, monkeypatch):
    out = tmp_path / "sw"
    run_sweep(_spec(table), out)
    document = json.loads((out / "sweep.json").read_text())
    assert (document["status"], document["finished"], document["points"]) == ("complete", 4, 4)
    (out / "summary.csv").write_text("policy\nold\n")  # what the CLI wrote after the first run
    real = sweep.run_point
    calls: list[int] = []

    def failing(*args):
        calls.append(1)
        if len(calls) == 2:
            raise InputError("a point failed")
        return real(*args)

    monkeypatch.setattr(sweep, "run_point", failing)
    with pytest.raises(InputError):
        run_sweep(_spec(table, seeds=[0, 1]), out)
    document = json.loads((out / "sweep.json").read_text())
    assert (document["status"], document["finished"], document["points"]) == ("failed", 5, 8)
    assert not (out / "summary.csv").exists()  # no summary claims a grid the run did not finish
    monkeypatch.setattr(sweep, "run_point", real)
    run_sweep(_spec(table, seeds=[0, 1]), out)  # the rerun resumes and completes
    assert json.loads((out / "sweep.json").read_text())["status"] == "complete"


def test_an_interrupted_sweep_is_marked_interrupted(table, tmp_path, monkeypatch):
    from planner.modes.sweep_workers import SweepInterrupted

    def stopped(*args):
        raise SweepInterrupted(15)

    monkeypatch.setattr(sweep, "run_point", stopped)
    with pytest.raises(SweepInterrupted):
        run_sweep(_spec(table), tmp_path / "sw")
    document = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert (document["status"], document["finished"]) == ("interrupted", 0)
