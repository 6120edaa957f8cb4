"""simulate, compare and sweep read traces whose GPU counts the table lacks: estimated, with a note.

Gavel's table measures ResNet-50 (batch size 64) at 1, 2, 4 and 8 GPUs; a 16-GPU job of it used to
stop every command at its row. Now its rows are estimated from the measured ones (a warning, and
`estimated_scale_factors` in the JSON), and with --strict-cells it is still an error.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from planner.cli import app

TABLE = "data/gavel/simulation_throughputs.csv"
JOBS = (
    "job_id,model,batch_size,scale_factor,total_steps\n"
    "big,ResNet-50,64,16,20000\n"
    "a,ResNet-18,64,1,30000\n"
    "b,LM,20,1,30000\n"
)


def test_simulate_compare_and_sweep_estimate_a_missing_scale_factor(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text(JOBS)
    base = ["-t", TABLE, "-c", "16:16:16"]
    sim = CliRunner().invoke(app, ["simulate", *base, "--trace", str(trace), "-o", str(tmp_path / "s")])
    assert sim.exit_code == 0, sim.output
    assert "warning:" in sim.output and "x16" in sim.output
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["complete"] and summary["metrics"]["jobs_finished"] == 3
    (estimated,) = summary["estimated_scale_factors"]
    assert estimated["scale_factor"] == 16 and estimated["jobs"] == 1

    strict = CliRunner().invoke(
        app, ["simulate", *base, "--trace", str(trace), "--strict-cells", "-o", str(tmp_path / "x")]
    )
    assert strict.exit_code == 2 and "--strict-cells" in strict.output
    assert not (tmp_path / "x").exists()

    compare = CliRunner().invoke(
        app, ["compare", "--jobs", str(trace), *base, "--policies", "max_min_fairness_perf", "--json"]
    )
    assert compare.exit_code == 0, compare.output
    assert json.loads(compare.output)["estimated_scale_factors"][0]["scale_factor"] == 16

    sweep = CliRunner().invoke(
        app,
        ["sweep", *base, "--trace", str(trace), "--policies", "fifo_perf", "--out", str(tmp_path / "w"), "--no-plots"],
    )
    assert sweep.exit_code == 0, sweep.output
    assert "ok" in sweep.output


def test_no_extrapolation_beyond_the_stated_factor(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text(JOBS)
    refused = CliRunner().invoke(
        app,
        ["simulate", "-t", TABLE, "-c", "16:16:16", "--trace", str(trace), "--max-scale-extrapolation", "1.5"]
        + ["-o", str(tmp_path / "s")],
    )
    assert refused.exit_code == 2 and "scale_factor" in refused.output
