"""Slurm export: one batch script per assignment per round, and a driver.

Each script asks for exactly the placement: typed GRES `gpu:<worker type>:<n>`
on the nodes the plan chose (`--nodelist`), `--time` = the round length, and
`--signal=B:USR1@<grace>` so the batch shell is told `grace` seconds before the
limit; it forwards SIGTERM to the job, which checkpoints. A gang whose nodes
hold different GPU counts becomes a heterogeneous job (one component per node).
Co-located jobs share one allocation and run side by side.

`driver.sh` submits a round's scripts together and starts the next round when
they have all left the queue (or cancels what is left, after a SIGTERM, once
the round plus the grace period is over). Jobs that continue are submitted
again with the next round: their restart is the requeue.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from pathlib import Path

from planner.errors import InputError
from planner.export.common import (
    DEFAULT_GRACE_S,
    ExportContext,
    assignment_label,
    checked_name,
    commands_of,
    comment_text,
    file_name,
    gpus_by_node,
    grace_for,
    header,
    launch_script,
    require_valid,
    round_dir,
    write_files,
)
from planner.formats.schedule import Assignment, Round


def time_limit(seconds: float) -> str:
    """Slurm's [D-]HH:MM:SS, rounded up to whole seconds."""
    total = max(1, math.ceil(seconds))
    days, rest = divmod(total, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


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
    common = [f"--time={time_limit(context.round_s)}"]
    if partition:
        common.append(f"--partition={checked_name(partition, field='--partition')}")
    if account:
        common.append(f"--account={checked_name(account, field='--account')}")
    first = [
        f"--job-name=rota-r{rnd['index']:04d}-{file_name(label)}",
        "--output=logs/%x-%j.out",
        f"--signal=B:USR1@{grace_s}",
        "--no-requeue",
        *extra,
    ]
    counts = {len(gpus) for _, gpus in nodes}
    if len(counts) == 1:
        components = [
            [
                f"--nodes={len(nodes)}",
                f"--nodelist={','.join(n for n, _ in nodes)}",
                f"--gres=gpu:{w}:{counts.pop()}",
                "--ntasks-per-node=1",
            ]
        ]
    else:  # unequal GPUs per node: one heterogeneous component per node
        components = [
            ["--nodes=1", f"--nodelist={node}", f"--gres=gpu:{w}:{len(gpus)}", "--ntasks-per-node=1"]
            for node, gpus in nodes
        ]
    lines = ["#!/bin/bash", header(context, f"round {rnd['index']}, {label} on {w}").rstrip("\n")]
    for k, component in enumerate(components):
        if k:
            lines.append("#SBATCH hetjob")
        options = component + common + (first if k == 0 else [])
        lines += [f"#SBATCH {option}" for option in options]
    steps = ", ".join(f"{j}={n}" for j, n in assignment["planned_steps"].items())
    lines.append(f"# planned steps: {comment_text(steps)}")
    lines.append(f"# GPUs (plan): {', '.join(f'{n}:{g}' for n, gs in nodes for g in gs)}")
    lines.append(f"export ROTA_NUM_NODES={len(nodes)}")
    lines.append("")
    lines.append(launch_script(commands_of(context, rnd, assignment, grace_s=grace_s, progress_dir=progress_dir)))
    return "\n".join(lines)


DRIVER = """#!/bin/bash
{header}# Usage: ./driver.sh              every round below, in order
#        ./driver.sh round-0003   one round (what the next-round loop runs)
# A round's scripts are submitted together. The round is over when all of them have left the
# queue (their --time ends them), or at the latest ROUND_S + GRACE_S seconds after submission:
# then what is left gets SIGTERM (checkpoint), GRACE_S seconds, and is cancelled.
set -euo pipefail
cd "$(dirname "$0")"
ROUND_S=${{ROUND_S:-{round_s}}}
GRACE_S=${{GRACE_S:-{grace_s}}}
ROUNDS=({rounds})

run_round() {{
  local dir=$1 script id ids=()
  for script in "$dir"/*.sbatch; do
    [ -e "$script" ] || continue
    id=$(sbatch --parsable "$script")
    ids+=("${{id%%;*}}")
  done
  [ "${{#ids[@]}}" -gt 0 ] || return 0
  local list deadline
  list=$(IFS=,; echo "${{ids[*]}}")
  deadline=$(( $(date +%s) + ROUND_S + GRACE_S ))
  echo "round $dir: submitted ${{#ids[@]}} job(s): $list"
  while [ -n "$(squeue -h -j "$list" -o %i 2>/dev/null)" ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      scancel --full --signal=TERM "${{ids[@]}}" 2>/dev/null || true
      sleep "$GRACE_S"
      scancel "${{ids[@]}}" 2>/dev/null || true
      break
    fi
    sleep 5
  done
}}

mkdir -p logs
if [ "$#" -gt 0 ]; then
  for dir in "$@"; do run_round "$dir"; done
else
  for dir in "${{ROUNDS[@]}}"; do run_round "$dir"; done
fi
"""


def _sbatch_option(option: str) -> str:
    """An --sbatch-option as one #SBATCH line: '--' added; no line breaks or other unprintable characters."""
    if not option.isprintable():
        raise InputError(f"{option!r} holds a line break or another unprintable character", field="--sbatch-option")
    return option if option.startswith("--") else f"--{option}"


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
    grace = grace_for(context.round_s, grace_s)
    extra = [_sbatch_option(o) for o in sbatch_options]
    files: dict[str, str] = {}
    rounds = []
    for rnd in context.document.rounds:
        rounds.append(round_dir(rnd["index"]))
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
    files["driver.sh"] = DRIVER.format(
        header=header(context, "Slurm driver"),
        round_s=math.ceil(context.round_s),
        grace_s=grace,
        rounds=" ".join(shlex.quote(r) for r in rounds),
    )
    return write_files(out_dir, files, executable=["driver.sh"])
