"""Users' own multi-GPU jobs: `rota profile --workload/--command --scale-factors 1,2,4`.

A gang of k ranks is started the way torchrun starts one (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT; gloo on the CPU). On a machine with
fewer cores than ranks, `--cpu-workers` lets the ranks share the cores. The
torch-free scripts here check the contract; the example job
(`examples/lab_job`, a small language model trained with DistributedDataParallel
over gloo) is profiled by both forms, then planned and exported unchanged.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from planner.cli import app as rota_app
from planner.formats.table import read_table
from profiler.cli import profile_command
from profiler.devices import MAX_CPU_WORKERS, cpu_device

REPO = Path(__file__).resolve().parents[1]
app = typer.Typer()
app.command("profile")(profile_command)


@app.command("other")
def _other() -> None:  # keeps "profile" a subcommand, as in the real app
    pass


FAST = ["--device-types", "cpu", "--budget", "0.3", "--window-s", "0.05", "--warmup-steps", "2", "--pairs", "none"]
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (gloo)")

# A torch-free gang member: writes what it was given, then steps; rank 0 reports.
GANG_SCRIPT = """
import json, os, sys, time
out, fail_rank = sys.argv[1], int(sys.argv[2])
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "ROTA_DIST_BACKEND", "ROTA_DEVICE", "ROTA_BATCH_SIZE", "OMP_NUM_THREADS"]
seen = {k: os.environ.get(k) for k in keys}
name = f"w{os.environ.get('WORLD_SIZE', '1')}-rank{os.environ.get('RANK', '0')}.json"
with open(os.path.join(out, name), "w") as f:
    json.dump(seen, f)
rank = int(os.environ.get("RANK", "0"))
i = 0
while True:
    i += 1
    end = time.perf_counter() + 0.002
    while time.perf_counter() < end:
        pass
    if rank == fail_rank and i == 5:
        print("rank gives up: bad shard", file=sys.stderr, flush=True)
        sys.exit(3)
    if rank == 0:
        print(f"ROTA_STEP {i}", flush=True)
