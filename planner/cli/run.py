"""`rota run LAUNCHER`: keep a cluster busy round after round until every job finished or failed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from planner.cli.common import err, one_line, state_input
from planner.cli.jobs import MAX_SCALE_OPTION, SCALE_EFFICIENCY_OPTION
from planner.cli.plan import MIGRATION_AWARE_KEPT_OPTION, RESTART_COST_KEPT_OPTION
from planner.cli.round_length import AUTO, parse_round_length
from planner.errors import InputError
from planner.estimate.scaling import DEFAULT_MAX_FACTOR, ScaleOptions
from planner.formats.state import StateDocument
from planner.launch import launcher_name, make_launcher
from planner.launch.events import EventLog
from planner.launch.failures import DEFAULT_MAX_FAILURES
from planner.launch.loop import RunConfig, RunLoop, StopRequest
from planner.launch.view import RunView
from planner.modes.state import read_state


def run_command(
    launcher: Annotated[str, typer.Argument(help="slurm, ray or k8s.", metavar="LAUNCHER", show_default=False)],
    state: Annotated[
        Path,
        typer.Option(
            "--state", "-s", help="Planner state: created on the first run, continued by the next.", show_default=False
        ),
    ],
    jobs: Annotated[
        Optional[Path],
        typer.Option(
            "--jobs", "-j", help="Job list with a 'command' column (first run; later, new jobs in it are added)."
        ),
    ] = None,
    table: Annotated[
        Optional[Path], typer.Option("--table", "-t", help="Throughput table (default: the state's).")
    ] = None,
    cluster: Annotated[
        Optional[Path], typer.Option("--cluster", "-c", help="Cluster spec (default: the state's).")
    ] = None,
    policy: Annotated[
        Optional[str], typer.Option("--policy", "-p", help="Policy (default: the state's, else max_min_fairness_perf).")
    ] = None,
    round_length_text: Annotated[
        Optional[str],
        typer.Option(
            "--round-length",
            metavar="SECONDS|auto",
            help="Round length in seconds (default: the state's, else 360), or 'auto': chosen at the run's first "
            "round from the jobs left and their restart costs, then kept in the state (docs/restarts.md).",
        ),
    ] = None,
    work_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--work-dir",
            help="Round files, launcher files, per-job logs, reports and events.jsonl (default: <state>.run/).",
        ),
    ] = None,
    progress_dir: Annotated[
        Optional[Path],
        typer.Option(
            help="Folder (shared with the nodes) where each job writes its progress report "
            "(default: <work-dir>/progress)."
        ),
    ] = None,
    events: Annotated[
        Optional[Path], typer.Option(help="Append-only JSONL event log (default: <work-dir>/events.jsonl).")
    ] = None,
    max_failures: Annotated[
        int,
        typer.Option(min=1, help="Failed rounds in a row after which a job is marked failed and no longer planned."),
    ] = DEFAULT_MAX_FAILURES,
    retry: Annotated[
        Optional[list[str]], typer.Option(help="Plan a failed job again (repeatable).", show_default=False)
    ] = None,
    grace: Annotated[
        float, typer.Option(help="Seconds between SIGTERM (checkpoint) and the round's end (at most half the round).")
    ] = 60.0,
    default_command: Annotated[Optional[str], typer.Option(help="Command for jobs without one.")] = None,
    partition: Annotated[Optional[str], typer.Option(help="Slurm: partition.")] = None,
    account: Annotated[Optional[str], typer.Option(help="Slurm: account.")] = None,
    sbatch_option: Annotated[
        Optional[list[str]], typer.Option(help="Slurm: extra #SBATCH option (repeatable).")
    ] = None,
    address: Annotated[str, typer.Option(help="Ray: cluster address.")] = "auto",
    placement_timeout: Annotated[
        Optional[float], typer.Option(help="Ray: seconds a placement group may take to be placed.")
    ] = None,
    accelerator_type: Annotated[Optional[list[str]], typer.Option(help="Ray: TYPE=ACCELERATOR (repeatable).")] = None,
    node_resource: Annotated[
        Optional[str], typer.Option(help="Ray: prefix of the per-node resource (default 'node:').")
    ] = None,
    namespace: Annotated[Optional[str], typer.Option(help="Kubernetes: namespace.")] = None,
    image: Annotated[
        str, typer.Option(help="Kubernetes: image for jobs without an 'image' column.")
    ] = "rota-workload:latest",
    gang: Annotated[str, typer.Option(help="Kubernetes: gang scheduler, volcano or kueue.")] = "volcano",
    queue: Annotated[Optional[str], typer.Option(help="Kubernetes: Volcano queue / Kueue LocalQueue.")] = None,
    pod_template: Annotated[
        Optional[Path], typer.Option(help="Kubernetes: pod/container overlay merged into every pod.")
    ] = None,
    live: Annotated[bool, typer.Option(help="Live view on a terminal (else event lines on stderr).")] = True,
    restart_cost: Annotated[Optional[float], RESTART_COST_KEPT_OPTION] = None,
    migration_aware: Annotated[Optional[bool], MIGRATION_AWARE_KEPT_OPTION] = None,
    max_scale: Annotated[float, MAX_SCALE_OPTION] = DEFAULT_MAX_FACTOR,
    scale_efficiency: Annotated[Optional[float], SCALE_EFFICIENCY_OPTION] = None,
):
    """Run the round loop on a real cluster until every job has finished or failed.

    Each round: read which nodes the launcher can use, plan the next round on them, export it,
    run it on its clock (SIGTERM --grace seconds before its end), and fold in the jobs' progress
    reports. A job that fails --max-failures rounds in a row is marked failed. Ctrl-C (or
    SIGTERM) stops after the running round; a second Ctrl-C cancels its jobs now. The same
    command continues from the state. Exit status: 0 every job finished, 1 some failed (named),
    2 a usage error, 130/143 stopped.

    Example: rota run slurm --state run/state.json --jobs data/jobs.csv --table data/throughputs.csv
    --cluster data/cluster.yaml --round-length 360 --grace 60

    Restarts cost about two minutes; keep jobs where a move does not pay (kept in the state):
    rota run slurm --state run/state.json ... --restart-cost 120 --migration-aware
    """
    name = launcher_name(launcher)
    round_s = None if round_length_text is None else parse_round_length(round_length_text)
    saved = read_state(state) if state.exists() else None
    table_path = table or state_input(saved and saved.get("inputs"), "table", state)
    cluster_path = cluster or state_input(saved and saved.get("inputs"), "cluster", state)
    if table_path is None or cluster_path is None:
        missing = "--table" if table_path is None else "--cluster"
        raise InputError(
            f"give {missing} (the state does not name it)"
            if saved
            else f"no state yet at {state}: give --jobs, --table and --cluster",
            field=missing,
        )
    if saved is not None:
        StateDocument.from_json(saved, state)  # a corrupt state is a one-line error before anything runs
    work = work_dir or state.with_name(state.name + ".run")
    progress = (progress_dir or work / "progress").absolute()
    options: dict[str, Any] = {"grace_s": grace, "progress_dir": str(progress)}
    launcher_options: dict[str, Any] = {}
    if name == "slurm":
        options.update(partition=partition, account=account, sbatch_options=list(sbatch_option or []))
    elif name == "ray":
        options.update(
            accelerator_type=list(accelerator_type or []),
            node_resource=node_resource,
            placement_timeout_s=placement_timeout,
        )
        launcher_options.update(address=address, placement_timeout_s=placement_timeout)
    else:
        from planner.export.kubernetes import read_pod_template

        template = read_pod_template(pod_template) if pod_template is not None else None
        options.update(namespace=namespace, image=image, gang=gang, queue=queue, pod_template=template)
        launcher_options.update(namespace=namespace, pod_template=template)
    config = RunConfig(
        state=state,
        work_dir=work,
        progress_dir=progress,
        table=table_path,
        cluster=cluster_path,
        jobs=jobs,
        policy=policy,
        round_s=None if round_s == AUTO else round_s,
        round_auto=round_s == AUTO,
        max_failures=max_failures,
        retry=list(retry or []),
        export_options=options,
        default_command=default_command,
        restart_cost_s=restart_cost,
        migration_aware=migration_aware,
        scaling=ScaleOptions(max_scale, scale_efficiency),
    )
    adapter = make_launcher(name, **launcher_options)
    stop = StopRequest()
    view = RunView(err, live=live and err.is_terminal)
    log = EventLog(events or work / "events.jsonl", echo=view.event)
    try:
        with stop.installed(), view:
            loop = RunLoop(config, adapter, log, stop, on_round=view.refresh)
            summary = loop.run()
    finally:
        log.close()
    if summary.failed:
        for jid, why in summary.failed.items():
            err.print(f"failed: {one_line(jid)}: {one_line(why)}", highlight=False, soft_wrap=True)
    if summary.tenant_shares:
        shares = ", ".join(f"{one_line(t)} {100 * v:.1f} %" for t, v in summary.tenant_shares.items())
        err.print(f"GPU time by tenant: {shares}", highlight=False, soft_wrap=True)
    what = "stopped" if summary.status >= 128 else "done"
    err.print(
        f"{what}: {summary.rounds} round(s) run, {len(summary.finished)} job(s) finished, "
        f"{len(summary.failed)} failed; "
        f"state {state}, events {events or work / 'events.jsonl'}",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(summary.status)
