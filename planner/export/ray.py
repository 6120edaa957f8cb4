"""Ray export: a JSON plan of placement groups per round, and the driver that runs it.

Each assignment becomes a placement group with one bundle per node of its gang:
`{"GPU": n, "CPU": 1, "accelerator_type:<T>": 0.001, "node:<name>": 0.001}`.
`accelerator_type:<T>` is the resource Ray sets on nodes with that GPU (T defaults to
the worker type upper-cased, a100 -> A100, and can be set per type); `node:<name>`
pins the bundle to the planned node, which must advertise that custom resource
(`ray start --resources '{"node:<name>": 1}'`; a node named by its IP has it from
Ray already). `node_resource` changes the prefix; `pin_nodes=False` leaves the
placement to Ray. STRICT_PACK for one node, STRICT_SPREAD (one bundle per node)
for several. Groups are placed independently: one not placed within
`placement_timeout_s` is given up (its jobs NOT_RUN, named), the others run.

Gang contract (common.gang_env): the driver starts every job's command once per
bundle (node), with ROTA_NODE_RANK = the bundle index and ROTA_MASTER_ADDR = the
address of bundle 0's node; ROTA_NUM_NODES and ROTA_MASTER_PORT are in the plan.
ROTA_GPUS in the plan is the planned slots; the driver's task replaces it with the
GPUs Ray gave it (ray_driver.run_bundle). The driver (ray_driver.py, copied next to
the plan) is also what `rota run ray` (planner/launch/ray.py) runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from planner.errors import InputError
from planner.export.common import (
    DEFAULT_GRACE_S,
    ExportContext,
    assignment_label,
    commands_of,
    dns_name,
    gang_env,
    gpus_by_node,
    grace_for,
    job_log_name,
    parse_map,
    require_valid,
    write_files,
)

RAY_PLAN_FORMAT = "rota.ray-plan/v1"
DEFAULT_NODE_RESOURCE = "node:"
DEFAULT_PLACEMENT_TIMEOUT_S = 120.0


def accelerator_name(worker_type: str, overrides: dict[str, str]) -> str:
    return overrides.get(worker_type, worker_type.upper())


def ray_plan(
    context: ExportContext,
    *,
    accelerator_types: dict[str, str],
    grace_s: int,
    node_resource: str | None = DEFAULT_NODE_RESOURCE,
    placement_timeout_s: float = DEFAULT_PLACEMENT_TIMEOUT_S,
    progress_dir: str | None = None,
    log_dir: str | None = None,
) -> dict:
    rounds = []
    for rnd in context.document.rounds:
        groups = []
        for a in rnd["assignments"]:
            acc = accelerator_name(a["worker_type"], accelerator_types)
            nodes = gpus_by_node(a)
            bundles = []
            for node, gpus in nodes:
                bundle = {"GPU": len(gpus), "CPU": 1, f"accelerator_type:{acc}": 0.001}
                if node_resource:
                    bundle[f"{node_resource}{node}"] = 0.001
                bundles.append(bundle)
            jobs = [
                {
                    "job_id": jid,
                    "command": command,
                    "env": {**env, **gang_env(jid, num_nodes=len(nodes))},
                    "planned_steps": a["planned_steps"][jid],
                    # one log per job, appended round after round (relative: to the driver's folder)
                    "log": f"{(log_dir or 'logs').rstrip('/')}/{job_log_name(jid)}",
                }
                for jid, (command, env) in zip(
                    a["jobs"], commands_of(context, rnd, a, grace_s=grace_s, progress_dir=progress_dir)
                )
            ]
            groups.append(
                {
                    "name": dns_name(f"rota-r{rnd['index']:04d}-{assignment_label(a)}"),
                    "worker_type": a["worker_type"],
                    "accelerator_type": acc,
                    "strategy": "STRICT_PACK" if len(nodes) == 1 else "STRICT_SPREAD",
                    "nodes": [n for n, _ in nodes],
                    "bundles": bundles,
                    "jobs": jobs,
                }
            )
        rounds.append({"index": rnd["index"], "start_s": rnd["start_s"], "end_s": rnd["end_s"], "groups": groups})
    return {
        "format": RAY_PLAN_FORMAT,
        "schedule": context.schedule_path.name,
        "round_s": context.round_s,
        "grace_s": grace_s,
        "placement_timeout_s": placement_timeout_s,
        "contract": "SIGTERM grace_s seconds before the round ends: checkpoint and exit; "
        "the next round restarts the command, which resumes from it",
        "rounds": rounds,
    }


def export_ray(
    context: ExportContext,
    out_dir: Path,
    *,
    accelerator_type: list[str] | dict | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    node_resource: str | None = None,
    pin_nodes: bool = True,
    placement_timeout_s: float | None = None,
    progress_dir: str | None = None,
    log_dir: str | None = None,
    **_ignored,
) -> list[Path]:
    require_valid(context)
    overrides = parse_map(accelerator_type, "--accelerator-type")
    timeout = DEFAULT_PLACEMENT_TIMEOUT_S if placement_timeout_s is None else float(placement_timeout_s)
    if not timeout > 0 or timeout == float("inf"):
        raise InputError(
            f"expected a positive number of seconds, got {placement_timeout_s!r}", field="--placement-timeout"
        )
    plan = ray_plan(
        context,
        accelerator_types=overrides,
        grace_s=grace_for(context, grace_s),
        node_resource=(node_resource or DEFAULT_NODE_RESOURCE) if pin_nodes else None,
        placement_timeout_s=timeout,
        progress_dir=progress_dir,
        log_dir=log_dir,
    )
    driver = (Path(__file__).parent / "ray_driver.py").read_text(encoding="utf-8")
    return write_files(
        out_dir,
        {"ray_plan.json": json.dumps(plan, indent=1) + "\n", "ray_driver.py": driver},
        executable=["ray_driver.py"],
    )
