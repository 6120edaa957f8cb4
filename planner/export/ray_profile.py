"""Run rota's profiling jobs (written by `rota profile-jobs ray`) on a Ray cluster.

    python ray_profile.py                       # every worker type, then the merge
    python ray_profile.py --address HOST:PORT

One Ray task per worker type, pinned to its node by the node's resource (`node:<name>`, as in
the Ray export) and holding every GPU of it, runs `rota profile` there into a temporary shard
(given the shard this folder already has, so `--resume` measures only what it lacks) and hands
the table back: the shards land in shards/ next to this file, so no file system is shared. The
task runs in the driver's working folder where that node has it (relative paths in the profile
options then mean the same), else in a temporary one. Its output goes to logs/<worker type>.log.
Once every job has succeeded, `rota table merge --strict` writes the merged table here.

Exit status: 0 merged; 1 a job or the merge failed (the other shards are kept: run it again);
2 a job can never be placed (no node has its resource or enough GPUs), or the cluster requires an
authentication token this process lacks (RAY_AUTH_MODE=token and RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH
give it), before anything runs.
A report of each job (exit code, Ray node, its resources) goes to ray_profile_state.json.

This file is copied next to its plan (ray_profile_jobs.json); it imports ray only when run, and
nothing from rota.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PLAN = "ray_profile_jobs.json"
STATE = "ray_profile_state.json"
SHARD_MARK = "{shard}"  # the --out argument in a job's command, replaced by the temporary shard


def profile_on_node(
    command: list[str], shard_name: str, previous: bytes | None, cwd: str, env: dict | None = None
) -> dict:
    """What a task runs on its node: the command into a temporary shard; the shard's bytes back.
    `env`: variables added for the command (a gang across nodes: where the other nodes are)."""
    import ray

    with tempfile.TemporaryDirectory(prefix="rota-profile-") as tmp:
        shard = Path(tmp, shard_name)
        if previous is not None:
            shard.write_bytes(previous)
        argv = [str(shard) if word == SHARD_MARK else word for word in command]
        try:
            done = subprocess.run(
                argv,
                cwd=cwd if os.path.isdir(cwd) else tmp,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
            returncode, output = done.returncode, done.stdout.decode(errors="replace")
        except OSError as exc:  # e.g. rota is not on this node's PATH
            returncode, output = 127, f"cannot run {argv[0]!r} on this node: {exc.strerror} (see --rota)\n"
        return {
            "returncode": returncode,
            "output": output,
            "table": shard.read_bytes() if shard.exists() else None,
            "node_id": ray.get_runtime_context().get_node_id(),
        }


def _resource(job: dict, node: str) -> str:
    return job["node_resource"] if node == job["node"] else f"{job.get('node_resource_prefix', 'node:')}{node}"


def unplaceable(jobs: list[dict], nodes: list[dict]) -> list[str]:
    """Jobs no live node can take: a node of the job (the first, and those of a gang across nodes)
    is not there or has fewer GPUs than the job asks for."""
    out = []
    for job in jobs:
        for name in job.get("nodes") or [job["node"]]:
            resource = _resource(job, name)
            fits = [n for n in nodes if n.get("Alive") and n["Resources"].get(resource, 0) > 0]
            if not fits:
                out.append(f"{job['worker_type']}: no Ray node has the resource {resource}")
            elif all(n["Resources"].get("GPU", 0) < job["gpus"] for n in fits):
                out.append(f"{job['worker_type']}: node {name} has fewer than {job['gpus']} GPUs")
    return out


def gang_env(job: dict, nodes: list[dict], address: str) -> dict:
    """For a job across nodes: where its nodes are (`rota profile --across-nodes ray` reads it)."""
    if len(job.get("nodes") or []) < 2:
        return {}
    where = []
    for name in job["nodes"]:
        resource = _resource(job, name)
        node = next(n for n in nodes if n.get("Alive") and n["Resources"].get(resource, 0) > 0)
        where.append(f"{name}={node['NodeManagerAddress']}")
    prefix = job.get("node_resource_prefix", "node:")
    return {"ROTA_RAY_NODES": ",".join(where), "ROTA_RAY_ADDRESS": address, "ROTA_RAY_NODE_RESOURCE": prefix}


def _write(path: Path, data: bytes) -> None:
    """Atomically: a temp file next to it, then a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# What a process needs to connect to a cluster started with RAY_AUTH_MODE=token (Ray reads these).
TOKEN_HELP = (
    "set RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN, or in a file named by "
    "RAY_AUTH_TOKEN_PATH (default ~/.ray/auth_token)"
)


