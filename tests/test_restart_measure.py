"""Restart cost: startup_s, checkpoint_save_s and checkpoint_load_s of solo measurements."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from planner.errors import InputError
from planner.formats.table import RESTART_COLUMNS, ThroughputTable, read_table, write_table
from profiler.cli import profile_command
from profiler.restart import checkpoint_round_trip, stateful_parts

app = typer.Typer()
app.command("profile")(profile_command)


@app.command("other")
def _other() -> None:  # keeps "profile" a subcommand, as in the real app
    pass


def _positive_finite(value) -> bool:
    return value is not None and value > 0 and math.isfinite(value)


def test_stateful_parts_finds_models_and_optimizers_in_containers():
    class Part:
        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    a, b = Part(), Part()
    assert stateful_parts(None) == [] and stateful_parts("text") == []
    assert (
        stateful_parts(a) == [a] and stateful_parts((a, b)) == [a, b] and stateful_parts({"g": a, "d": [b]}) == [a, b]
    )


def test_checkpoint_round_trip_restores_the_state_and_times_both_ways(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 32)).sum().backward()
    optimizer.step()  # Adam now has moments to save
    before = {k: v.clone() for k, v in model.state_dict().items()}
    moments = optimizer.state_dict()["state"][0]["exp_avg"].clone()
    times = checkpoint_round_trip(model, optimizer, "cpu", directory=str(tmp_path))
    assert times is not None and _positive_finite(times.save_s) and _positive_finite(times.load_s)
    # the parameters and both Adam moments of 4 tensors are in the file
    parameters = sum(p.numel() for p in model.parameters())
    assert times.size_bytes > 3 * 4 * parameters
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(optimizer.state_dict()["state"][0]["exp_avg"], moments)
    assert list(tmp_path.iterdir()) == []  # the temporary checkpoint is gone
    assert checkpoint_round_trip(None, None, "cpu") is None  # nothing to save


def test_a_reference_model_on_the_cpu_gets_its_restart_cost(tmp_path: Path):
    pytest.importorskip("torch")
    out = tmp_path / "t.csv"
    common = ["--device-types", "cpu", "--scale", "tiny", "--models", "LM", "--pairs", "none", "--budget", "0.5"]
    common += ["--window-s", "0.1", "--scale-factors", "1", "--batch-sizes", "5"]
    result = CliRunner().invoke(app, ["profile", *common, "--out", str(out)])
    assert result.exit_code == 0, result.output
    (solo,) = read_table(out).rows
    assert solo["status"] == "ok" and solo["source"] == "measured"
    # a reference model has no note, unless a busy machine made the measurement noisy
    assert solo["notes"] is None or solo["notes"].startswith("noisy: step-time IQR ")
    for column in RESTART_COLUMNS:
        assert _positive_finite(solo[column]), (column, solo[column])
    # start-up includes spawning a Python and importing torch: not instantaneous
    assert solo["startup_s"] > solo["step_time_median_s"]
    # --no-restart-cost keeps start-up (it costs nothing) and skips the checkpoint
    out2 = tmp_path / "t2.csv"
    result = CliRunner().invoke(app, ["profile", *common, "--no-restart-cost", "--out", str(out2)])
    assert result.exit_code == 0, result.output
    (row,) = read_table(out2).rows
    assert _positive_finite(row["startup_s"]) and row["checkpoint_save_s"] is None and row["checkpoint_load_s"] is None


def test_the_table_keeps_validates_and_round_trips_the_restart_columns(tmp_path):
    row = {"worker_type": "cpu", "model": "m", "scale_factor": 1, "throughput": 2.0, "status": "ok"}
    restart = {"startup_s": 7.5, "checkpoint_save_s": 0.25, "checkpoint_load_s": 0.125, "notes": "workload a.b:c"}
    table = ThroughputTable.from_records([{**row, **restart}])
    for suffix in (".csv", ".parquet"):
        path = tmp_path / f"t{suffix}"
        write_table(table, path)
        (back,) = read_table(path).rows
        assert {k: back[k] for k in restart} == restart
    for bad in ("-1", "nan", "inf", "soon"):
        with pytest.raises(InputError, match="startup_s"):
            ThroughputTable.from_records([{**row, "startup_s": bad}])


def test_a_table_without_restart_values_keeps_its_v1_columns(tmp_path):
    row = {"worker_type": "cpu", "model": "m", "scale_factor": 1, "throughput": 2.0, "status": "ok"}
    path = tmp_path / "t.csv"
    write_table(ThroughputTable.from_records([row]), path)
    header = path.read_text().splitlines()[0].split(",")
    assert header[-1] == "measured_at" and not set(header) & {*RESTART_COLUMNS, "notes"}