"""


def gang_command(tmp_path: Path, fail_rank: int = -1) -> str:
    path = tmp_path / "gang.py"
    path.write_text(GANG_SCRIPT)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))} {shlex.quote(str(tmp_path))} {fail_rank}"


def invoke(*args: str):
    return CliRunner().invoke(app, ["profile", *args])


def test_cpu_workers_beyond_the_cores_share_them_and_the_rows_say_so():
    cores = cpu_device().cores
    cpu = cpu_device(workers=2 * cores)
    assert cpu.max_processes == 2 * cores and cpu.count == 2 * cores
    assert [cpu.cpu_set(r) for r in range(2 * cores)] == [(c,) for c in cpu.core_ids] * 2
    assert f"sharing {cores} cores" in cpu.device_name
    assert "sharing" not in cpu_device(workers=cores).device_name
    for bad in (0, MAX_CPU_WORKERS + 1):
        with pytest.raises(ValueError, match="CPU workers must be between 1"):
            cpu_device(workers=bad)
    result = invoke("--device-types", "cpu", "--cpu-workers", "0", "--dry-run")
    assert result.exit_code == 2 and "field '--cpu-workers'" in result.output, result.output


def dry_run(*args: str) -> list[dict]:
    result = invoke(*FAST, "--dry-run", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["measurements"]


def test_user_jobs_are_measured_data_parallel_only_when_asked(tmp_path):
    command = gang_command(tmp_path)
    alone = dry_run("--cpu-workers", "4", "--command", f"gang={command}")
    assert [m["scale_factor"] for m in alone] == [1]  # a script that forms no gang must not look 4x as fast
    asked = dry_run("--cpu-workers", "4", "--scale-factors", "1,2,4,8", "--command", f"gang={command}")
    assert [(m["mode"], m["scale_factor"]) for m in asked] == [("solo", 1), ("data_parallel", 2), ("data_parallel", 4)]


def test_a_command_gang_starts_as_torchrun_starts_it(tmp_path):
    out = tmp_path / "t.csv"
    command = gang_command(tmp_path)
    args = [*FAST, "--cpu-workers", "4", "--scale-factors", "1,2,4", "--batch-sizes", "4"]
    result = invoke(*args, "--command", f"gang={command}", "--out", str(out))
    assert result.exit_code == 0, result.output
    rows = {row["scale_factor"]: row for row in read_table(out).rows}
    assert sorted(rows) == [1, 2, 4] and {r["status"] for r in rows.values()} == {"ok"}
    for k, row in rows.items():
        # each step spins 2 ms on every rank: at most 500 steps/s per rank, k ranks summed
        assert 0 < row["throughput"] <= 500 * k and row["samples_per_s"] == pytest.approx(4 * row["throughput"])
        assert "sharing" in row["device_name"]  # 4 workers on this machine's cores, and the row says so
    assert rows[1]["startup_s"] is not None and rows[4]["startup_s"] is None  # restart cost: solo rows only
    alone = json.loads((tmp_path / "w1-rank0.json").read_text())
    assert alone["RANK"] is None and alone["MASTER_PORT"] is None and alone["ROTA_DEVICE"] == "cpu"
    ranks = [json.loads((tmp_path / f"w4-rank{r}.json").read_text()) for r in range(4)]
    assert [(e["RANK"], e["LOCAL_RANK"]) for e in ranks] == [(str(r), str(r)) for r in range(4)]
    assert {(e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["MASTER_ADDR"], e["ROTA_DIST_BACKEND"]) for e in ranks} == {
        ("4", "4", "127.0.0.1", "gloo")
    }
    ports = {e["MASTER_PORT"] for e in ranks}
    assert len(ports) == 1 and 0 < int(ports.pop()) < 65536  # one rendezvous for the gang
    assert {(e["ROTA_BATCH_SIZE"], e["OMP_NUM_THREADS"]) for e in ranks} == {("4", "1")}  # per-process batch


def test_a_failing_rank_ends_the_measurement_and_is_named(tmp_path):
    out = tmp_path / "t.csv"
    command = gang_command(tmp_path, fail_rank=1)
    result = invoke(
        *FAST, "--cpu-workers", "2", "--scale-factors", "2", "--command", f"gang={command}", "--out", str(out)
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "gang rank 1:" in lines[0] and "exited with code 3" in lines[0], result.output
    assert "bad shard" in lines[0] and "Traceback" not in result.output
    assert not out.exists()  # an error, never a row


WORKLOAD = textwrap.dedent(
    """
    import json, os
    import torch
    import torch.distributed as dist
    from models.spec import Built

    def build(ctx):
        seen = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
        seen["initialised"] = dist.is_initialized()
        seen["world"] = dist.get_world_size() if dist.is_initialized() else 1
        with open(f"seen-w{seen['world']}-r{dist.get_rank() if dist.is_initialized() else 0}.json", "w") as f:
            json.dump(seen, f)
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.randn(ctx.batch_size, 8)

        def step(model, batch):
            optimizer.zero_grad()
            model(batch).sum().backward()  # under DDP: a gloo all-reduce of the gradients
            optimizer.step()

        return Built(model, optimizer, lambda: data, step, ctx.batch_size)
    """
)


@needs_torch
def test_a_workload_gang_is_formed_before_the_factory_runs(tmp_path, monkeypatch):
    (tmp_path / "gangwl.py").write_text(WORKLOAD)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "t.csv"
    args = [*FAST, "--cpu-workers", "2", "--scale-factors", "1,2", "--batch-sizes", "4", "--no-restart-cost"]
    result = invoke(*args, "--workload", "gangwl:build", "--out", str(out))
    assert result.exit_code == 0, result.output
    rows = {row["scale_factor"]: row for row in read_table(out).rows}
    assert sorted(rows) == [1, 2] and rows[2]["status"] == "ok" and rows[2]["throughput"] > 0
    assert rows[2]["notes"].startswith("workload gangwl:build")
    alone = json.loads((tmp_path / "seen-w1-r0.json").read_text())
    assert alone == {"RANK": None, "LOCAL_RANK": None, "WORLD_SIZE": None, "initialised": False, "world": 1}
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"seen-w2-r{rank}.json").read_text())
        assert seen == {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "initialised": True, "world": 2}


@needs_torch
def test_the_example_lab_job_is_profiled_at_1_2_4_by_both_forms_then_planned_and_exported(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the example is imported and started from the project's folder, as the docs do
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")  # `python` is this one
    table = tmp_path / "lab.csv"
    base = [*FAST, "--cpu-workers", "4", "--scale", "tiny", "--scale-factors", "1,2,4", "--batch-sizes", "8"]
    for form in ("--workload", "--command"):
        what = (
            "lab_lm=examples.lab_job:build"
            if form == "--workload"
            else "lab_lm_script=python examples/lab_job/train.py"
        )
        result = invoke(*base, "--no-restart-cost", form, what, "--out", str(table))
        assert result.exit_code == 0, result.output
    rows = {(r["model"], r["scale_factor"]): r for r in read_table(table).rows}
    assert sorted(rows) == [(m, k) for m in ("lab_lm", "lab_lm_script") for k in (1, 2, 4)]
    assert all(r["status"] == "ok" and r["throughput"] > 0 for r in rows.values())
    runner = CliRunner()
    schedule, launch = tmp_path / "schedule.json", tmp_path / "launch"
    example = REPO / "examples" / "lab_job"
    planned = runner.invoke(
        rota_app,
        ["plan", "--table", str(table), "--jobs", str(example / "jobs.csv"), "--cluster", str(example / "cluster.yaml")]
        + ["--out", str(schedule)],
    )
    assert planned.exit_code == 0, planned.output
    document = json.loads(schedule.read_text())
    gpus = {job: len(a["gpus"]) for r in document["rounds"] for a in r["assignments"] for job in a["jobs"]}
    assert gpus == {"lm-ft-4": 4, "lm-ft-2": 2, "lm-ft-1": 1}
    exported = runner.invoke(rota_app, ["export", "slurm", str(schedule), "--out", str(launch)])
    assert exported.exit_code == 0, exported.output
    scripts = sorted(p.name for p in launch.glob("round-*/*.sbatch"))
    assert "lm-ft-4.sbatch" in scripts
    text = next(launch.glob("round-*/lm-ft-4.sbatch")).read_text()
    assert "torchrun --nproc-per-node 4 examples/lab_job/train.py" in text