def connect_ray(address: str, **options: Any) -> str | None:
    """ray.init(address=address, **options): None once connected, or the one-line error to show where
    the cluster requires an authentication token and refuses this process's (none, or not the
    cluster's). Told by one quick try first (token_refused): otherwise ray.init retries for ~20 s,
    a warning each second, and says only 'Failed to connect'. Other errors raise as ray.init raises
    them. (ray_driver.py and ray_profile.py have the same lines: each is copied alone next to its plan.)"""
    import ray
    import ray.exceptions

    no_token = getattr(ray.exceptions, "AuthenticationError", ())  # none in a Ray without token authentication
    refused = (
        f"the Ray cluster at {address!r} requires an authentication token, and this process has none "
        f"or a wrong one: {TOKEN_HELP}"
    )
    if token_refused(address):
        return refused
    try:
        ray.init(address=address, **options)
    except no_token:  # RAY_AUTH_MODE=token here, but no token at all
        return refused
    except ConnectionError as exc:  # Ray chains its last try's traceback to it, as text
        if "AuthenticationError" in str(exc.__cause__) or "InvalidAuthToken" in str(exc.__cause__):
            return refused
        raise
    return None


def token_refused(address: str) -> bool:
    """Whether the Ray cluster at `address` (HOST:PORT) refuses this process's authentication token:
    one connection to its GCS, with Ray's warning about it kept off stderr. False for anything else:
    it connects, nobody answers, or the address is 'auto' or a ray:// one (ray.init's own lookup)."""
    host, _, port = address.rpartition(":")
    if not host or "://" in address or not port.isdigit():
        return False
    try:
        # ray.init's own steps (not public: where they are gone, no quick check); no stub in 2.60
        from ray._private.authentication.authentication_token_setup import ensure_token_if_auth_enabled
        from ray._raylet import GcsClient  # type: ignore[attr-defined,unused-ignore]
        from ray.exceptions import AuthenticationError

        socket.create_connection((host, int(port)), timeout=10).close()  # nobody answers: ray.init says so
    except (ImportError, OSError):
        return False
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        # RAY_AUTH_MODE=token and no token: refused here (a GcsClient would abort the process)
        ensure_token_if_auth_enabled(None, create_token_if_missing=False)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        GcsClient(address=address)
    except AuthenticationError:
        return True
    except Exception:  # anything else is ray.init's to report
        return False
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parent
    plan = json.loads((here / PLAN).read_text(encoding="utf-8"))
    import ray

    refused = connect_ray(args.address, logging_level=logging.ERROR, log_to_driver=False)
    if refused:
        print(f"error: {refused}", file=sys.stderr, flush=True)
        return 2
    lacking = unplaceable(plan["jobs"], ray.nodes())
    if lacking:
        print("error: cannot place " + "; ".join(lacking), file=sys.stderr, flush=True)
        return 2
    (here / "shards").mkdir(exist_ok=True)
    (here / "logs").mkdir(exist_ok=True)
    task = ray.remote(profile_on_node)
    refs = {}
    gcs = ray.get_runtime_context().gcs_address
    for job in plan["jobs"]:
        job.setdefault("node_resource_prefix", plan.get("node_resource_prefix", "node:"))
        shard = here / job["shard"]
        previous = shard.read_bytes() if shard.exists() else None
        refs[job["worker_type"]] = task.options(
            num_cpus=1, num_gpus=job["gpus"], resources={job["node_resource"]: 0.001}, max_retries=0
        ).remote(job["command"], shard.name, previous, os.getcwd(), gang_env(job, ray.nodes(), gcs))
        where = f"nodes {','.join(job['nodes'])}" if len(job.get("nodes") or []) > 1 else f"node {job['node']}"
        print(f"{job['worker_type']}: profiling on {where}", flush=True)
    nodes = {n["NodeID"]: n for n in ray.nodes()}
    report, failed = {}, []
    for job in plan["jobs"]:
        name = job["worker_type"]
        try:
            result = ray.get(refs[name])
        except Exception as exc:  # the task or its node died
            result = {"returncode": None, "output": f"{type(exc).__name__}: {exc}\n", "table": None, "node_id": None}
        (here / job["log"]).write_text(result["output"], encoding="utf-8")
        if result["table"] is not None:
            _write(here / job["shard"], result["table"])
        node = nodes.get(result["node_id"], {})
        report[name] = {
            "returncode": result["returncode"],
            "node_id": result["node_id"],
            "node_resources": sorted(node.get("Resources", {})),
            "log": job["log"],
        }
        if result["returncode"] != 0:
            failed.append(name)
        print(f"{name}: exit code {result['returncode']} (log: {job['log']})", flush=True)
    _write(here / STATE, (json.dumps(report, indent=1) + "\n").encode())
    if failed:
        print(f"error: profiling failed for {', '.join(failed)}; see logs/; not merged", file=sys.stderr, flush=True)
        return 1
    merged = subprocess.run(plan["merge"], cwd=here)
    return 0 if merged.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
