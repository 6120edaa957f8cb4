"""`rota export FORMAT SCHEDULE`: launcher files for Slurm, Kubernetes, Ray or a flat CSV."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from planner.cli.common import err
from planner.cli.common import out as stdout
from planner.export import ExportInterrupted, canonical_format, export_schedule, load_context


def export_command(
    format: Annotated[
        str, typer.Argument(help="slurm, kubernetes (k8s), ray or csv.", metavar="FORMAT", show_default=False)
    ],
    schedule: Annotated[
        Path, typer.Argument(help="Schedule JSON (rota.schedule/v1).", metavar="SCHEDULE", show_default=False)
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder to write the launcher files into.", show_default=False)
    ],
    cluster: Annotated[Optional[Path], typer.Option(help="Cluster spec (default: the one the schedule names).")] = None,
    jobs: Annotated[
        Optional[Path], typer.Option(help="Job list with a 'command' column (default: the schedule's).")
    ] = None,
    table: Annotated[
        Optional[Path], typer.Option(help="Throughput table, for the pair checks (default: the schedule's).")
    ] = None,
    default_command: Annotated[Optional[str], typer.Option(help="Command for jobs without one.")] = None,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            help="Seconds between SIGTERM (checkpoint) and the round's end (positive; at most half the round).",
        ),
    ] = 60.0,
    progress_dir: Annotated[
        Optional[str],
        typer.Option(help="Shared folder where each job writes <job_id>.json with its steps (ROTA_PROGRESS_FILE)."),
    ] = None,
    partition: Annotated[Optional[str], typer.Option(help="Slurm: partition.")] = None,
    account: Annotated[Optional[str], typer.Option(help="Slurm: account.")] = None,
    sbatch_option: Annotated[
        Optional[list[str]],
        typer.Option(help="Slurm: extra #SBATCH option (repeatable), e.g. --sbatch-option=--qos=high."),
    ] = None,
    gang: Annotated[str, typer.Option(help="Kubernetes: gang scheduler, volcano or kueue.")] = "volcano",
    queue: Annotated[Optional[str], typer.Option(help="Kubernetes: Volcano queue / Kueue LocalQueue name.")] = None,
    namespace: Annotated[Optional[str], typer.Option(help="Kubernetes: namespace.")] = None,
    image: Annotated[
        str,
        typer.Option(
            help="Kubernetes: container image that holds the job commands (a job list's 'image' column "
            "overrides it per job)."
        ),
    ] = "rota-workload:latest",
    label_key: Annotated[
        str, typer.Option(help="Kubernetes: node label with the GPU product.")
    ] = "nvidia.com/gpu.product",
    gpu_product: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Kubernetes: TYPE=LABEL_VALUE (repeatable), "
            "e.g. v100=Tesla-V100-SXM2-16GB; default: --nodes-json, else the cluster spec's gpu_product, "
            "else a guess (with a warning)."
        ),
    ] = None,
    gpu_resource: Annotated[str, typer.Option(help="Kubernetes: GPU resource name.")] = "nvidia.com/gpu",
    nodes_json: Annotated[
        Optional[Path],
        typer.Option(
            help="Kubernetes: a saved 'kubectl get nodes -o json'; each worker type's GPU-product label value "
            "is read from its nodes (named as in the cluster spec)."
        ),
    ] = None,
    pod_template: Annotated[
        Optional[Path],
        typer.Option(
            help="Kubernetes: YAML with 'pod:' fields (volumes, tolerations, imagePullSecrets, serviceAccountName, "
            "priorityClassName, nodeSelector) and 'container:' fields (env, volumeMounts, resources, "
            "imagePullPolicy, workingDir) added to every pod."
        ),
    ] = None,
    shm: Annotated[
        bool, typer.Option(help="Kubernetes: mount a memory-backed emptyDir at /dev/shm in every pod.")
    ] = True,
    shm_size: Annotated[
        Optional[str], typer.Option(help="Kubernetes: sizeLimit of the /dev/shm volume, e.g. 16Gi.")
    ] = None,
    pin_nodes: Annotated[
        bool,
        typer.Option(
            help="Kubernetes, Ray: pin pods / bundles to the planned nodes (kubernetes.io/hostname, node:NAME)."
        ),
    ] = True,
    topology_label: Annotated[
        str,
        typer.Option(
            help="Kubernetes: node label of the leaf switch, for the topology hints of a gang over several nodes "
            "of one switch (Kueue podset-required-topology; Volcano networkTopology); '' leaves them out."
        ),
    ] = "network.topology.nvidia.com/leaf",
    accelerator_type: Annotated[
        Optional[list[str]], typer.Option(help="Ray: TYPE=ACCELERATOR (repeatable), default: the type upper-cased.")
    ] = None,
    node_resource: Annotated[
        Optional[str],
        typer.Option(help="Ray: prefix of the per-node custom resource that pins bundles (default 'node:')."),
    ] = None,
    placement_timeout: Annotated[
        Optional[float],
        typer.Option(help="Ray: seconds to wait for a round's placement groups before it fails (default 120)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the written files as JSON.")] = False,
):
    """Write launcher files for a schedule: Slurm batch scripts, Kubernetes manifests, a Ray plan, or a CSV.

    Example: rota export slurm schedule.json --out launch/slurm
    """

    fmt = canonical_format(format)
    context = load_context(schedule, cluster=cluster, jobs=jobs, table=table, default_command=default_command)
    options = dict(
        grace_s=grace,
        progress_dir=progress_dir,
        partition=partition,
        account=account,
        sbatch_options=list(sbatch_option or []),
        gang=gang,
        queue=queue,
        namespace=namespace,
        image=image,
        label_key=label_key,
        gpu_product=list(gpu_product or []),
        gpu_resource=gpu_resource,
        nodes_json=nodes_json,
        pod_template=pod_template,
        shm=shm,
        shm_size=shm_size,
        pin_nodes=pin_nodes,
        topology_label=topology_label,
        accelerator_type=list(accelerator_type or []),
        node_resource=node_resource,
        placement_timeout_s=placement_timeout,
    )
    try:
        written = export_schedule(fmt, context, out, **options)
    except ExportInterrupted as stop:  # nothing was moved into --out
        err.print(f"{stop}: nothing written; {out} is as it was", highlight=False, soft_wrap=True)
        raise typer.Exit(128 + stop.signum) from None
    if as_json:
        stdout.print_json(
            json.dumps(
                {
                    "format": fmt,
                    "out": str(out),
                    "files": [str(p) for p in written],
                    "skipped": list(context.skipped),
                    "warnings": list(context.notes),
                }
            )
        )
        return
    rounds = len(context.schedule["rounds"])
    stdout.print(f"wrote {len(written)} file(s) for {fmt} under {out} ({rounds} round(s))")
    for note in context.skipped:
        stdout.print(f"note: skipped {note}")
    for note in context.notes:
        stdout.print(f"warning: {note}")
