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
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from planner.cli import app as rota_app
from planner.errors import InputError
from planner.formats.table import read_table
from profiler.cli import profile_command
from profiler.command import parse_command, rank_environment
from profiler.devices import MAX_CPU_WORKERS, DeviceType, Node, cpu_device
from profiler.plan import Selection, build_plan
from profiler.session import RunOptions, command_job
from profiler.slurm_nodes import allocation_nodes
from profiler.workloads import parse_workload

REPO = Path(__file__).resolve().parents[1]
app = typer.Typer()
app.command("profile")(profile_command)


@app.command("other")
def _other() -> None:  # keeps "profile" a subcommand, as in the real app
    pass


FAST = ["--device-types", "cpu", "--budget", "0.3", "--window-s", "0.05", "--warmup-steps", "2", "--pairs", "none"]
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (gloo)")

GANG_RANK = Path(__file__).with_name("gang_rank.py")  # a torch-free rank that records its variables


def gang_command(tmp_path: Path, fail_rank: int = -1) -> str:
    words = [sys.executable, str(GANG_RANK), str(tmp_path), str(fail_rank)]
    return " ".join(shlex.quote(w) for w in words)


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
        # each step spins 2 ms on every rank: at most 500 steps/s per rank, k ranks summed. The
        # steps are timed when the profiler reads their lines, so a loaded machine that delays the
        # first line of a 50 ms window reads a little fast; counting the ranks twice would be 2x.
        assert 0 < row["throughput"] <= 1.5 * 500 * k and row["samples_per_s"] == pytest.approx(4 * row["throughput"])
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


# --------------------------------------------------------------------------- across nodes (the real Slurm run
# is tests/launchers/test_profile_slurm.py)


def fake_scontrol(calls: list):
    def run(argv, **_):
        calls.append(argv)
        if argv[1:3] == ["show", "hostnames"]:
            return subprocess.CompletedProcess(argv, 0, "gpu-a\ngpu-b\ngpu-c\n", "")
        if argv[1:3] == ["show", "node"]:
            return subprocess.CompletedProcess(
                argv, 0, f"NodeName={argv[-1]} NodeAddr=10.0.0.{argv[-1][-1]} State=IDLE", ""
            )
        return subprocess.CompletedProcess(argv, 1, "", "unexpected")

    return run


def test_the_allocation_s_nodes_start_with_this_one_and_carry_their_addresses():
    calls: list = []
    env = {"SLURM_JOB_NODELIST": "gpu-[a-c]", "SLURMD_NODENAME": "gpu-b"}
    nodes = allocation_nodes(env, fake_scontrol(calls))
    assert nodes == (Node("gpu-b", "10.0.0.b"), Node("gpu-a", "10.0.0.a"), Node("gpu-c", "10.0.0.c"))
    assert calls[0] == ["scontrol", "show", "hostnames", "gpu-[a-c]"]
    with pytest.raises(InputError, match="not inside a Slurm allocation"):
        allocation_nodes({}, fake_scontrol([]))
    with pytest.raises(InputError, match="this node 'elsewhere' is not in the allocation"):
        allocation_nodes({**env, "SLURMD_NODENAME": "elsewhere"}, fake_scontrol([]))
    result = invoke("--device-types", "cpu", "--across-nodes", "slurm", "--dry-run")
    outside = "SLURM_JOB_NODELIST" not in os.environ
    assert not outside or (result.exit_code == 2 and "not inside a Slurm allocation" in result.output), result.output
    result = invoke("--device-types", "cpu", "--across-nodes", "kubernetes", "--dry-run")
    assert result.exit_code == 2 and "must be one of slurm" in result.output, result.output


def test_gangs_beyond_a_node_are_whole_nodes_of_command_jobs_with_ranks_placed_node_by_node(tmp_path):
    two_nodes = (Node("n1", "10.0.0.1"), Node("n2", "10.0.0.2"))
    gpus = DeviceType("h100", "cuda", (0, 1), "NVIDIA H100", nodes=two_nodes)
    assert gpus.count == gpus.max_processes == 4 and gpus.per_node == 2
    assert [gpus.device(r) for r in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert [gpus.node_of(r) for r in range(4)] == [two_nodes[0]] * 2 + [two_nodes[1]] * 2
    command = parse_command(f"gang={gang_command(tmp_path)}", (), (1, 2, 3, 4))
    workload = parse_workload("mine=pkg.mod:build", (), (1, 2, 3, 4))
    tasks = build_plan([gpus], Selection(user=(command, workload), scale_factors=(1, 2, 3, 4), pairs="none"))
    shapes = sorted((t.jobs[0].model, t.scale_factor) for t in tasks)
    # a factory's ranks are this host's processes: one node at most; 3 would split a node
    assert shapes == [("gang", 1), ("gang", 2), ("gang", 4), ("mine", 1), ("mine", 2)]
    four = next(t for t in tasks if t.scale_factor == 4)
    job = command_job(four, RunOptions(out=tmp_path / "t.csv"))
    assert job.nodes == (two_nodes[0],) * 2 + (two_nodes[1],) * 2 and job.is_remote(2) and not job.is_remote(1)
    places = [job.place(r) for r in range(4)]
    assert [(p.local_rank, p.local_world_size, p.group_rank) for p in places] == [
        (0, 2, 0),
        (1, 2, 0),
        (0, 2, 1),
        (1, 2, 1),
    ]
    assert {p.master_addr for p in places} == {"10.0.0.1"}
    env = rank_environment(job, 3)
    assert (env["CUDA_VISIBLE_DEVICES"], env["ROTA_DEVICE"], env["MASTER_ADDR"]) == ("0,1", "cuda:1", "10.0.0.1")
    two = command_job(
        next(t for t in tasks if t.scale_factor == 2 and t.jobs[0].model == "gang"), RunOptions(out=tmp_path / "t.csv")
    )
    assert two.nodes == () and two.place(1).master_addr == "127.0.0.1"  # within one node: as on one host


def test_a_ctrl_c_while_a_rank_starts_stops_every_started_rank(tmp_path, monkeypatch):
    import signal

    from profiler import command as command_module
    from profiler.timing import TimingConfig

    started = []
    real_popen = subprocess.Popen

    def popen_then_ctrl_c(*args, **kwargs):
        process = real_popen(*args, **kwargs)
        started.append(process)
        if len(started) == 2:  # the second rank is up, but not yet in the gang's list
            os.kill(os.getpid(), signal.SIGINT)
        return process

    monkeypatch.setattr(command_module.subprocess, "Popen", popen_then_ctrl_c)
    spec = parse_command(f"gang={gang_command(tmp_path)}", (), (1, 4))
    job = command_module.CommandJob(
        spec, None, ("cpu",) * 4, TimingConfig(), "tiny", ((),) * 4, 60.0, master_port=29999
    )
    with pytest.raises(KeyboardInterrupt):
        command_module.run_command(job)
    assert len(started) == 2  # the Ctrl-C stopped the start of the others
    assert all(p.poll() is not None for p in started)  # and both started ranks were stopped
