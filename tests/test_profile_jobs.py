"""`rota profile-jobs slurm`: the batch scripts, submit.sh (run against stand-in sbatch/scancel
programs), hostile names, and the pieces it relies on: `rota profile --device-types NAME=DEVICE`
and `rota table merge --strict`. The run on a real Slurm is tests/launchers/test_profile_slurm.py."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.export.profile_jobs import write_ray_profile_jobs, write_slurm_profile_jobs
from planner.export.ray_profile import unplaceable
from planner.formats.cluster import cluster_from_dict
from planner.formats.table import JobType, read_table

runner = CliRunner()

SPEC = {
    "worker_types": {
        "v100": {"gpus": 8, "gpus_per_node": 4, "nodes": ["v100-a", "v100-b"]},
        "cpu": {"gpus": 2, "nodes": ["login-1"]},
    }
}
# A fake rota: writes its arguments as JSON to ARGV_FILE (what a shell really passed it).
FAKE_ROTA = "import json, os, sys; open(os.environ['ARGV_FILE'], 'w').write(json.dumps(sys.argv[1:]))"


def _write(tmp_path: Path, spec=SPEC, **options) -> Path:
    out = tmp_path / "prof"
    write_slurm_profile_jobs(cluster_from_dict(spec, path="c.yaml"), out, **options)
    return out


def _sbatch_lines(script: Path) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.read_text().splitlines() if line.startswith("#SBATCH ")]


def _run_script(script: Path, tmp_path: Path) -> list[str]:
    """Run a batch script with bash outside Slurm (#SBATCH lines are comments); the argv rota got."""
    argv_file = tmp_path / "argv.json"
    done = subprocess.run(
        ["bash", script.name], cwd=script.parent, env={**os.environ, "ARGV_FILE": str(argv_file)}, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(argv_file.read_text())


def test_one_job_per_worker_type_pinned_to_its_first_node(tmp_path):
    out = _write(tmp_path, device_types={"v100": "v100-16gb"}, partition="gpu", sbatch_options=["time=2:00:00"])
    names = sorted(p.name for p in out.iterdir())
    assert names == ["merge.sbatch", "profile-cpu.sbatch", "profile-v100.sbatch", "submit.sh"]
    v100 = _sbatch_lines(out / "profile-v100.sbatch")
    assert "--nodelist=v100-a" in v100 and "--nodes=1" in v100 and "--gres=gpu:4" in v100
    assert "--partition=gpu" in v100 and "--time=2:00:00" in v100 and "--exclusive" in v100
    cpu = _sbatch_lines(out / "profile-cpu.sbatch")
    assert "--nodelist=login-1" in cpu and not any(line.startswith("--gres") for line in cpu)
    assert os.access(out / "submit.sh", os.X_OK)


def test_the_scripts_run_rota_with_exactly_the_given_words(tmp_path):
    hostile = ["--command", "x=python t.py; rm -rf / $(reboot) `id` 'q'", "--models", "LM"]
    out = _write(
        tmp_path, device_types={"v100": "v100-16gb"}, rota=[sys.executable, "-c", FAKE_ROTA], profile_args=hostile
    )
    assert _run_script(out / "profile-v100.sbatch", tmp_path) == [
        "profile",
        "--device-types",
        "v100=v100-16gb",
        "--out",
        "shards/v100.csv",
        "--resume",
        *hostile,
    ]
    assert _run_script(out / "profile-cpu.sbatch", tmp_path)[:5] == [
        "profile",
        "--device-types",
        "cpu=cpu",
        "--out",
        "shards/cpu.csv",
    ]
    assert _run_script(out / "merge.sbatch", tmp_path) == [
        "table",
        "merge",
        "--strict",
        "--out",
        "throughputs.csv",
        "shards/v100.csv",
        "shards/cpu.csv",
    ]


@pytest.mark.parametrize(
    "spec,field",
    [
        ({"worker_types": {"v100": {"gpus": 1, "nodes": ["a;rm -rf /"]}}}, "worker_types.v100.nodes"),
        ({"worker_types": {"v100": {"gpus": 1, "nodes": ["$(reboot)"]}}}, "worker_types.v100.nodes"),
        ({"worker_types": {"v100": {"gpus": 1, "nodes": ["-x"]}}}, "worker_types.v100.nodes"),
        ({"worker_types": {"../../etc/x": {"gpus": 1, "nodes": ["n1"]}}}, "worker_types"),
        ({"worker_types": {"a b": {"gpus": 1, "nodes": ["n1"]}}}, "worker_types"),
        ({"worker_types": {"v100=x,cpu": {"gpus": 1, "nodes": ["n1"]}}}, "worker_types"),
    ],
)
def test_hostile_names_are_refused_before_anything_is_written(tmp_path, spec, field):
    with pytest.raises(InputError) as error:
        _write(tmp_path, spec=spec)
    assert f"field '{field}'" in str(error.value) and "not a valid name" in str(error.value)
    assert not (tmp_path / "prof").exists()


def test_hostile_device_types_and_options_are_refused(tmp_path):
    with pytest.raises(InputError, match="--device-types.*not a valid name"):
        _write(tmp_path, device_types={"v100": "x;reboot"})
    with pytest.raises(InputError, match="'k80' is not in the cluster spec"):
        _write(tmp_path, device_types={"k80": "k80"})
    with pytest.raises(InputError, match="--partition"):
        _write(tmp_path, partition="main\n#SBATCH --uid=0")
    with pytest.raises(InputError, match="--sbatch-option"):
        _write(tmp_path, sbatch_options=["time=1\nreboot"])


def test_files_stay_in_their_folder_whatever_the_name(tmp_path):
    long = "w" + "x" * 200  # a valid name too long for a plain file name gets a short hashed one
    out = _write(tmp_path, spec={"worker_types": {long: {"gpus": 1, "nodes": ["n1"]}}})
    written = list(out.iterdir())
    assert all(p.parent == out for p in written) and len(written) == 3
    (script,) = out.glob("profile-*.sbatch")
    argv = shlex.split(script.read_text().splitlines()[-1])
    shard = Path(argv[argv.index("--out") + 1])
    assert shard.parent == Path("shards") and len(shard.name) < 140
    assert argv[argv.index("--device-types") + 1] == f"{long}={long}"  # the rows keep the full name


def test_worker_types_sharing_a_shard_on_a_case_blind_disk_are_refused(tmp_path):
    spec = {"worker_types": {"V100": {"gpus": 1, "nodes": ["a"]}, "v100": {"gpus": 1, "nodes": ["b"]}}}
    with pytest.raises(InputError, match="share a shard"):
        _write(tmp_path, spec=spec)


# --------------------------------------------------------------------------- submit.sh

FAKE_SBATCH = """#!/bin/sh
# stand-in for sbatch: logs its arguments, prints the next job id as --parsable does
echo "$*" >> "$LOG"
n=$(($(wc -l < "$LOG")))
if [ "$n" = "${REFUSE_AT:-0}" ]; then echo "sbatch: error: refused" >&2; exit 1; fi
echo "$((100 + n));cluster1"
"""
FAKE_SCANCEL = """#!/bin/sh
echo "scancel $*" >> "$LOG"
"""
FAKE_SCONTROL = """#!/bin/sh
echo "JobId=$3 JobName=merge.sbatch"
echo "   JobState=$MERGE_STATE Reason=None Dependency=(null)"
"""


def _submit(
    out: Path, tmp_path: Path, *args: str, refuse_at: int = 0, merge_state: str = "COMPLETED"
) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("sbatch", FAKE_SBATCH), ("scancel", FAKE_SCANCEL), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log), "REFUSE_AT": str(refuse_at)}
    env["MERGE_STATE"] = merge_state
    done = subprocess.run(["sh", str(out / "submit.sh"), *args], cwd=tmp_path, env=env, capture_output=True, text=True)
    return done, log.read_text().splitlines()


