"""Sweeps: grid, resumable results, saturation skipping, parallel workers, plots, CLI."""

from __future__ import annotations

import json

import pytest
from test_trace import cli_app, synthetic_table
from typer.testing import CliRunner

import planner.modes.sweep as sweep
from planner.errors import InputError
from planner.formats.table import write_table
from planner.modes.sweep import SweepSpec, load_results, rate_grid, run_sweep


@pytest.fixture
def table_path(tmp_path):
    path = tmp_path / "t.csv"
    write_table(synthetic_table(), path)
    return str(path)


def spec(table_path, **kw):
    base = dict(
        table=table_path,
        cluster="v100=4,k80=4",
        policies=["fifo_perf", "isolated"],
        seeds=[0],
        rates=[0.05, 0.1],
        window=(5, 15),
    )
    return SweepSpec(**{**base, **kw})


def test_rate_grid_like_gavel():
    rates = rate_grid("0:6:16")  # Gavel's -a 0 -b 6 -n 16: the leading 0 is dropped
    assert len(rates) == 15 and rates[0] == pytest.approx(0.4) and rates[-1] == pytest.approx(6.0)
    assert rate_grid("0.5,1") == [0.5, 1.0]
    for bad in ("", "a,b", "1:0:3", "-1"):
        with pytest.raises(InputError):
            rate_grid(bad)


def test_sweep_runs_every_point_once_and_resumes(table_path, tmp_path, monkeypatch):
    out = tmp_path / "sw"
    records = run_sweep(spec(table_path), out)
    assert [r["status"] for r in records] == ["ok"] * 4
    assert len(load_results(out)) == 4
    assert all((out / "jobs" / f"{r['key']}.csv").exists() for r in records)
    calls = []
    real = sweep.run_point
    monkeypatch.setattr(sweep, "run_point", lambda *a: calls.append(a) or real(*a))
    run_sweep(spec(table_path), out)
    assert calls == []  # everything was already done
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text("\n".join(lines[:-1]) + '\n{"key": "torn')  # killed mid-write
    with pytest.warns(UserWarning, match="line 4 was cut off"):
        again = run_sweep(spec(table_path), out)
    assert len(calls) == 1 and [r["key"] for r in again] == [r["key"] for r in records]


def test_heavier_points_after_saturation_are_not_run(table_path, tmp_path, monkeypatch):
    calls = []
    real = sweep.run_point
    monkeypatch.setattr(sweep, "run_point", lambda s, p, o: calls.append(p.rate) or real(s, p, o))
    records = run_sweep(spec(table_path, policies=["fifo_perf"], rates=[0.05, 5.0, 9.0]), tmp_path / "sw")
    assert [r["status"] for r in records] == ["ok", "saturated", "saturated"]
    assert calls == [0.05, 5.0]
    assert "offered load" in records[1]["reason"] and "already at 5" in records[2]["reason"]


def test_parallel_workers_and_setup_check(table_path, tmp_path):
    out = tmp_path / "sw"
    records = run_sweep(spec(table_path, seeds=[0, 1]), out, jobs=2)
    assert len(records) == 8 and all(r["status"] == "ok" for r in records)
    with pytest.raises(InputError, match="different window"):
        run_sweep(spec(table_path, window=(0, 10)), out)


def test_static_sweep_and_plots(table_path, tmp_path):
    pytest.importorskip("matplotlib")
    from planner.report.sweep_figures import make_sweep_plots

    out = tmp_path / "static"
    records = run_sweep(spec(table_path, rates=[], static_jobs=[5, 10], window=None), out)
    assert all(r["status"] == "ok" and r["metrics"]["jct_s"]["n"] == r["num_jobs"] for r in records)
    paths = make_sweep_plots(records, out, ["png"])
    assert [p.name for p in paths] == ["makespan_vs_jobs.png"] and paths[0].stat().st_size > 1000


def test_missing_matplotlib_is_one_line(monkeypatch, tmp_path):
    import builtins

    from planner.report import plots

    real_import = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(InputError, match="needs matplotlib") as info:
        plots.plot_cdf({"x": [1.0]}, tmp_path / "c", xlabel="x")
    assert "\n" not in str(info.value)


