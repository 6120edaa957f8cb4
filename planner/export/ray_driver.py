"""Run a rota Ray plan (written by `rota export ray`) on a Ray cluster.

    python ray_driver.py ray_plan.json                 # every round, in order
    python ray_driver.py ray_plan.json --round 3       # one round (the next-round loop)

    python ray_driver.py ray_plan.json --placement-timeout 300

Per round: one placement group per assignment (a bundle per node of the gang, each with its GPUs,
the `accelerator_type:<T>` resource and the planned node's resource). Groups are placed
independently: a group that asks for a resource no node has is refused at once, one still waiting
after `placement_timeout_s` (or at the round's SIGTERM time) is given up; its jobs are NOT_RUN and
the other groups run. Each placed group gets one task per bundle, which runs the assignment's
commands once per node with ROTA_NODE_RANK (the bundle index), ROTA_MASTER_ADDR (bundle 0's node)
and ROTA_GPUS (the GPUs Ray gave the task, `node:gpu`; ROTA_PLANNED_GPUS keeps the plan's).

The round's clock is absolute: SIGTERM at round start + round_s - grace_s (checkpoint and exit),
SIGKILL at round start + round_s, counted from the wall-clock time the round started (this driver's
time.time() at the round's start), however late a group was placed. The clock is kept on each node
by a watchdog: a small process in its own session, parent of the job's processes, that signals
them on time and kills them when the Ray worker that started them dies (a lost raylet, a cancelled
task), so a job never outlives its round. Tasks are never retried (max_retries=0): a job runs at
most once per round. Every wait has a deadline: a task with no answer END_SLACK_S after the
round's end, or on a node Ray declares dead, is LOST.

Each round's outcome goes into a JSON report, `ray_state.json` next to the plan (or STATE_FILE):
every job with its exit code on each node and its state (COMPLETED: every process exited 0;
KILLED: SIGKILL at the round's end, it ignored SIGTERM; FAILED: anything else it did; LOST: its
node or task was lost mid-round; NOT_RUN: its group was not placed). Exit status: 0 every job
completed; 1 a job did not (its id and state are printed); 2 a group could not be placed, or no such round,
or the cluster requires an authentication token this process lacks (RAY_AUTH_MODE=token and RAY_AUTH_TOKEN
or RAY_AUTH_TOKEN_PATH give it), said in one line instead of Ray's ~20 s of retries.

This file is copied next to the plan; it imports ray only when run, and nothing from rota
(rota's `rota run` imports its functions, so both run the same code).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

POLL_S = 0.2
END_SLACK_S = 10.0  # after the round's end, how long a task has to answer before it is LOST
ORPHAN_GRACE_S = 2.0  # a job whose Ray worker died: SIGTERM, then SIGKILL this much later
NODE_CHECK_S = 1.0  # how often the driver asks Ray which nodes are alive while tasks run

# The watchdog: `python -c WATCHDOG`, its spec as JSON on stdin, a socket to the task as fd
# `sock`. It forks once more and the first child exits (so it is no Ray worker's child: Ray kills
# a worker's children when the worker exits), becomes a child subreaper where Linux allows (the
# jobs' orphans are reaped here), starts each command in its own session and process group, and
# signals the groups at the absolute times `term_at` / `kill_at`; EOF on the socket means the Ray
# worker is gone: SIGTERM now, SIGKILL `orphan_grace_s` later. It sends the exit codes back.
WATCHDOG = r"""
import json, os, select, signal, socket, sys, time
spec = json.loads(sys.stdin.read())
if os.fork():
    os._exit(0)
sock = socket.socket(fileno=spec["sock"])
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except Exception:
    pass