def test_submit_sends_every_job_then_the_merge_after_all_of_them(tmp_path):
    out = _write(tmp_path)
    done, calls = _submit(out, tmp_path)
    assert done.returncode == 0, done.stderr
    assert calls == [
        "--parsable profile-v100.sbatch",
        "--parsable profile-cpu.sbatch",
        "--parsable --dependency=afterok:101:102 --kill-on-invalid-dep=yes merge.sbatch",
    ]
    assert "job 101" in done.stdout and "job 102" in done.stdout
    assert (out / "logs").is_dir() and (out / "shards").is_dir()  # sbatch does not create --output folders
    done, calls = _submit(out, tmp_path, "--wait")
    assert calls[-1] == "--parsable --wait --dependency=afterok:101:102 --kill-on-invalid-dep=yes merge.sbatch"
    assert done.returncode == 0 and "job 103 merged the shards into throughputs.csv" in done.stdout


def test_submit_wait_fails_when_slurm_cancelled_the_merge(tmp_path):
    # sbatch --wait exits 0 for a job cancelled before it ran (its dependency failed): the state decides
    done, _ = _submit(_write(tmp_path), tmp_path, "--wait", merge_state="CANCELLED")
    assert done.returncode == 1 and "the merge job 103 ended CANCELLED; see logs/" in done.stderr


