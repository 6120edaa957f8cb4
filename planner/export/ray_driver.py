"""Run a rota Ray plan (written by `rota export ray`) on a Ray cluster.

    python ray_driver.py ray_plan.json                 # every round, in order
    python ray_driver.py ray_plan.json --round 3       # one round (the next-round loop)

Per round: one placement group per assignment (a bundle per node of the gang,
each with its GPUs and the `accelerator_type:<T>` resource), one task per
bundle that runs the assignment's commands. A task ends its processes itself:
SIGTERM `grace_s` before the round's end (checkpoint), SIGKILL at the end.
Then the groups are removed and the next round starts.

This file is copied next to the plan; it imports ray only when run, and
nothing from rota.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def run_commands(commands: list[dict], round_s: float, grace_s: float, poll_s: float = 0.2) -> list[int]:
    """Start each {"command", "env"} in its own process group; SIGTERM after
    round_s - grace_s, SIGKILL after round_s. Returns the exit codes."""
    started = time.monotonic()
    # `trap : TERM` keeps the shell alive until its command exits, so the exit code is the job's.
    procs = [
        subprocess.Popen(
            ["/bin/sh", "-c", "trap : TERM; " + c["command"]], env={**os.environ, **c["env"]}, start_new_session=True
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


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


def run_round(rnd: dict, plan: dict) -> dict[str, list[int]]:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    groups = [placement_group(g["bundles"], strategy=g["strategy"], name=g["name"]) for g in rnd["groups"]]
    try:
        ray.get([pg.ready() for pg in groups], timeout=plan.get("ready_timeout_s", 600))
        runner = ray.remote(run_commands)
        probe = ray.remote(_node_ip)
        refs = {}
        for pg, g in zip(groups, rnd["groups"]):
            strategy = lambda i, pg=pg: PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)  # noqa: E731
            extra = {}
            if len(g["bundles"]) > 1:  # a multi-node gang: tell every node where rank 0 is
                extra["ROTA_MASTER_ADDR"] = ray.get(probe.options(num_cpus=0, scheduling_strategy=strategy(0)).remote())
            for i, bundle in enumerate(g["bundles"]):
                env = {"ROTA_NODE_RANK": str(i), "ROTA_NUM_NODES": str(len(g["bundles"])), **extra}
                commands = [{"command": j["command"], "env": {**j["env"], **env}} for j in g["jobs"]]
                resources = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
                refs[f"{g['name']}/{i}"] = runner.options(
                    num_cpus=bundle.get("CPU", 0),
                    num_gpus=bundle["GPU"],
                    resources=resources,
                    scheduling_strategy=strategy(i),
                ).remote(commands, plan["round_s"], plan["grace_s"])
        return dict(zip(refs, ray.get(list(refs.values()))))
    finally:
        for pg in groups:
            remove_placement_group(pg)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("--round", type=int, action="append", help="run only this round index (repeatable)")
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    args = parser.parse_args(argv)
    with open(args.plan, encoding="utf-8") as f:
        plan = json.load(f)
    import ray

    ray.init(address=args.address)
    for rnd in plan["rounds"]:
        if args.round and rnd["index"] not in args.round:
            continue
        codes = run_round(rnd, plan)
        print(f"round {rnd['index']}: " + ", ".join(f"{k}={v}" for k, v in codes.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
