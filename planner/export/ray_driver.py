"""Run a rota Ray plan (written by `rota export ray`) on a Ray cluster.

    python ray_driver.py ray_plan.json                 # every round, in order
    python ray_driver.py ray_plan.json --round 3       # one round (the next-round loop)

    python ray_driver.py ray_plan.json --placement-timeout 300

Per round: one placement group per assignment (a bundle per node of the gang,
each with its GPUs, the `accelerator_type:<T>` resource and the planned node's
resource), placed within the plan's `placement_timeout_s` or the round fails
(exit status 2) with an error naming the groups and jobs that were not placed.
Then one task per bundle runs the assignment's commands, each once per node with
ROTA_NODE_RANK (the bundle index) and ROTA_MASTER_ADDR (bundle 0's node). A task
ends its processes itself: SIGTERM `grace_s` before the round's end
(checkpoint), SIGKILL at the end. Then the groups are removed.

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
    import ray

    ray.init(address=args.address, logging_level=logging.ERROR)
    for rnd in plan["rounds"]:
        if args.round and rnd["index"] not in args.round:
            continue
        try:
            codes = run_round(rnd, plan, args.placement_timeout)
        except PlacementError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
        print(f"round {rnd['index']}: " + ", ".join(f"{k}={v}" for k, v in codes.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