def test_a_refused_submission_cancels_the_jobs_already_submitted(tmp_path):
    out = _write(tmp_path)
    done, calls = _submit(out, tmp_path, refuse_at=2)
    assert done.returncode == 2 and "refused profile-cpu.sbatch" in done.stderr
    assert calls == ["--parsable profile-v100.sbatch", "--parsable profile-cpu.sbatch", "scancel 101"]


# --------------------------------------------------------------------------- the command


def _cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(SPEC))
    return path


def test_command_writes_the_files_and_checks_the_profile_options(tmp_path):
    cluster = _cluster_file(tmp_path)
    base = ["profile-jobs", "slurm", "--cluster", str(cluster), "--out-dir", str(tmp_path / "o")]
    result = runner.invoke(app, [*base, "--device-types", "v100=v100-16gb", "--", "--models", "LM", "--budget", "5"])
    assert result.exit_code == 0, result.output
    assert "wrote 4 file(s)" in result.output
    assert (
        "--device-types v100=v100-16gb --out shards/v100.csv --resume --models LM --budget 5"
        in (tmp_path / "o" / "profile-v100.sbatch").read_text()
    )
    for extra, needle in (
        (["--", "--out", "x.csv"], "--out is set by each job itself"),
        (["--", "--device-types", "cpu"], "--device-types is set by each job itself"),
        (["--", "--bogus"], "No such option: --bogus"),
        (["--", "--budget", "soon"], "Invalid value for '--budget'"),
        (["--device-types", "v100"], "expected WORKER_TYPE=VALUE"),
        (["--rota", "python 'unclosed"], "--rota"),
    ):
        result = runner.invoke(app, [*base, *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert needle in result.output and "Traceback" not in result.output, (extra, result.output)


def test_command_help_has_an_example():
    result = runner.invoke(app, ["profile-jobs", "slurm", "--help"])
    assert result.exit_code == 0 and "Example" in result.output and "rota profile-jobs slurm --cluster" in result.output


# --------------------------------------------------------------------------- what the jobs run


def test_profile_records_a_device_under_the_name_given():
    result = runner.invoke(app, ["profile", "--dry-run", "--json", "--device-types", "v100=cpu", "--models", "A3C"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert {m["worker_type"] for m in plan["measurements"]} == {"v100"}
    for bad in ("v100=", "=cpu", "v100=cpu,v100=tpu"):
        result = runner.invoke(app, ["profile", "--dry-run", "--device-types", bad])
        assert result.exit_code == 2 and "--device-types" in result.output, (bad, result.output)


HEADER = "worker_type,model,batch_size,scale_factor,partner_model,partner_batch_size,throughput,status"


def test_strict_merge_names_both_files_of_a_conflict(tmp_path):
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    a.write_text(f"{HEADER}\nv100,LM,20,1,,,3,ok\nv100,A3C,,1,,,2,ok\n")
    b.write_text(f"{HEADER}\ncpu,LM,20,1,,,1,ok\nv100,A3C,,1,,,2.5,ok\n")
    c.write_text(f"{HEADER}\nv100,LM,20,1,,,3,ok\n")  # the same row as a's: no conflict
    merged = tmp_path / "m.csv"
    result = runner.invoke(app, ["table", "merge", str(a), str(c), "--strict", "--out", str(merged)])
    assert result.exit_code == 0, result.output
    assert len(read_table(merged)) == 2
    result = runner.invoke(app, ["table", "merge", str(a), str(b), "--strict", "--out", str(merged)])
    assert result.exit_code == 2
    line = " ".join(result.output.split())
    assert f"{b}: row 2: field 'worker_type': conflicts with {a} row 2" in line and "A3C x1 on v100" in line
    assert len(read_table(merged)) == 2  # the earlier output is untouched
    result = runner.invoke(app, ["table", "merge", str(a), str(b), "--out", str(merged)])
    assert result.exit_code == 0 and read_table(merged).solo("v100", JobType("A3C", None)) == 2.5


# --------------------------------------------------------------------------- Ray


def test_ray_plan_pins_each_job_to_its_node_with_every_gpu(tmp_path):
    out = tmp_path / "prof"
    written = write_ray_profile_jobs(
        cluster_from_dict(SPEC, path="c.yaml"),
        out,
        device_types={"v100": "v100-16gb"},
        rota=["/opt/rota/bin/rota"],
        profile_args=["--command", "x=python t.py; rm -rf /"],
        node_resource="host:",
    )
    assert sorted(p.name for p in written) == ["ray_profile.py", "ray_profile_jobs.json"]
    assert all(p.parent == out for p in written)
    plan = json.loads((out / "ray_profile_jobs.json").read_text())
    v100, cpu = plan["jobs"]
    assert (v100["node_resource"], v100["gpus"], v100["shard"]) == ("host:v100-a", 4, "shards/v100.csv")
    assert (cpu["node_resource"], cpu["gpus"]) == ("host:login-1", 0)
    assert v100["command"] == [
        "/opt/rota/bin/rota",
        "profile",
        "--device-types",
        "v100=v100-16gb",
        "--out",
        "{shard}",
        "--resume",
        "--command",
        "x=python t.py; rm -rf /",  # an argv word: the driver runs it without a shell
    ]
    assert plan["merge"][-2:] == ["shards/v100.csv", "shards/cpu.csv"]


def test_ray_driver_finds_jobs_no_node_can_take():
    jobs = [
        {"worker_type": "v100", "node": "v100-a", "node_resource": "node:v100-a", "gpus": 4},
        {"worker_type": "cpu", "node": "login-1", "node_resource": "node:login-1", "gpus": 0},
        {"worker_type": "k80", "node": "k80-0", "node_resource": "node:k80-0", "gpus": 2},
    ]
    nodes = [
        {"Alive": True, "Resources": {"node:v100-a": 1.0, "GPU": 2.0}},
        {"Alive": True, "Resources": {"node:login-1": 1.0}},
        {"Alive": False, "Resources": {"node:k80-0": 1.0, "GPU": 2.0}},
    ]
    assert unplaceable(jobs, nodes) == [
        "v100: node v100-a has fewer than 4 GPUs",
        "k80: no Ray node has the resource node:k80-0",
    ]


def test_ray_command_writes_the_plan(tmp_path):
    cluster = str(_cluster_file(tmp_path))
    result = runner.invoke(
        app, ["profile-jobs", "ray", "--cluster", cluster, "-o", str(tmp_path / "r"), "--", "--pairs", "none"]
    )
    assert result.exit_code == 0, result.output
    assert "wrote 2 file(s)" in result.output and (tmp_path / "r" / "ray_profile.py").exists()
    result = runner.invoke(app, ["profile-jobs", "ray", "--cluster", str(_cluster_file(tmp_path)), "--", "--resume"])
    assert result.exit_code == 2 and "--resume is set by each job itself" in result.output
