"""Slurm export: one batch script per assignment per round, and a driver that runs them.

Each script asks for exactly the placement: the planned nodes (`--nodelist`) and typed GPUs,
`--gres=gpu:<worker type>:<n>` per node, or `--gpus=<worker type>:<total>` where a gang's nodes
hold different counts (a heterogeneous job would wait for Slurm's backfill pass, up to a minute).
Inside the allocation `srun` starts the task once per node; the task finds its rank and the GPUs
Slurm really gave it, then runs the launch wrapper (common.launch_script) with the commands.
A gang over several nodes that share a leaf switch (the schedule's `switch`, from the cluster
spec's node domains) also asks for `--switches=1`: under Slurm's topology/tree plugin, at most
one leaf switch. The planned nodes already share one; should the site's topology.conf disagree,
Slurm holds the job up to its maximum switch wait, then runs it anyway.

The round's clock is the driver's (slurm_driver.py): Slurm rounds `--time` up to minutes and
sends `--signal` warnings up to a minute early, so the driver itself sends SIGTERM at the
round's end minus the grace period and cancels what is left at the end. `--time` is the round
rounded up to whole minutes plus one, and `--signal=B:USR1@<grace>` stays as a safety net for a
driver that died: with the extra minute it can never come before the driver's own signal.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from pathlib import Path

from planner.errors import InputError
from planner.export.common import (
    DEFAULT_GRACE_S,
    MASTER_ADDR,
    NODE_RANK,
    ExportContext,
    assignment_label,
    checked_name,
    commands_of,
    comment_text,
    file_name,
    gpus_by_node,
    grace_for,
    header,
    job_log_name,
    launch_script,
    require_valid,
    round_dir,
    write_files,
)
from planner.formats.schedule import Assignment, Round

ROUNDS_FORMAT = "rota.slurm-rounds/v1"
DRIVER_FILE = "slurm_driver.py"
ROUNDS_FILE = "slurm_rounds.json"
STATE_FILE = "slurm-state.json"


def time_limit(round_s: float) -> str:
    """`--time` for a round: whole minutes (Slurm rounds seconds up to minutes anyway), one more
    than the round needs, so Slurm's limit and its early warning never cut the round short."""
    minutes = math.ceil(max(1.0, round_s) / 60) + 1
    days, rest = divmod(minutes * 60, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:00"
    return f"{days}-{text}" if days else text


def node_task(planned_gpus: str, launch: str) -> str:
    """What runs once per node: rank and real GPUs from Slurm's environment, then the launch wrapper.

    SLURM_STEP_GPUS holds the node's GPU indices as gres.conf numbers them (CUDA_VISIBLE_DEVICES
    is renumbered from 0 where Slurm confines devices); outside Slurm (a dry run) the plan's slots stand."""
    return "\n".join(
        [
            f"export {NODE_RANK}=${{SLURM_NODEID:-0}}",
            'if [ -n "${SLURM_JOB_ID:-}" ]; then',
            "  gpus=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}} node=${SLURMD_NODENAME:-}",
            '  ROTA_GPUS=""',
            '  for g in $(echo "$gpus" | tr , " "); do ROTA_GPUS="${ROTA_GPUS:+$ROTA_GPUS,}$node:$g"; done',
            "else",
            f"  ROTA_GPUS={shlex.quote(planned_gpus)}",
            "fi",
            "export ROTA_GPUS",
            launch,
        ]
    )


# The batch shell: srun runs the node task once per node (rank 0 on this, the first node); a
# trapped signal interrupts `wait`, so it waits again until srun has really exited.
BATCH_BODY = f"""export {MASTER_ADDR}="$(hostname)"
if [ -n "${{SLURM_JOB_ID:-}}" ]; then
  trap 'scancel --signal=TERM "$SLURM_JOB_ID"' USR1
  srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\
    --kill-on-bad-exit=0 /bin/sh -c "$ROTA_TASK" &
  srun_pid=$!
  while :; do
    wait "$srun_pid"; status=$?
    kill -0 "$srun_pid" 2>/dev/null || break
  done
  exit "$status"
fi
exec /bin/sh -c "$ROTA_TASK"   # not under Slurm: one node, rank 0
"""


def uneven(nodes: list[tuple[str, list[int]]]) -> bool:
    """A gang whose nodes hold different GPU counts (one --gres count cannot say it)."""
    return len({len(gpus) for _, gpus in nodes}) > 1


def batch_script(
    context: ExportContext,
    rnd: Round,
    assignment: Assignment,
    *,
    grace_s: int,
    partition: str | None,
    account: str | None,
    extra: list[str],
    progress_dir: str | None,
) -> str:
    where = context.schedule_path
    w = checked_name(assignment["worker_type"], field="worker_type", path=where)
    label = assignment_label(assignment)
    nodes = gpus_by_node(assignment)
    for node, _ in nodes:
        checked_name(node, field="gpus.node", path=where)
    if uneven(nodes):  # Slurm spreads the total over the nodes; the driver submits these last
        gpus = f"--gpus={w}:{len(assignment['gpus'])}"
    else:
        gpus = f"--gres=gpu:{w}:{len(nodes[0][1])}"
    options = [
        f"--job-name=rota-r{rnd['index']:04d}-{file_name(label)}",
        f"--nodes={len(nodes)}",
        f"--nodelist={','.join(n for n, _ in nodes)}",
        "--ntasks-per-node=1",
        gpus,
        f"--time={time_limit(context.round_s)}",
    ]
    if len(nodes) > 1 and assignment.get("switch"):  # one leaf switch (topology/tree)
        options.append("--switches=1")
    if partition:
        options.append(f"--partition={checked_name(partition, field='--partition')}")
    if account:
        options.append(f"--account={checked_name(account, field='--account')}")
    # One log per assignment across all rounds (appended), not one per round: Slurm's own lines go
    # there, each job's output into logs/<job>.log (the launch wrapper appends it).
    options += [
        f"--output=logs/{file_name(label)}.slurm.out",
        "--open-mode=append",
        f"--signal=B:USR1@{grace_s}",
        "--no-requeue",
        *extra,
    ]
    planned = ",".join(f"{g['node']}:{g['gpu']}" for g in assignment["gpus"])
    commands = commands_of(context, rnd, assignment, grace_s=grace_s, progress_dir=progress_dir)
    for _, env in commands:
        del env["ROTA_GPUS"]  # the node task sets it from what Slurm allocated
    logs = [f"logs/{job_log_name(jid)}" for jid in assignment["jobs"]]
    steps = ", ".join(f"{j}={n}" for j, n in assignment["planned_steps"].items())
    lines = [
        "#!/bin/bash",
        header(context, f"round {rnd['index']}, {label} on {w}").rstrip("\n"),
        *(f"#SBATCH {option}" for option in options),
        f"# planned steps: {comment_text(steps)}",
        f"# GPUs (plan): {planned.replace(',', ', ')}",
        f"ROTA_TASK={shlex.quote(node_task(planned, launch_script(commands, logs)))}",
        BATCH_BODY,
    ]
    return "\n".join(lines)


DRIVER = """#!/bin/sh
{header}# Usage: ./driver.sh              every round below, in order
#        ./driver.sh round-0003   one round (what the next-round loop runs)
# Runs {driver} (Python 3, standard library only) with the rounds listed in {rounds}.
# ROUND_S and GRACE_S (seconds) override the plan's; STATE_FILE where the job state report goes.
# Exit status: 0 every job completed, 1 a job failed or was cancelled, 2 a submission failed or no such round,
# 130/143 interrupted; after a refused submission or an interruption the submitted jobs are cancelled.
cd "$(dirname "$0")" || exit 2
exec "${{PYTHON:-python3}}" {driver} {rounds} "$@"
"""


def _sbatch_option(option: str) -> str:
    """An --sbatch-option as one #SBATCH line holding one option: '--' added; no line breaks or
    other unprintable characters, no spaces (sbatch would read two options from one line)."""
    if not option.isprintable():
        raise InputError(f"{option!r} holds a line break or another unprintable character", field="--sbatch-option")
    if not option.strip() or any(ch.isspace() for ch in option):
        raise InputError(
            f"{option!r} is not one option: give one option per --sbatch-option, without spaces "
            "(e.g. --sbatch-option=--qos=high --sbatch-option=--exclusive)",
            field="--sbatch-option",
        )
    return option if option.startswith("--") else f"--{option}"


def state_file(progress_dir: str | None) -> str:
    """Where the driver writes its job state report: next to the progress folder, else under logs/."""
    if not progress_dir:
        return f"logs/{STATE_FILE}"
    folder = progress_dir.rstrip("/") or "/"
    return f"{folder}-{STATE_FILE}" if folder != "/" else f"/{STATE_FILE}"


def export_slurm(
    context: ExportContext,
    out_dir: Path,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    partition: str | None = None,
    account: str | None = None,
    sbatch_options: Sequence[str] = (),
    progress_dir: str | None = None,
    **_ignored,
) -> list[Path]:
    require_valid(context)
    grace = grace_for(context, grace_s)
    extra = [_sbatch_option(o) for o in sbatch_options]
    files: dict[str, str] = {}
    rounds = []
    for rnd in context.document.rounds:
        first: list[dict] = []
        last: list[dict] = []  # uneven gangs last: the GPUs then left free on their nodes are the planned ones
        for a in rnd["assignments"]:
            rel = f"{round_dir(rnd['index'])}/{file_name(assignment_label(a))}.sbatch"
            files[rel] = batch_script(
                context,
                rnd,
                a,
                grace_s=grace,
                partition=partition,
                account=account,
                extra=extra,
                progress_dir=progress_dir,
            )
            (last if uneven(gpus_by_node(a)) else first).append({"script": rel, "jobs": list(a["jobs"])})
        rounds.append({"dir": round_dir(rnd["index"]), "index": rnd["index"], "scripts": first + last})
    plan = {
        "format": ROUNDS_FORMAT,
        "schedule": context.schedule_path.name,
        "round_s": context.round_s,
        "grace_s": grace,
        "progress_dir": progress_dir,
        "state_file": state_file(progress_dir),
        "rounds": rounds,
    }
    files[ROUNDS_FILE] = json.dumps(plan, indent=1) + "\n"
    files[DRIVER_FILE] = (Path(__file__).parent / DRIVER_FILE).read_text(encoding="utf-8")
    files["driver.sh"] = DRIVER.format(header=header(context, "Slurm driver"), driver=DRIVER_FILE, rounds=ROUNDS_FILE)
    return write_files(out_dir, files, executable=["driver.sh", DRIVER_FILE])