def test_cli_sweep(table_path, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sw"
    args = [
        "sweep",
        "-t",
        table_path,
        "-c",
        "v100=4,k80=4",
        "-p",
        "fifo_perf,isolated,max_min_fairness",
        "--rates",
        "0.05,0.1",
        "--window",
        "5:15",
        "--out",
        str(out),
        "--plot-format",
        "png,svg",
    ]
    result = CliRunner().invoke(cli_app(), args)
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert {
        "results.jsonl",
        "summary.csv",
        "jct_vs_rate.png",
        "jct_vs_rate.svg",
        "jct_cdf_rate=0.1.png",
        "rho_cdf_rate=0.1.png",
    } <= names
    rows = (out / "summary.csv").read_text().splitlines()
    assert len(rows) == 7 and rows[0].startswith("policy,seed,rate")
    as_json = CliRunner().invoke(cli_app(), args + ["--json", "--no-plots"])
    data = json.loads(as_json.output)
    assert len(data["summary"]) == 6 and data["plots"] == []
    bad = CliRunner().invoke(
        cli_app(),
        ["sweep", "-t", table_path, "-c", "v100=4", "-p", "nope", "--rates", "1", "--window", "1:2", "--out", str(out)],
    )
    assert bad.exit_code == 2 and "unknown policy" in bad.output


def test_sweep_over_a_trace_replays_the_same_jobs_at_every_point(tmp_path):
    from conftest import DATA

    from planner.formats.cluster import read_cluster
    from planner.formats.jobs import read_jobs
    from planner.formats.table import read_table
    from planner.modes.simulate import SimulationConfig, Workload, run_simulation
    from planner.report.sweep_figures import make_sweep_plots

    table, cluster = read_table(DATA / "throughputs.csv"), read_cluster(DATA / "cluster.yaml")
    s = SweepSpec(
        table=str(DATA / "throughputs.csv"),
        cluster=str(DATA / "cluster.yaml"),
        policies=["fifo_perf", "isolated"],
        seeds=[0, 1],
        trace=str(DATA / "jobs.csv"),
    )
    assert [p.key for p in s.points()] == [
        "fifo_perf__trace__seed=0",
        "fifo_perf__trace__seed=1",
        "isolated__trace__seed=0",
        "isolated__trace__seed=1",
    ]
    records = run_sweep(s, tmp_path)
    jobs = read_jobs(DATA / "jobs.csv", table=table, cluster=cluster)
    for r in records:
        direct = run_simulation(
            table, cluster, Workload(jobs=list(jobs)), SimulationConfig(policy=r["policy"], seed=r["seed"])
        )
        assert r["status"] == "ok" and r["trace"] is True
        assert r["metrics"]["jct_s"]["mean"] == direct.metrics["jct_s"]["mean"]
        assert r["metrics"]["jobs_finished"] == len(jobs)
    names = sorted(p.name for p in make_sweep_plots(records, tmp_path, ["png"]))
    assert names == ["jct_cdf_trace.png", "rho_cdf_trace.png"]
    with pytest.raises(InputError, match="--trace takes no --rates"):
        SweepSpec(**{**s.__dict__, "rates": [0.1]}).points()


def test_reuse_solves_reaches_the_las_points_only(table_path, tmp_path):
    """--reuse-solves: the grid's LAS points may reuse solves (their JCTs may move), the others
    solve every time (the same results as without it); a grid without LAS refuses it."""
    grid = dict(policies=["fifo_perf", "max_min_fairness_perf"], rates=[0.2], window=(5, 25))
    plain = {r["policy"]: r for r in run_sweep(spec(table_path, **grid), tmp_path / "plain")}
    reused = {r["policy"]: r for r in run_sweep(spec(table_path, **grid, reuse_solves=3), tmp_path / "reused")}
    for key in ("jct_s", "makespan_s", "resolves", "rounds"):  # fifo never reuses: the same run
        assert reused["fifo_perf"]["metrics"][key] == plain["fifo_perf"]["metrics"][key], key
    las = reused["max_min_fairness_perf"]["metrics"]
    assert las["resolves_reused"] > 0 and "resolves_reused" not in reused["fifo_perf"]["metrics"]
    assert json.loads((tmp_path / "reused" / "sweep.json").read_text())["setup"]["reuse_solves"] == 3
    with pytest.raises(InputError, match="applies to max_min_fairness"):
        spec(table_path, policies=["fifo_perf"], reuse_solves=1).check_grid()
