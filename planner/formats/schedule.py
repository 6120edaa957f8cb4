"""Schedule files (DESIGN.md §3): `rota.schedule/v1` JSON and its flat CSV view.

A launcher acts on a schedule with no other input: every round lists which
jobs run on which GPUs of which node, from when to when, for how many steps.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner import __version__
from planner.formats.atomic import write_text_atomic
from planner.rounds.engine import EngineConfig, EngineResult

SCHEDULE_FORMAT = "rota.schedule/v1"
CSV_COLUMNS = ["round", "start_s", "end_s", "job_id", "worker_type", "node", "gpu", "planned_steps", "co_located_with"]


def file_digest(path: str | os.PathLike) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def build_schedule(
    result: EngineResult,
    *,
    inputs: dict[str, str | os.PathLike],
    policy: str,
    options: dict[str, Any],
    config: EngineConfig,
    rounds: int | None = None,
) -> dict:
    """The schedule document; `rounds` limits how many rounds are written (all if None)."""
    first = result.solves[0] if result.solves else None
    allocation = None
    if first is not None:
        allocation = {
            "worker_types": result.worker_types,
            "jobs": first.job_ids,
            "x": [[round(float(v), 12) for v in row] for row in first.allocation.x],
        }
    kept = result.rounds if rounds is None else result.rounds[:rounds]
    return {
        "format": SCHEDULE_FORMAT,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "rota_version": __version__,
        "inputs": {name: {"path": str(path), "digest": file_digest(path)} for name, path in inputs.items()},
        "policy": {"name": policy, "options": options},
        "round_s": config.round_s,
        "solver": {
            "status": first.allocation.status if first else "no jobs",
            "solver": first.allocation.solver if first else None,
            "objective": first.allocation.objective if first else None,
            "build_s": first.allocation.build_s if first else 0.0,
            "solve_s": first.allocation.solve_s if first else 0.0,
            "n_classes": first.allocation.n_classes if first else None,
            "resolves": [
                {
                    "time_s": s.time_s,
                    "n_jobs": len(s.job_ids),
                    "status": s.allocation.status,
                    "objective": s.allocation.objective,
                    "solve_s": s.allocation.solve_s,
                }
                for s in result.solves
            ],
        },
        "allocation": allocation,
        "rounds": [
            {
                "index": r.index,
                "start_s": r.start_s,
                "end_s": r.end_s,
                "assignments": [
                    {
                        "jobs": list(p.jobs),
                        "worker_type": p.worker_type,
                        "node": _nodes(p.gpus),
                        "gpus": [{"node": n, "gpu": g} for n, g in p.gpus],
                        "planned_steps": {jid: r.planned_steps[jid] for jid in p.jobs},
                    }
                    for p in r.placements
                ],
            }
            for r in kept
        ],
        "rounds_total": len(result.rounds),
        "jobs": {
            jid: {
                "model": o.job.job_type.model,
                "batch_size": o.job.job_type.batch_size,
                "command": o.job.command,
                "arrival_s": o.job.arrival_s,
                "total_steps": o.job.total_steps,
                "steps_done_at_start": o.job.steps_done,
                "expected_finish_s": o.finish_s,
                "scale_factor": o.job.scale_factor,
            }
            for jid, o in result.outcomes.items()
        },
        "makespan_s": result.makespan_s,
        "utilisation": utilisation(result),
    }


def _nodes(gpus) -> str:
    """The node of a gang, or several joined by '+' when it straddles nodes."""
    seen: list[str] = []
    for node, _ in gpus:
        if node not in seen:
            seen.append(node)
    return "+".join(seen)


def utilisation(result: EngineResult) -> dict[str, float]:
    out = {}
    for w in result.worker_types:
        cap = result.capacity.get(w)
        out[w] = (result.busy_gpu_s[w] / (cap * result.makespan_s)) if cap and result.makespan_s > 0 else 0.0
    return out


def schedule_csv(schedule: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in schedule["rounds"]:
        for a in r["assignments"]:
            for jid in a["jobs"]:
                partners = ";".join(other for other in a["jobs"] if other != jid)
                for gpu in a["gpus"]:
                    writer.writerow(
                        [
                            r["index"],
                            f"{r['start_s']:.3f}",
                            f"{r['end_s']:.3f}",
                            jid,
                            a["worker_type"],
                            gpu["node"],
                            gpu["gpu"],
                            a["planned_steps"][jid],
                            partners,
                        ]
                    )
    return buffer.getvalue()


def write_schedule(schedule: dict, path: str | os.PathLike, csv_path: str | os.PathLike | None = None) -> None:
    write_text_atomic(path, json.dumps(schedule, indent=1) + "\n")
    if csv_path is not None:
        write_text_atomic(csv_path, schedule_csv(schedule))
