"""Run a rota Ray plan (written by `rota export ray`) on a Ray cluster.

    python ray_driver.py ray_plan.json                 # every round, in order
    python ray_driver.py ray_plan.json --round 3       # one round (the next-round loop)

    python ray_driver.py ray_plan.json --placement-timeout 300

Per round: one placement group per assignment (a bundle per node of the gang,
each with its GPUs, the `accelerator_type:<T>` resource and the planned node's
resource), placed within the plan's `placement_timeout_s` or the round fails
with an error naming the groups and jobs that were not placed.
Then one task per bundle runs the assignment's commands, each once per node with
ROTA_NODE_RANK (the bundle index) and ROTA_MASTER_ADDR (bundle 0's node). A task
ends its processes itself: SIGTERM `grace_s` before the round's end
(checkpoint), SIGKILL at the end. Then the groups are removed.

Each round's outcome goes into a JSON report, `ray_state.json` next to the plan
(or STATE_FILE): every job with its exit code on each node and its state
(COMPLETED: every process exited 0; KILLED: SIGKILL at the round's end, it
ignored SIGTERM; FAILED: anything else). Exit status: 0 every job completed;
1 a job did not (its id is printed); 2 a round could not be placed or no such
round.

This file is copied next to the plan; it imports ray only when run, and
nothing from rota.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time


def run_commands(
    commands: list[dict], round_s: float, grace_s: float, poll_s: float = 0.2, cwd: str | None = None
) -> list[int]:
    """Start each {"command", "env"} in its own process group (in `cwd`, the driver's folder, where
    this node has it: relative paths then mean what they meant to whoever ran the driver); SIGTERM
    after round_s - grace_s, SIGKILL after round_s. Returns the exit codes."""
    started = time.monotonic()
    cwd = cwd if cwd and os.path.isdir(cwd) else None
    # `trap : TERM` keeps the shell alive until its command exits, so the exit code is the job's.
    procs = [
        subprocess.Popen(
            ["/bin/sh", "-c", "trap : TERM; " + c["command"]],
            env={**os.environ, **c["env"]},
            start_new_session=True,
            cwd=cwd,
        )
        for c in commands
    ]
    signalled = False
    while any(p.poll() is None for p in procs):
        elapsed = time.monotonic() - started
        if elapsed >= round_s:
            _signal(procs, signal.SIGKILL)
            break
        if elapsed >= round_s - grace_s and not signalled:
            _signal(procs, signal.SIGTERM)
            signalled = True
        time.sleep(poll_s)
    return [p.wait() for p in procs]


def _signal(procs, sig) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass


class PlacementError(RuntimeError):
    """A round's placement groups cannot all be placed; the message names them and their jobs."""


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


def _describe(group: dict) -> str:
    jobs = ", ".join(j["job_id"] for j in group["jobs"])
    return f"{group['name']} (jobs {jobs}; {group['worker_type']} on {', '.join(group['nodes'])})"


def missing_resources(groups: list[dict], totals: dict[str, float]) -> list[str]:
    """Groups asking for a resource no node of the cluster has (enough of): they can never be placed."""
    out = []
    for g in groups:
        lacking = sorted({k for b in g["bundles"] for k, v in b.items() if totals.get(k, 0) < v})
        if lacking:
            out.append(f"{_describe(g)}: the cluster has no {', '.join(lacking)}")
    return out


