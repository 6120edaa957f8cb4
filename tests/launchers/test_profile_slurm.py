"""`rota profile-jobs slurm` on a real single-host Slurm (tests/launchers/slurm_cluster.py): each
worker type is profiled by its own job on its own node into its shard, and the merge job, which
Slurm starts after both, writes one table holding both worker types with their provenance."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from typer.testing import CliRunner

from planner.cli import app
from planner.formats.table import read_table

# The cheapest real measurement: LM at tiny scale, one batch size, alone, half a second.
PROFILE_OPTIONS = [
    "--models",
    "LM",
    "--batch-sizes",
    "5",
    "--pairs",
    "none",
    "--scale-factors",
    "1",
    "--scale",
    "tiny",
    "--budget",
    "0.5",
    "--no-restart-cost",
]


def _logs(folder: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(folder.glob("logs/*")))


def write_profile_jobs(tmp_path, cluster: str, device_types: str, *options: str, profile=PROFILE_OPTIONS):
    """`rota profile-jobs slurm` for this cluster spec into tmp_path/prof; returns that folder."""
    (tmp_path / "cluster.yaml").write_text(cluster)
    out = tmp_path / "prof"
    args = ["profile-jobs", "slurm", "--cluster", str(tmp_path / "cluster.yaml"), "--out-dir", str(out)]
    args += ["--device-types", device_types, "--rota", f"{sys.executable} -m planner.cli", *options]
    result = CliRunner().invoke(app, [*args, "--", *profile])
    assert result.exit_code == 0, result.output
    return out


def test_each_worker_type_is_profiled_on_its_node_and_the_shards_are_merged(slurm, tmp_path):
    a100, v100 = (slurm.cluster.worker_types[w].nodes[0] for w in ("a100", "v100"))
    # 'cpu' keeps the device's own name; 'v100' is this host's CPU recorded as the cluster's v100
    cluster = f"worker_types:\n  cpu: {{gpus: 1, nodes: [{a100}]}}\n  v100: {{gpus: 1, nodes: [{v100}]}}\n"
    out = write_profile_jobs(tmp_path, cluster, "v100=cpu", "--partition", "main")

    env = {**slurm.env(), "PYTHONPATH": str(ROOT)}  # sbatch hands the jobs this environment
    done = subprocess.run(
        ["sh", str(out / "submit.sh"), "--wait"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{_logs(out)}"

    # each profiling job ran on the node of its worker type (Slurm keeps finished jobs a while)
    jobs = dict(re.findall(r"worker type (\S+) on node \S+, job (\d+)", done.stdout))
    assert set(jobs) == {"cpu", "v100"}, done.stdout
    for worker_type, node in (("cpu", a100), ("v100", v100)):
        shown = subprocess.run(
            ["scontrol", "show", "job", jobs[worker_type]], env=env, capture_output=True, text=True
        ).stdout
        assert re.search(rf"\bNodeList={re.escape(node)}\b", shown), shown
        assert "JobState=COMPLETED" in shown, shown
        shard = read_table(out / "shards" / f"{worker_type}.csv")
        assert shard.worker_types == [worker_type]

    table = read_table(out / "throughputs.csv")
    assert table.worker_types == ["cpu", "v100"]
    assert len(table) == 2
    for row in table.rows:
        assert (row["model"], row["batch_size"], row["status"], row["source"]) == ("LM", 5, "ok", "measured")
        assert row["throughput"] > 0 and row["n_steps"]
        assert row["host"] and row["torch_version"] and row["measured_at"]
        assert row["device_name"] and row["device_name"].endswith("[tiny scale]")


def test_a_failed_profiling_job_cancels_the_merge(slurm, tmp_path):
    node = slurm.cluster.worker_types["t4"].nodes[0]
    # t4=no-such-gpu: the job fails at once, no such device on the node
    out = write_profile_jobs(tmp_path, f"worker_types:\n  t4: {{gpus: 1, nodes: [{node}]}}\n", "t4=no-such-gpu")
    env = {**slurm.env(), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["sh", str(out / "submit.sh"), "--wait"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stdout
    assert "ended CANCELLED" in done.stderr, done.stderr  # Slurm cancelled the merge: its dependency failed
    assert "no device of type no-such-gpu" in _logs(out)
    assert not (out / "throughputs.csv").exists()


GANG_RANK = ROOT / "tests" / "gang_rank.py"  # a torch-free rank that records its variables and node


def test_a_command_gang_beyond_one_node_runs_across_the_type_s_nodes(slurm, tmp_path):
    n1, n2 = slurm.cluster.worker_types["t4"].nodes[:2]
    # two 2-GPU nodes; this host's CPU, cut into 2 workers, stands in for each node's GPUs
    cluster = f"worker_types:\n  t4: {{gpus: 4, gpus_per_node: 2, nodes: [{n1}, {n2}]}}\n"
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    command = f"gang={shlex.join([sys.executable, str(GANG_RANK), str(ranks), '-1'])}"
    profile = ["--command", command, "--scale-factors", "1,2,4", "--cpu-workers", "2", "--pairs", "none"]
    profile += ["--budget", "0.5", "--window-s", "0.05", "--warmup-steps", "2"]
    out = write_profile_jobs(tmp_path, cluster, "t4=cpu", "--partition", "main", profile=profile)
    script = (out / "profile-t4.sbatch").read_text()
    assert f"#SBATCH --nodes=2\n#SBATCH --nodelist={n1},{n2}\n#SBATCH --ntasks-per-node=1" in script
    assert "--across-nodes slurm" in script

    env = {**slurm.env(), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["sh", str(out / "submit.sh"), "--wait"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{_logs(out)}"
    assert f"worker type t4 on nodes {n1},{n2}, job" in done.stdout

    rows = {row["scale_factor"]: row for row in read_table(out / "throughputs.csv").rows}
    assert sorted(rows) == [1, 2, 4] and {r["status"] for r in rows.values()} == {"ok"}
    assert all(r["model"] == "gang" and r["worker_type"] == "t4" and r["throughput"] > 0 for r in rows.values())
    # the 2-rank gang fits the first node; the 4-rank one puts ranks 2 and 3 on the second, through srun
    two = [json.loads((ranks / f"w2-rank{r}.json").read_text()) for r in range(2)]
    assert {e["SLURMD_NODENAME"] for e in two} == {n1} and {e["MASTER_ADDR"] for e in two} == {"127.0.0.1"}
    four = [json.loads((ranks / f"w4-rank{r}.json").read_text()) for r in range(4)]
    assert [e["SLURMD_NODENAME"] for e in four] == [n1, n1, n2, n2]
    assert [(e["RANK"], e["LOCAL_RANK"], e["GROUP_RANK"]) for e in four] == [
        ("0", "0", "0"),
        ("1", "1", "0"),
        ("2", "0", "1"),
        ("3", "1", "1"),
    ]
    assert {(e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["ROTA_DIST_BACKEND"]) for e in four} == {("4", "2", "gloo")}
    assert len({e["MASTER_PORT"] for e in four}) == 1
    assert {e["MASTER_ADDR"] for e in four} == {"127.0.0.1"}  # the first node's NodeAddr in this test Slurm