null = os.open(os.devnull, os.O_RDONLY)
pids = []
for c in spec["commands"]:
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(null, 0)
            os.close(spec["sock"])
            if spec.get("cwd"):
                os.chdir(spec["cwd"])
            if c.get("log"):  # the job's output, appended to its own log round after round
                if os.path.dirname(c["log"]):
                    os.makedirs(os.path.dirname(c["log"]), exist_ok=True)
                out = os.open(c["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
                os.dup2(out, 1)
                os.dup2(out, 2)
            os.execve("/bin/sh", ["/bin/sh", "-c", "trap : TERM; " + c["command"]], c["env"])
        finally:
            os._exit(127)
    pids.append(pid)
codes, sent, orphaned, kill_at = {}, {}, False, spec["kill_at"]

def signal_all(sig):
    for pid in pids:
        if pid not in codes:
            try:
                os.killpg(pid, sig)
            except OSError:
                pass
    sent.setdefault(signal.Signals(sig).name, time.time())

def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in pids:
            codes[pid] = os.waitstatus_to_exitcode(status)
            try:
                os.killpg(pid, signal.SIGKILL)  # what it left behind in its group
            except OSError:
                pass

while len(codes) < len(pids):
    now = time.time()
    if now >= kill_at and "SIGKILL" not in sent:
        signal_all(signal.SIGKILL)
    elif now >= spec["term_at"] and "SIGTERM" not in sent:
        signal_all(signal.SIGTERM)
    if "SIGKILL" in sent and now > sent["SIGKILL"] + 30:
        break  # unkillable (uninterruptible sleep): give up waiting
    reap()
    if len(codes) == len(pids):
        break
    if orphaned:
        time.sleep(spec["poll_s"])
        continue
    ready, _, _ = select.select([sock], [], [], spec["poll_s"])
    if ready and not sock.recv(4096):
        orphaned = True
        signal_all(signal.SIGTERM)
        kill_at = min(kill_at, time.time() + spec["orphan_grace_s"])
reap()
try:
    sock.sendall(json.dumps({"codes": [codes.get(p) for p in pids], "signals": sent, "orphaned": orphaned}).encode())
    sock.close()
except OSError:
    pass
"""


def run_watched(
    commands: list[dict],
    term_at: float,
    kill_at: float,
    *,
    cwd: str | None = None,
    poll_s: float = POLL_S,
    orphan_grace_s: float = ORPHAN_GRACE_S,
) -> dict:
    """Run each {"command", "env"} (the whole environment) under a watchdog (WATCHDOG) that sends
    SIGTERM to its process group at the wall-clock time `term_at`, SIGKILL at `kill_at`, and both
    at once (`orphan_grace_s` apart) when this process dies. Blocks until they have all ended;
    returns {"codes": [exit code per command], "signals": {name: time sent}, "orphaned": False}."""
    mine, theirs = socket.socketpair()
    spec = {
        "commands": commands,
        "term_at": term_at,
        "kill_at": kill_at,
        "cwd": cwd if cwd and os.path.isdir(cwd) else None,
        "poll_s": poll_s,
        "orphan_grace_s": orphan_grace_s,
        "sock": theirs.fileno(),
    }
    try:
        starter = subprocess.Popen(
            [sys.executable, "-c", WATCHDOG],
            stdin=subprocess.PIPE,
            pass_fds=[theirs.fileno()],
            start_new_session=True,
        )
        starter.communicate(json.dumps(spec).encode())  # it forks the watchdog and exits at once
    finally:
        theirs.close()
    chunks = []
    while True:
        chunk = mine.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
    mine.close()
    try:
        result: dict = json.loads(b"".join(chunks))
    except ValueError:
        raise RuntimeError(f"the watchdog of {len(commands)} command(s) ended without a report") from None
    return result


def run_commands(
    commands: list[dict],
    round_s: float,
    grace_s: float,
    poll_s: float = POLL_S,
    cwd: str | None = None,
    round_start: float | None = None,
) -> list[int]:
    """Start each {"command", "env"} (added to this process's environment) in its own process
    group (in `cwd` where this node has it: relative paths then mean what they meant to whoever
    ran the driver); SIGTERM at round_start + round_s - grace_s, SIGKILL at round_start + round_s
    (round_start: wall-clock time, default now). Returns the exit codes."""
    start = time.time() if round_start is None else round_start
    full = [{"command": c["command"], "env": {**os.environ, **c["env"]}} for c in commands]
    return run_watched(full, start + round_s - grace_s, start + round_s, cwd=cwd, poll_s=poll_s)["codes"]


def run_bundle(
    commands: list[dict], node: str, round_start: float, round_s: float, grace_s: float, cwd: str | None = None
) -> dict:
    """The Ray task of one bundle: its commands, each with ROTA_GPUS = the GPUs Ray gave this task
    (ray.get_gpu_ids(), as `node:gpu` with the bundle's planned node name). Nothing starts once
    the round's SIGTERM time has passed ({"late": True})."""
    import ray

    gpus = ",".join(f"{node}:{g}" for g in ray.get_gpu_ids())
    term_at, kill_at = round_start + round_s - grace_s, round_start + round_s
    if time.time() >= term_at:
        return {"late": True, "gpus": gpus, "codes": None}
    full = [
        {"command": c["command"], "env": {**os.environ, **c["env"], "ROTA_GPUS": gpus}, "log": c.get("log")}
        for c in commands
    ]
    return {**run_watched(full, term_at, kill_at, cwd=cwd), "gpus": gpus, "late": False}


class PlacementError(RuntimeError):
    """A group cannot be placed; the message names it and its jobs."""


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


def _ray_error_state(exc: BaseException) -> str:
    """The state of a bundle whose task raised `exc`: CANCELLED, FAILED (the task itself raised), LOST."""
    import ray.exceptions as rx

    if isinstance(exc, rx.TaskCancelledError):
        return "CANCELLED"
    if isinstance(exc, rx.RayTaskError) and not isinstance(exc, rx.WorkerCrashedError | rx.NodeDiedError):
        return "FAILED"
    return "LOST"


class GroupRun:
    """One placement group of a round and its tasks (one per bundle)."""

    def __init__(self, spec: dict, place_by: float, why_by: str):
        self.spec = spec
        self.name: str = spec["name"]
        self.pg: Any = None
        self.state = "placing"  # placing -> running -> done; or done at once (not placed)
        self.place_by, self.why_by = place_by, why_by
        self.refs: list[Any] = []
        self.nodes: list[str] = []  # Ray node id of each bundle
        self.results: dict[int, dict] = {}  # bundle -> what its task returned
        self.outcomes: dict[int, tuple[str, str]] = {}  # bundle -> (state, detail) where it has no exit codes
        self.error: str | None = None  # why it was not placed


class RoundRun:
    """One round on Ray, without blocking: `start()` creates the placement groups, `step()` moves
    every group on (starts the tasks of a group once it is placed, gives up on one not placed in
    time, collects answers, marks tasks on dead nodes LOST), `wait(until)` steps until everything
    ended or `until`, `cancel()` stops it, `report()` says what happened (round_report)."""

    def __init__(
        self,
        rnd: dict,
        plan: dict,
        round_start: float,
        placement_timeout_s: float | None = None,
        cwd: str | None = None,
        end_slack_s: float = END_SLACK_S,
    ):
        self.rnd, self.plan, self.round_start = rnd, plan, round_start
        self.round_s, self.grace_s = float(plan["round_s"]), float(plan["grace_s"])
        self.timeout = float(placement_timeout_s or plan.get("placement_timeout_s") or 120)
        self.cwd = cwd
        self.deadline = round_start + self.round_s + end_slack_s  # no wait goes past it
        self.groups: list[GroupRun] = []
        self._node_check = 0.0
        self._task: Any = None

    # ------------------------------------------------------------------ start
    def start(self) -> RoundRun:
        import ray
        from ray.util.placement_group import placement_group

        created = time.time()
        term_at = self.round_start + self.round_s - self.grace_s
        if created + self.timeout < term_at:
            place_by, why = created + self.timeout, f"not placed within {self.timeout:g} s (--placement-timeout)"
        else:
            place_by, why = term_at, "not placed before the round's SIGTERM time"
        totals = ray.cluster_resources()
        module = sys.modules.get(run_bundle.__module__)
        if module is not None and run_bundle.__module__ != "__main__":  # imported (rota run): send it by value,
            ray.cloudpickle.register_pickle_by_value(module)  # workers need not import rota
        self._task = ray.remote(run_bundle)
        for g in self.rnd["groups"]:
            run = GroupRun(g, place_by, why)
            self.groups.append(run)
            lacking = missing_resources([g], totals)
            if lacking:  # it can never be placed: refused at once
                self._give_up(run, f"cannot place {lacking[0]}")
                continue
            run.pg = placement_group(g["bundles"], strategy=g["strategy"], name=g["name"])
        return self

    # ------------------------------------------------------------------ progress
    @property
    def done(self) -> bool:
        return all(g.state == "done" for g in self.groups)

    def step(self) -> bool:
        """Move every group on; True when nothing of the round runs any more."""
        now = time.time()
        for g in self.groups:
            if g.state == "placing":
                self._place(g, now)
        self._collect_answers()
        if now >= self._node_check + NODE_CHECK_S and any(g.state == "running" for g in self.groups):
            self._node_check = now
            self._check_nodes()
        if now >= self.deadline:
            for g in self.groups:
                if g.state == "running":
                    self._end_group(
                        g,
                        "LOST",
                        f"no answer from its task {now - self.round_start - self.round_s:.0f} s after the round's end",
                    )
        return self.done

    def wait(self, until: float) -> bool:
        """Step until everything ended or the wall-clock time `until` (never past the round's deadline)."""
        until = min(until, self.deadline + 1)
        while not self.step() and time.time() < until:
            time.sleep(min(POLL_S, max(0.0, until - time.time())))
        return self.done

    def _place(self, g: GroupRun, now: float) -> None:
        from ray.util.placement_group import placement_group_table

        table = placement_group_table(g.pg)
        if table.get("state") == "CREATED":
            self._start_tasks(g, table)
        elif now >= g.place_by:
            self._give_up(g, f"{g.why_by}: {_describe(g.spec)}")

    def _give_up(self, g: GroupRun, why: str) -> None:
        g.error = f"round {self.rnd['index']}: {why}"
        g.outcomes = {i: ("NOT_RUN", why) for i in range(len(g.spec["bundles"]))}
        self._release(g)

    def _start_tasks(self, g: GroupRun, table: dict) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        by_node = table.get("bundles_to_node_id") or {}
        g.nodes = [by_node.get(i, "") for i in range(len(g.spec["bundles"]))]
        addresses = {n["NodeID"]: n.get("NodeManagerAddress", "") for n in ray.nodes()}
        master = addresses.get(g.nodes[0], "")  # the gang contract: every node learns rank 0's address
        for i, bundle in enumerate(g.spec["bundles"]):
            gang = {"ROTA_NODE_RANK": str(i), "ROTA_NUM_NODES": str(len(g.spec["bundles"])), "ROTA_MASTER_ADDR": master}
            commands = [
                {"command": j["command"], "env": {**j["env"], **gang}, "log": j.get("log")} for j in g.spec["jobs"]
            ]
            resources = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
            g.refs.append(
                self._task.options(
                    num_cpus=bundle.get("CPU", 0),
                    num_gpus=bundle["GPU"],
                    max_retries=0,  # never a second run of a job in its round
                    retry_exceptions=False,
                    resources=resources,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(g.pg, placement_group_bundle_index=i),
                ).remote(commands, g.spec["nodes"][i], self.round_start, self.round_s, self.grace_s, self.cwd)
            )
        g.state = "running"

    def _collect_answers(self) -> None:
        import ray

        pending = [(g, i, ref) for g in self.groups if g.state == "running" for i, ref in enumerate(g.refs)]
        pending = [(g, i, ref) for g, i, ref in pending if i not in g.results and i not in g.outcomes]
        if not pending:
            return
        ready, _ = ray.wait([ref for _, _, ref in pending], num_returns=len(pending), timeout=0)
        ready_set = set(ready)
        for g, i, ref in pending:
            if ref not in ready_set:
                continue
            try:
                answer = ray.get(ref, timeout=5)
            except ray.exceptions.GetTimeoutError:
                continue
            except ray.exceptions.RayError as exc:
                state = _ray_error_state(exc)
                g.outcomes[i] = (state, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}")
                if state == "LOST":  # the rest of a broken gang stops too
                    self._cancel_refs(g)
                continue
            if answer.get("late"):
                g.outcomes[i] = ("NOT_RUN", "placed after the round's SIGTERM time")
            else:
                g.results[i] = answer
        for g in self.groups:
            if g.state == "running" and all(i in g.results or i in g.outcomes for i in range(len(g.refs))):
                g.state = "done"
                self._release(g)

    def _check_nodes(self) -> None:
        import ray

        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        for g in self.groups:
            if g.state != "running":
                continue
            dead = [i for i, node in enumerate(g.nodes) if node and node not in alive and i not in g.results]
            if dead:
                for i in dead:
                    g.outcomes[i] = ("LOST", f"node {g.spec['nodes'][i]} died (Ray node {g.nodes[i][:12]})")
                self._end_group(g, "LOST", f"another node of the gang ({g.spec['nodes'][dead[0]]}) died")

    def _end_group(self, g: GroupRun, state: str, detail: str) -> None:
        """Stop a running group now: its unanswered tasks get `state`, their processes are killed
        (a cancelled task's worker dies; its watchdog then kills the jobs)."""
        self._cancel_refs(g)
        for i in range(len(g.refs)):
            if i not in g.results:
                g.outcomes.setdefault(i, (state, detail))
        g.state = "done"
        self._release(g)

    def _cancel_refs(self, g: GroupRun) -> None:
        import ray

        for i, ref in enumerate(g.refs):
            if i not in g.results and i not in g.outcomes:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # already finished, or its worker is gone
                    pass

    def _release(self, g: GroupRun) -> None:
        g.state = "done"
        if g.pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(g.pg)
            except Exception:  # already removed, or the GCS is unreachable: nothing more to do
                pass
            g.pg = None

    def cancel(self, why: str = "cancelled") -> None:
        """Stop the round now: running tasks are CANCELLED (force: their workers die, the watchdogs
        kill the jobs), groups not yet placed are NOT_RUN; every placement group is removed."""
        for g in self.groups:
            if g.state == "placing":
                g.outcomes = {i: ("NOT_RUN", f"{why} before it was placed") for i in range(len(g.spec["bundles"]))}
                self._release(g)
            elif g.state == "running":
                self._end_group(g, "CANCELLED", why)

    def finish(self) -> dict:
        """Wait (at most until the round's deadline) for what still runs, then the report."""
        self.wait(self.deadline)
        self.step()
        return self.report()

    def report(self) -> dict:
        codes, outcomes, gpus = {}, {}, {}
        for g in self.groups:
            for i, answer in g.results.items():
                codes[f"{g.name}/{i}"] = answer["codes"]
                gpus[f"{g.name}/{i}"] = answer.get("gpus")
            for i, outcome in g.outcomes.items():
                outcomes[f"{g.name}/{i}"] = outcome
        errors = [g.error for g in self.groups if g.error]
        report = round_report(
            self.rnd, codes, self.round_start, "; ".join(errors) or None, outcomes=outcomes, gpus=gpus
        )
        report["placement_errors"] = errors
        return report


STATE_FORMAT = "rota.ray-state/v1"
_WORST = ("LOST", "CANCELLED", "NOT_RUN")


def job_state(codes: list[int | None]) -> str:
    if all(c == 0 for c in codes):
        return "COMPLETED"
    return "KILLED" if -signal.SIGKILL in codes else "FAILED"


def round_report(
    rnd: dict,
    codes: dict[str, list],
    started_at: float,
    error: str | None = None,
    *,
    outcomes: dict[str, tuple[str, str]] | None = None,
    gpus: dict[str, str | None] | None = None,
) -> dict:
    """What happened to each job of a round: `codes` maps "<group>/<bundle>" to the exit codes of
    that bundle's commands (in the order of the group's jobs); `outcomes` maps a bundle without
    exit codes to (state, detail): LOST, CANCELLED or NOT_RUN (the default for a bundle in neither).
    A job is LOST if any node of it was lost, else CANCELLED, else NOT_RUN; with exit codes from
    every node: COMPLETED, KILLED or FAILED."""
    outcomes, gpus = outcomes or {}, gpus or {}
    jobs = []
    for g in rnd["groups"]:
        keys = [f"{g['name']}/{i}" for i in range(len(g["bundles"]))]
        per_node = [codes.get(k) for k in keys]
        missing = [outcomes.get(k, ("NOT_RUN", "")) for k, c in zip(keys, per_node) if c is None]
        for k, j in enumerate(g["jobs"]):
            exits = [node[k] for node in per_node if node is not None]
            if missing:
                state = next(s for s in _WORST if s in {m[0] for m in missing})
                detail = "; ".join(sorted({m[1] for m in missing if m[0] == state and m[1]}))
            else:
                state, detail = job_state(exits), ""
            entry = {"job_id": j["job_id"], "group": g["name"], "state": state, "exit_codes": exits}
            if detail:
                entry["detail"] = detail
            if any(gpus.get(key) for key in keys):
                entry["gpus"] = [gpus.get(key) for key in keys]
            jobs.append(entry)
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


def run_round(
    rnd: dict, plan: dict, placement_timeout_s: float | None = None, round_start: float | None = None
) -> dict:
    """One round, start to end (the round's clock from `round_start`, default now): its report, with
    "interrupted": True where Ctrl-C stopped it (its running jobs CANCELLED, the others NOT_RUN)."""
    run = RoundRun(rnd, plan, time.time() if round_start is None else round_start, placement_timeout_s, os.getcwd())
    try:
        run.start()
        return {**run.finish(), "interrupted": False}
    except KeyboardInterrupt:
        run.cancel("interrupted (Ctrl-C)")
        return {**run.report(), "interrupted": True}
    except BaseException:  # Ray failing under us: stop what runs, remove the groups
        run.cancel("interrupted")
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("--round", type=int, action="append", help="run only this round index (repeatable)")
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    parser.add_argument(
        "--placement-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a round's placement group may wait to be placed (default: the plan's placement_timeout_s)",
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
    refused = connect_ray(args.address, logging_level=logging.ERROR)
    if refused:
        print(f"error: {refused}", file=sys.stderr, flush=True)
        return 2
    done: list[dict] = []
    status = 0
    for rnd in rounds:
        report = run_round(rnd, plan, args.placement_timeout)
        interrupted = report.pop("interrupted")
        done.append(report)
        for error in report.pop("placement_errors"):
            print(f"error: {error}", file=sys.stderr, flush=True)
            status = 2
        failed = [f"{j['job_id']} {j['state']}" for j in report["jobs"] if j["state"] != "COMPLETED"]
        status = max(status, 1) if failed else status
        summary = ", ".join(f"{j['job_id']}={j['state']}{j['exit_codes']}" for j in report["jobs"])
        print(
            f"round {rnd['index']}: {summary or 'no jobs'} ({report['ended_at'] - report['started_at']:.1f} s)",
            flush=True,
        )
        if failed:
            print(f"round {rnd['index']}: not completed: {', '.join(failed)} (see {report_path})", file=sys.stderr)
        if interrupted:
            status = 130
        write_report(report_path, {"format": STATE_FORMAT, "exit_status": status, "rounds": done})
        if interrupted:
            print(f"round {rnd['index']}: interrupted; its jobs were stopped (see {report_path})", file=sys.stderr)
            return status
    print(f"wrote {report_path}; exit status {status}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