def place_groups(rnd: dict, timeout_s: float) -> list:
    """One placement group per assignment, all placed, or PlacementError naming those that are not
    (at once for a resource the cluster lacks, else after `timeout_s`); none is left behind."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    lacking = missing_resources(rnd["groups"], ray.cluster_resources())
    if lacking:
        raise PlacementError(f"round {rnd['index']}: cannot place " + "; ".join(lacking))
    groups = [placement_group(g["bundles"], strategy=g["strategy"], name=g["name"]) for g in rnd["groups"]]
    ready = [pg.ready() for pg in groups]
    _, waiting = ray.wait(ready, num_returns=len(ready), timeout=timeout_s)
    if waiting:
        for pg in groups:
            remove_placement_group(pg)
        names = [_describe(g) for g, ref in zip(rnd["groups"], ready) if ref in waiting]
        raise PlacementError(
            f"round {rnd['index']}: {len(names)} placement group(s) not placed within {timeout_s:g} s "
            f"(--placement-timeout): " + "; ".join(names)
        )
    return groups


def run_round(rnd: dict, plan: dict, placement_timeout_s: float | None = None) -> dict[str, list[int]]:
    import ray
    from ray.util.placement_group import remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    timeout = placement_timeout_s or plan.get("placement_timeout_s", 120)
    groups = place_groups(rnd, timeout)
    try:
        runner = ray.remote(run_commands)
        probe = ray.remote(_node_ip)

        def strategy(pg, i: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)

        # the gang contract: every node of a group learns rank 0's address (a one-node group its own)
        masters = ray.get([probe.options(num_cpus=0, scheduling_strategy=strategy(pg, 0)).remote() for pg in groups])
        refs = {}
        for pg, g, master in zip(groups, rnd["groups"], masters):
            for i, bundle in enumerate(g["bundles"]):
                gang = {"ROTA_NODE_RANK": str(i), "ROTA_NUM_NODES": str(len(g["bundles"])), "ROTA_MASTER_ADDR": master}
                commands = [{"command": j["command"], "env": {**j["env"], **gang}} for j in g["jobs"]]
                resources = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
                refs[f"{g['name']}/{i}"] = runner.options(
                    num_cpus=bundle.get("CPU", 0),
                    num_gpus=bundle["GPU"],
                    resources=resources,
                    scheduling_strategy=strategy(pg, i),
                ).remote(commands, plan["round_s"], plan["grace_s"], cwd=os.getcwd())
        return dict(zip(refs, ray.get(list(refs.values()))))
    finally:
        for pg in groups:
            remove_placement_group(pg)


STATE_FORMAT = "rota.ray-state/v1"


def job_state(codes: list[int]) -> str:
    if all(c == 0 for c in codes):
        return "COMPLETED"
    return "KILLED" if -signal.SIGKILL in codes else "FAILED"


def round_report(rnd: dict, codes: dict[str, list[int]], started_at: float, error: str | None = None) -> dict:
    """What happened to each job of a round: `codes` maps "<group>/<bundle>" to the exit codes of
    that bundle's commands (in the order of the group's jobs)."""
    jobs = []
    for g in rnd["groups"]:
        per_node = [codes.get(f"{g['name']}/{i}") for i in range(len(g["bundles"]))]
        for k, j in enumerate(g["jobs"]):
            exits = [node[k] for node in per_node if node is not None]
            state = job_state(exits) if len(exits) == len(per_node) else "NOT_RUN"
            jobs.append({"job_id": j["job_id"], "group": g["name"], "state": state, "exit_codes": exits})
    return {"index": rnd["index"], "started_at": started_at, "ended_at": time.time(), "error": error, "jobs": jobs}


def write_report(path: str, document: dict) -> None:
    """Atomically (a reader never sees half a report); a failure is a warning, not an error.
    (slurm_driver.py has the same few lines: each driver is copied alone next to its plan.)"""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)
            handle.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        print(f"warning: cannot write the state report {path}: {exc}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("--round", type=int, action="append", help="run only this round index (repeatable)")
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    parser.add_argument(
        "--placement-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long to wait for a round's placement groups (default: the plan's placement_timeout_s)",
    )
    args = parser.parse_args(argv)
    with open(args.plan, encoding="utf-8") as f:
        plan = json.load(f)
    rounds = [r for r in plan["rounds"] if not args.round or r["index"] in args.round]
    unknown = sorted(set(args.round or ()) - {r["index"] for r in rounds})
    if unknown:
        print(f"error: no such round: {', '.join(map(str, unknown))}", file=sys.stderr, flush=True)
        return 2
    report_path = os.environ.get("STATE_FILE") or os.path.join(os.path.dirname(args.plan) or ".", "ray_state.json")
    import ray

    ray.init(address=args.address, logging_level=logging.ERROR)
    done: list[dict] = []
    status = 0
    for rnd in rounds:
        started = time.time()
        try:
            codes = run_round(rnd, plan, args.placement_timeout)
        except PlacementError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            done.append(round_report(rnd, {}, started, error=str(exc)))
            write_report(report_path, {"format": STATE_FORMAT, "exit_status": 2, "rounds": done})
            return 2
        done.append(round_report(rnd, codes, started))
        failed = [j["job_id"] for j in done[-1]["jobs"] if j["state"] != "COMPLETED"]
        status = 1 if failed else status
        summary = ", ".join(f"{j['job_id']}={j['state']}{j['exit_codes']}" for j in done[-1]["jobs"])
        print(f"round {rnd['index']}: {summary or 'no jobs'}", flush=True)
        if failed:
            print(f"round {rnd['index']}: failed: {', '.join(failed)} (see {report_path})", file=sys.stderr, flush=True)
        write_report(report_path, {"format": STATE_FORMAT, "exit_status": status, "rounds": done})
    print(f"wrote {report_path}; exit status {status}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
