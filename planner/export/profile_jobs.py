"""Profiling a multi-host cluster through Slurm: one batch job per worker type of a cluster spec,
pinned to one node of that type, runs `rota profile` there into its own table shard; a last job,
which Slurm starts only once every profiling job has succeeded, merges the shards into one table.

Every file is written under one folder and every path in them is relative to it, so the folder
must be on a file system the nodes share (as for any Slurm job's output). Worker types, node names
and the options passed to `rota profile` are data: names must be plain (NAME_CHARS) and every
word of a command is shell-quoted.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from planner.errors import InputError
from planner.export.common import checked_name, comment_text, file_name, write_files
from planner.export.ray_profile import SHARD_MARK
from planner.formats.cluster import Cluster

SHARDS = "shards"
LOGS = "logs"
TABLE = "throughputs.csv"
SUBMIT = "submit.sh"
MERGE = "merge.sbatch"
CPU = "cpu"  # the local device type of a CPU (rota profile --list-devices)


@dataclass(frozen=True)
class ProfileJob:
    """One worker type's profiling job."""

    worker_type: str  # the cluster's name, recorded in the shard's worker_type column
    node: str  # the node it runs on (the type's first)
    device_type: str  # the device type `rota profile` finds on that node ('cpu', 'v100-16gb', ...)
    gpus: int  # GPUs it asks Slurm for (every GPU of the node; 0 on a CPU)
    nodes: tuple[str, ...] = ()  # a multi-node allocation for gangs beyond one node (the first is `node`)

    @property
    def stem(self) -> str:
        return file_name(self.worker_type)

    @property
    def script(self) -> str:
        return f"profile-{self.stem}.sbatch"

    @property
    def shard(self) -> str:
        return f"{SHARDS}/{self.stem}.csv"


