"""`rota profile-jobs slurm|ray`: profiling jobs for the worker types of a multi-host cluster.

Registered by the main app as the `profile-jobs` group. Imports no torch.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from planner.errors import InputError
from planner.export.common import parse_map
from planner.export.profile_jobs import RAY_DRIVER, SUBMIT, TABLE, write_ray_profile_jobs, write_slurm_profile_jobs
from planner.formats.cluster import Cluster, read_cluster
from profiler.cli import profile_command
from profiler.plan import parse_ints, split_list

profile_jobs_app = typer.Typer(
    no_args_is_help=True, help="Write jobs that profile every worker type of a cluster on its own nodes."
)

# `rota profile` options each job sets itself, or that measure nothing.
_SET_BY_JOBS = (
    "out",
    "device_types",
    "resume",
    "dry_run",
    "list_devices",
    "list_models",
    "json_output",
    "across_nodes",
)


def check_profile_args(args: list[str]) -> dict:
    """The options for `rota profile` as its own parser reads them (returned by name): an unknown
    option or a bad value fails now, not on the nodes; options the jobs set themselves are refused."""
    single = typer.Typer()
    single.command()(profile_command)
    command = typer.main.get_command(single)
    try:
        context = command.make_context("rota profile", list(args))
    except Exception as exc:  # click's usage errors (typer vendors click in newer releases: no one class)
        message = getattr(exc, "format_message", None)
        if not callable(message):
            raise
        raise InputError(message(), field="PROFILE_OPTIONS") from None
    given = [p for p in command.params if p.name in _SET_BY_JOBS and _from_command_line(context, p.name)]
    if given:
        raise InputError(f"{given[0].opts[0]} is set by each job itself", field="PROFILE_OPTIONS")
    if context.args:
        raise InputError(f"unexpected argument {context.args[0]!r}", field="PROFILE_OPTIONS")
    return dict(context.params)


def gang_gpus(params: dict) -> int:
    """The largest gang the profile options ask for: a --command job's largest scale factor (only
    commands start ranks on other nodes); 1 without one."""
    if not params.get("command"):
        return 1
    return max(parse_ints(params.get("scale_factors"), "--scale-factors") or (1,))


def _from_command_line(context, name: str) -> bool:
    source = context.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _device_types(text: Optional[str]) -> dict[str, str]:
    return parse_map(split_list(text), "--device-types")


def _inputs(profile_args: Optional[list[str]], rota: str, cluster: Path) -> tuple[list[str], list[str], Cluster, int]:
    """The checked profile options, the words of --rota, the cluster spec and the largest gang."""
    args = list(profile_args or ())
    gang = gang_gpus(check_profile_args(args))
    try:
        words = shlex.split(rota)
    except ValueError as exc:
        raise InputError(f"cannot split {rota!r}: {exc}", field="--rota") from None
    return args, words, read_cluster(cluster), gang


# The options both launchers take, declared once.
ClusterOption = Annotated[
    Path, typer.Option(help="Cluster spec: one job per worker type, on its first node.", show_default=False)
]
ProfileArgs = Annotated[
    Optional[list[str]],
    typer.Argument(
        help="Options for `rota profile` on every node, after '--' (e.g. -- --models LM --scale tiny).",
        metavar="[-- PROFILE_OPTIONS...]",
        show_default=False,
    ),
]


def slurm_command(
    cluster: ClusterOption,
    profile_args: ProfileArgs = None,
    out_dir: Annotated[
        Path, typer.Option("--out-dir", "-o", help="Folder for the scripts, the shards and the merged table.")
    ] = Path("profile-jobs"),
    device_types: Annotated[
        Optional[str],
        typer.Option(
            help="Comma-separated WORKER_TYPE=DEVICE: the device type `rota profile --list-devices` shows on "
            "that worker type's nodes, e.g. 'v100=v100-16gb' (default: the worker type's own name; "
            "'cpu' asks for no GPU).",
            show_default=False,
        ),
    ] = None,
    rota: Annotated[
        str, typer.Option(help="How the nodes run rota, e.g. '/opt/venv/bin/rota' or 'python -m planner.cli'.")
    ] = "rota",
    partition: Annotated[Optional[str], typer.Option(help="Slurm partition.")] = None,
    account: Annotated[Optional[str], typer.Option(help="Slurm account.")] = None,
    sbatch_option: Annotated[
        Optional[list[str]],
        typer.Option(help="Extra #SBATCH option for every job (repeatable), e.g. --sbatch-option=--time=4:00:00."),
    ] = None,
) -> None:
    """Write Slurm batch jobs that profile each worker type on one of its nodes, and merge the tables.

    One batch job per worker type, pinned to one node of that type, runs `rota profile` there
    into OUT_DIR/shards/<worker type>.csv (rows named by the worker type); a merge job that
    Slurm starts once all succeeded writes OUT_DIR/throughputs.csv; OUT_DIR/submit.sh submits
    them (OUT_DIR must be on a file system the nodes share). When a --command job asks for
    scale factors beyond one node's GPUs, its worker type's job holds as many of the type's
    nodes as the largest needs and measures those gangs across them (rota profile --across-nodes).

    Example:

        rota profile-jobs slurm --cluster cluster.yaml --out-dir prof --device-types v100=v100-16gb \\
            -- --scale-factors 1,2 --budget 20
        prof/submit.sh --wait
    """
    args, words, spec, gang = _inputs(profile_args, rota, cluster)
    written = write_slurm_profile_jobs(
        spec,
        out_dir,
        device_types=_device_types(device_types),
        rota=words,
        profile_args=args,
        partition=partition,
        account=account,
        sbatch_options=sbatch_option or (),
        gang_gpus=gang,
    )
    typer.echo(f"wrote {len(written)} file(s) under {out_dir}: {len(spec.names)} profiling job(s) and a merge")
    typer.echo(f"submit them with {out_dir / SUBMIT} (the merged table: {out_dir / TABLE})")


def ray_command(
    cluster: ClusterOption,
    profile_args: ProfileArgs = None,
    out_dir: Annotated[
        Path, typer.Option("--out-dir", "-o", help="Folder for the plan, its driver, the shards and the table.")
    ] = Path("profile-jobs"),
    device_types: Annotated[
        Optional[str],
        typer.Option(
            help="Comma-separated WORKER_TYPE=DEVICE, as for `rota profile-jobs slurm`.",
            show_default=False,
        ),
    ] = None,
    rota: Annotated[
        str, typer.Option(help="How the nodes (and the driver) run rota, e.g. '/opt/venv/bin/rota'.")
    ] = "rota",
    node_resource: Annotated[
        str,
        typer.Option(help="Prefix of the custom resource each Ray node advertises with its name (as rota export ray)."),
    ] = "node:",
) -> None:
    """Write a Ray plan and driver that profile each worker type on one of its nodes, and merge the tables.

    One task per worker type, pinned to one node of that type by its `node:<name>` resource
    and holding all its GPUs, runs `rota profile` there; the driver saves each table in
    OUT_DIR/shards/ (no shared file system needed) and merges them into OUT_DIR/throughputs.csv.
    When a --command job asks for scale factors beyond one node's GPUs, that type's task runs on
    its first node and starts the other nodes' ranks as Ray tasks there (rota profile --across-nodes ray).

    Example:

        rota profile-jobs ray --cluster cluster.yaml --out-dir prof -- --scale-factors 1,2 --budget 20
        python prof/ray_profile.py --address HEAD:6379
    """
    args, words, spec, gang = _inputs(profile_args, rota, cluster)
    written = write_ray_profile_jobs(
        spec,
        out_dir,
        device_types=_device_types(device_types),
        rota=words,
        profile_args=args,
        node_resource=node_resource,
        gang_gpus=gang,
    )
    typer.echo(f"wrote {len(written)} file(s) under {out_dir}: a plan of {len(spec.names)} profiling job(s)")
    typer.echo(f"run them with python {out_dir / RAY_DRIVER} (the merged table: {out_dir / TABLE})")
