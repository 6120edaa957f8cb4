"""Ray export: a JSON plan of placement groups per round, and the driver that runs it.

Each assignment becomes a placement group with one bundle per node of its gang:
`{"GPU": n, "CPU": 1, "accelerator_type:<T>": 0.001}` (the resource Ray sets on
nodes with that GPU and that `accelerator_type=` asks for), STRICT_PACK for one
node and STRICT_SPREAD (one bundle per node) for several. T defaults to the
worker type upper-cased (a100 -> A100) and can be set per type. Node names stay
in the plan as advice: Ray places bundles itself, unless `node_resource` names a
custom resource prefix the cluster's nodes advertise (e.g. `node:` + name).
"""

from __future__ import annotations

import json
from pathlib import Path

from planner.export.common import (
    DEFAULT_GRACE_S,
    ExportContext,
    assignment_label,
    commands_of,
    dns_name,
    gpus_by_node,
    grace_for,
    parse_map,
    require_valid,
    write_files,
)

RAY_PLAN_FORMAT = "rota.ray-plan/v1"


def accelerator_name(worker_type: str, overrides: dict[str, str]) -> str:
    return overrides.get(worker_type, worker_type.upper())


def ray_plan(
    context: ExportContext,
    *,
    accelerator_types: dict[str, str],
    grace_s: int,
    node_resource: str | None = None,
    progress_dir: str | None = None,
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
                {"job_id": jid, "command": command, "env": env, "planned_steps": a["planned_steps"][jid]}
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
    progress_dir: str | None = None,
    **_ignored,
) -> list[Path]:
    require_valid(context)
    overrides = parse_map(accelerator_type, "--accelerator-type")
    plan = ray_plan(
        context,
        accelerator_types=overrides,
        grace_s=grace_for(context.round_s, grace_s),
        node_resource=node_resource,
        progress_dir=progress_dir,
    )
    driver = (Path(__file__).parent / "ray_driver.py").read_text(encoding="utf-8")
    return write_files(
        out_dir,
        {"ray_plan.json": json.dumps(plan, indent=1) + "\n", "ray_driver.py": driver},
        executable=["ray_driver.py"],
    )