def profile_jobs(cluster: Cluster, device_types: Mapping[str, str], gang_gpus: int = 1) -> list[ProfileJob]:
    """One job per worker type; `device_types` maps a worker type to the device type its nodes
    report (default: the worker type's own name). A job whose largest gang (`gang_gpus`) needs
    more GPUs than one node has holds as many of the type's nodes as it needs (as many as there
    are, at most). Names that are not plain are InputErrors."""
    unknown = [w for w in device_types if w not in cluster.worker_types]
    if unknown:
        raise InputError(
            f"worker type {unknown[0]!r} is not in the cluster spec (it has {', '.join(cluster.names)})",
            path=cluster.path,
            field="--device-types",
        )
    jobs = []
    stems: dict[str, str] = {}
    for name, spec in cluster.worker_types.items():
        checked_name(name, field="worker_types", path=cluster.path)
        node = checked_name(spec.nodes[0], field=f"worker_types.{name}.nodes", path=cluster.path)
        device = checked_name(device_types.get(name, name).lower(), field="--device-types")
        wanted = min(len(spec.nodes), -(-gang_gpus // spec.gpus_per_node))
        nodes = tuple(
            checked_name(n, field=f"worker_types.{name}.nodes", path=cluster.path) for n in spec.nodes[:wanted]
        )
        job = ProfileJob(name, node, device, 0 if device == CPU else spec.gpus_per_node, nodes if wanted > 1 else ())
        clash = stems.setdefault(job.stem.lower(), name)  # one shard per type, also on a case-blind disk
        if clash != name:
            raise InputError(f"worker types {clash!r} and {name!r} would share a shard file", path=cluster.path)
        jobs.append(job)
    return jobs


def _sbatch_option(option: str) -> str:
    if not option.isprintable():
        raise InputError(f"{option!r} holds a line break or another unprintable character", field="--sbatch-option")
    return option if option.startswith("--") else f"--{option}"


def _command(words: Sequence[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def _batch(title: str, options: list[str], command: Sequence[str]) -> str:
    return "\n".join(
        [
            "#!/bin/bash",
            f"# rota profile-jobs: {comment_text(title)}",
            *(f"#SBATCH {option}" for option in options),
            f"exec {_command(command)}",
            "",
        ]
    )


def _common_options(partition: str | None, account: str | None) -> list[str]:
    options = []
    if partition:
        options.append(f"--partition={checked_name(partition, field='--partition')}")
    if account:
        options.append(f"--account={checked_name(account, field='--account')}")
    return options


def profile_script(
    job: ProfileJob, rota: Sequence[str], profile_args: Sequence[str], common: list[str], extra: list[str]
) -> str:
    nodes = job.nodes or (job.node,)
    options = [
        f"--job-name=rota-profile-{job.stem}",
        f"--nodes={len(nodes)}",
        f"--nodelist={','.join(nodes)}",
        "--ntasks-per-node=1" if job.nodes else "--ntasks=1",
        "--exclusive",  # the whole node: nothing else may share its devices while they are timed
        *([f"--gres=gpu:{job.gpus}"] if job.gpus else []),
        *common,
        f"--output={LOGS}/%x-%j.out",
        *extra,
    ]
    command = [
        *rota,
        "profile",
        "--device-types",
        f"{job.worker_type}={job.device_type}",
        "--out",
        job.shard,
        "--resume",  # a resubmitted job measures only what is missing
        *(["--across-nodes", "slurm"] if job.nodes else []),  # gangs of several of these nodes too
        *profile_args,
    ]
    where = f"nodes {','.join(job.nodes)}" if job.nodes else f"node {job.node}"
    title = f"profile worker type {job.worker_type} (device {job.device_type}) on {where}"
    return _batch(title, options, command)


def merge_script(jobs: Sequence[ProfileJob], rota: Sequence[str], common: list[str], extra: list[str]) -> str:
    options = ["--job-name=rota-profile-merge", "--ntasks=1", *common, f"--output={LOGS}/%x-%j.out", *extra]
    command = [*rota, "table", "merge", "--strict", "--out", TABLE, *(j.shard for j in jobs)]
    return _batch(f"merge {len(jobs)} shard(s) into {TABLE}", options, command)


def submit_script(jobs: Sequence[ProfileJob]) -> str:
    """POSIX sh: sbatch every profiling job, then the merge job depending on all of them."""
    lines = [
        "#!/bin/sh",
        "# rota profile-jobs: submit one profiling job per worker type, then the job that merges their shards",
        f"# into {TABLE} once all of them have succeeded (a failed one cancels it).",
        f"# Usage: ./{SUBMIT} [--wait]   --wait: return once the merge job has ended",
        "# Exit status: 0 submitted (with --wait: merged), 1 with --wait: the merge did not complete (a profiling",
        f"# job failed and Slurm cancelled it, or the merge failed; see {LOGS}/), 2 sbatch refused a job (the jobs",
        "# already submitted are then cancelled).",
        "set -eu",
        'cd "$(dirname "$0")"',
        f"mkdir -p {LOGS} {SHARDS}",
        'ids=""',
        "refused() {",
        '  echo "submit.sh: sbatch refused $1" >&2',
        '  if [ -n "$ids" ]; then scancel $(echo "$ids" | tr : " ") || true; fi',
        "  exit 2",
        "}",
    ]
    for job in jobs:
        script = shlex.quote(job.script)
        where = f"nodes {','.join(job.nodes)}" if job.nodes else f"node {job.node}"
        said = shlex.quote(f"{job.script}: worker type {job.worker_type} on {where}, job ")
        lines += [
            f"id=$(sbatch --parsable {script}) || refused {script}",
            'id=${id%%;*}  # "id;cluster" on a federation',
            'ids="$ids:$id"',
            f'echo {said}"$id"',
        ]
    merge = shlex.quote(MERGE)
    after = f'--dependency="afterok$ids" --kill-on-invalid-dep=yes {merge}'
    said = shlex.quote(f"{MERGE} ({TABLE}, after every profiling job): job ")
    lines += [
        'if [ "${1:-}" != "--wait" ]; then',
        f"  printf '%s' {said}",
        f"  exec sbatch --parsable {after}",
        "fi",
        f"echo {shlex.quote(f'{MERGE}: submitted; waiting for the profiling jobs and the merge')}",
        # sbatch --wait says 0 for a job Slurm cancelled unrun (a profiling job failed): ask Slurm
        "status=0",
        f"merge=$(sbatch --parsable --wait {after}) || status=$?",
        '[ -n "$merge" ] || refused merge.sbatch',
        "merge=${merge%%;*}",
        "state=$(scontrol show job \"$merge\" 2>/dev/null | tr ' ' '\\n' | sed -n 's/^JobState=//p')",
        'if [ "${state:-COMPLETED}" != COMPLETED ] || [ "$status" -ne 0 ]; then',
        f'  echo "submit.sh: the merge job $merge ended ${{state:-with status $status}}; see {LOGS}/" >&2',
        "  exit 1",
        "fi",
        f'echo "job $merge merged the shards into {TABLE}"',
        "",
    ]
    return "\n".join(lines)


def write_slurm_profile_jobs(
    cluster: Cluster,
    out_dir: Path,
    *,
    device_types: Mapping[str, str] | None = None,
    rota: Sequence[str] = ("rota",),
    profile_args: Sequence[str] = (),
    partition: str | None = None,
    account: str | None = None,
    sbatch_options: Sequence[str] = (),
    gang_gpus: int = 1,
) -> list[Path]:
    """Write the batch scripts and submit.sh under `out_dir`; return their paths. `gang_gpus`: the
    largest gang to measure (a --command job's largest scale factor)."""
    if not rota:
        raise InputError("is empty", field="--rota")
    jobs = profile_jobs(cluster, device_types or {}, gang_gpus)
    common = _common_options(partition, account)
    extra = [_sbatch_option(o) for o in sbatch_options]
    files = {job.script: profile_script(job, rota, profile_args, common, extra) for job in jobs}
    files[MERGE] = merge_script(jobs, rota, common, extra)
    files[SUBMIT] = submit_script(jobs)
    return write_files(out_dir, files, executable=[SUBMIT])


# --------------------------------------------------------------------------- Ray

RAY_PLAN = "ray_profile_jobs.json"
RAY_DRIVER = "ray_profile.py"
RAY_PLAN_FORMAT = "rota.ray-profile-jobs/v1"


def ray_plan(jobs: Sequence[ProfileJob], rota: Sequence[str], profile_args: Sequence[str], node_resource: str) -> dict:
    """The driver's plan: per job its command (argv; the shard is a temporary file on the node)."""
    return {
        "format": RAY_PLAN_FORMAT,
        "jobs": [
            {
                "worker_type": job.worker_type,
                "node": job.node,
                "node_resource": f"{node_resource}{job.node}",
                "nodes": list(job.nodes),  # a gang across several nodes: the first is `node`
                "device_type": job.device_type,
                "gpus": job.gpus,
                "shard": job.shard,
                "log": f"{LOGS}/{job.stem}.log",
                "command": [
                    *rota,
                    "profile",
                    "--device-types",
                    f"{job.worker_type}={job.device_type}",
                    "--out",
                    SHARD_MARK,
                    "--resume",
                    *(["--across-nodes", "ray"] if job.nodes else []),
                    *profile_args,
                ],
            }
            for job in jobs
        ],
        "node_resource_prefix": node_resource,
        "merge": [*rota, "table", "merge", "--strict", "--out", TABLE, *(j.shard for j in jobs)],
    }


def write_ray_profile_jobs(
    cluster: Cluster,
    out_dir: Path,
    *,
    device_types: Mapping[str, str] | None = None,
    rota: Sequence[str] = ("rota",),
    profile_args: Sequence[str] = (),
    node_resource: str = "node:",
    gang_gpus: int = 1,
) -> list[Path]:
    """Write the plan and its driver (ray_profile.py) under `out_dir`; return their paths. `gang_gpus`:
    as for write_slurm_profile_jobs."""
    if not rota:
        raise InputError("is empty", field="--rota")
    if not node_resource.isprintable():
        raise InputError(f"{node_resource!r} holds an unprintable character", field="--node-resource")
    jobs = profile_jobs(cluster, device_types or {}, gang_gpus)
    files = {
        RAY_PLAN: json.dumps(ray_plan(jobs, rota, profile_args, node_resource), indent=1) + "\n",
        RAY_DRIVER: (Path(__file__).parent / RAY_DRIVER).read_text(encoding="utf-8"),
    }
    return write_files(out_dir, files, executable=[RAY_DRIVER])
