"""Run the rounds of a rota Kubernetes export (written by `rota export kubernetes`); driver.sh calls it.

    python3 kubernetes_driver.py k8s_rounds.json               every round, in order
    python3 kubernetes_driver.py k8s_rounds.json round-0003    one round (the next-round loop)

Per round: `kubectl apply` its manifests, then keep the round's clock itself. Kubernetes counts a
pod's `activeDeadlineSeconds` from the pod's own start (status.startTime), not from the round's,
so a pod that waited for its gang or its image would overrun the round. The driver therefore
polls the round's pods (`kubectl get pods -l rota/round=N -o json`) and, as each one starts,
lowers its activeDeadlineSeconds so that it ends at round start + round_s - grace_s: the kubelet
then sends SIGTERM there, SIGKILL grace_s later, and keeps the pod with its exit code (phase
Failed, reason DeadlineExceeded). The deadline written in the manifest (round_s - grace_s) is
only the safety net for a pod the driver never saw. At the round's end (or once every pod has
ended) each job's state goes into a JSON report (`state_file` of the plan, or STATE_FILE), a
`job=STATE` line per job is printed, and the round's objects are deleted.

States: COMPLETED (every pod exited 0, also after the round's SIGTERM), FAILED (a non-zero exit
of its own), KILLED (still running at the round's end, or killed by a signal at the deadline),
LOST (evicted, node lost or shut down), NOT_RUN (no pod started), CANCELLED (deleted by someone
else, or the round interrupted).

Exit status: 0 every job completed; 1 a job did not; 2 `kubectl apply` failed (the round's
objects were deleted) or no such round; 128 + N after signal N (the round's objects were
deleted). ROUND_S and GRACE_S override the plan's times, KUBECTL the kubectl command,
POLL_S the seconds between polls.

Copied next to the manifests; Python 3 standard library only, nothing from rota (rota's own
Kubernetes launcher imports the functions above `main` from here, so the two agree).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from typing import Any

STATE_FORMAT = "rota.k8s-state/v1"
ROUNDS_FORMAT = "rota.k8s-rounds/v1"
ROUND_LABEL = "rota/round"
ASSIGNMENT_LABEL = "rota/assignment"
TOOL_TIMEOUT_S = 60
SETTLE_S = 30  # after the round's end: how long to wait for pods the kubelet is still stopping
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Pod status reasons (and DisruptionTarget conditions) that mean the node or the cluster lost the pod.
LOST_REASONS = frozenset({"Evicted", "NodeLost", "Shutdown", "Terminated", "NodeShutdown", "NodeAffinity"})
# How bad each state is: the state of a job with several pods is its worst pod's.
SEVERITY = ("FAILED", "LOST", "KILLED", "CANCELLED", "NOT_RUN", "COMPLETED")
FINAL = frozenset(SEVERITY)
SIGNAL_EXITS = frozenset({137, 143})  # 128 + SIGKILL, 128 + SIGTERM


# --------------------------------------------------------------------------- pure functions


def epoch(stamp: Any) -> float | None:
    """An RFC 3339 time of the API ('2024-05-01T10:00:00Z') as seconds since the epoch."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()  # noqa: UP017 - any Python 3
    except ValueError:
        return None


def items(doc: Any) -> list[dict]:
    """The objects of a `kubectl get ... -o json` List (an empty list for anything else)."""
    found = doc.get("items") if isinstance(doc, dict) else None
    return [i for i in found if isinstance(i, dict)] if isinstance(found, list) else []


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def pod_facts(pod: dict) -> dict:
    """What the state report needs of one pod (from `kubectl get pods -o json`)."""
    status: dict = pod["status"] if isinstance(pod.get("status"), dict) else {}
    containers = [c for c in status.get("containerStatuses") or [] if isinstance(c, dict)]
    codes, reasons, started = [], [], bool(status.get("startTime")) and status.get("phase") != "Pending"
    for c in containers:
        term = _get(c, "state", "terminated") or _get(c, "lastState", "terminated")
        if isinstance(term, dict):
            started = True
            if isinstance(term.get("exitCode"), int):
                codes.append(term["exitCode"])
            if term.get("reason"):
                reasons.append(str(term["reason"]))
        elif _get(c, "state", "running") is not None:
            started = True
    disrupted = [
        str(c.get("reason") or "DisruptionTarget")
        for c in status.get("conditions") or []
        if isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status") == "True"
    ]
    labels = _get(pod, "metadata", "labels") or {}
    return {
        "name": _get(pod, "metadata", "name"),
        "assignment": labels.get(ASSIGNMENT_LABEL) if isinstance(labels, dict) else None,
        "node": _get(pod, "spec", "nodeName"),
        "phase": status.get("phase") or "Unknown",
        "reason": status.get("reason") or (disrupted[0] if disrupted else None),
        "lost": status.get("reason") in LOST_REASONS or bool(disrupted),
        "started": started,
        "deleting": _get(pod, "metadata", "deletionTimestamp") is not None,
        "exit_code": next((c for c in codes if c != 0), codes[0] if codes else None),
        "container_reason": next((r for r in reasons if r not in ("Completed", "Error")), None),
    }


def pod_state(facts: dict, *, round_over: bool, vanished: bool = False, deleted_by_us: bool = False) -> str:
    """One pod's state: a final one (SEVERITY) or RUNNING / PENDING while the round goes on.
    `vanished`: listed earlier, gone now; `deleted_by_us`: the launcher deleted the round."""
    phase, code = facts["phase"], facts["exit_code"]
    if phase == "Succeeded":
        return "COMPLETED"
    if phase == "Failed":
        if facts["lost"]:
            return "LOST"
        if facts["reason"] == "DeadlineExceeded":  # stopped at the round's deadline
            if code == 0:
                return "COMPLETED"  # it checkpointed and exited at SIGTERM, as the contract asks
            return "KILLED" if code is None or code in SIGNAL_EXITS else "FAILED"
        return "FAILED"
    if phase == "Unknown":
        return "LOST"
    if facts["lost"]:
        return "LOST"
    if vanished or facts["deleting"]:
        if not facts["started"]:
            return "NOT_RUN" if deleted_by_us else "CANCELLED"
        return "CANCELLED"
    if round_over:
        return "KILLED" if facts["started"] else "NOT_RUN"
    return "RUNNING" if facts["started"] else "PENDING"


def deadline_patches(pods_doc: Any, deadline: float) -> list[tuple[str, int]]:
    """(pod, activeDeadlineSeconds) for each started, unfinished pod whose deadline, counted from its
    own start, would end it after `deadline` (wall time): the value that ends it at `deadline`
    instead (at least 1; Kubernetes lets a running pod's deadline be lowered, never raised)."""
    out = []
    for pod in items(pods_doc):
        start = epoch(_get(pod, "status", "startTime"))
        name = _get(pod, "metadata", "name")
        if start is None or not isinstance(name, str) or _get(pod, "status", "phase") not in ("Pending", "Running"):
            continue
        if _get(pod, "metadata", "deletionTimestamp") is not None:
            continue
        want = max(1, math.ceil(deadline - start))
        current = _get(pod, "spec", "activeDeadlineSeconds")
        if not isinstance(current, int) or want < current:
            out.append((name, want))
    return out


class Watch:
    """The pods of one round over successive listings: the latest view of each pod, and the pods that
    vanished (listed once, gone since). `expected`: assignment -> (job ids, number of pods)."""

    def __init__(self, expected: dict[str, tuple[list[str], int]]):
        self.expected = expected
        self.pods: dict[str, dict] = {}  # pod name -> facts
        self.vanished: set[str] = set()
        self.deleted_by_us = False

    def update(self, pods_doc: Any) -> None:
        now = {}
        for pod in items(pods_doc):
            facts = pod_facts(pod)
            if isinstance(facts["name"], str) and facts["assignment"] in self.expected:
                now[facts["name"]] = facts
        self.vanished |= set(self.pods) - set(now)
        self.vanished -= set(now)
        self.pods.update(now)

    def _state(self, name: str, round_over: bool) -> str:
        return pod_state(
            self.pods[name], round_over=round_over, vanished=name in self.vanished, deleted_by_us=self.deleted_by_us
        )

    def running(self) -> bool:
        """A pod still runs (or waits) as far as the latest listing says."""
        return any(self._state(n, round_over=False) not in FINAL for n in self.pods)

    def started_running(self) -> bool:
        """A pod that started still runs, as far as the latest listing says."""
        return any(self._state(n, round_over=False) == "RUNNING" for n in self.pods)

    def all_ended(self) -> bool:
        """Every expected pod has been seen and has ended."""
        counts: dict[str, int] = {}
        for facts in self.pods.values():
            counts[facts["assignment"]] = counts.get(facts["assignment"], 0) + 1
        if any(counts.get(a, 0) < n for a, (_, n) in self.expected.items()):
            return False
        return not self.running()

    def jobs(self, round_over: bool = True) -> list[dict]:
        """Each job's state, exit code and pods (a job shares its pods' outcome: co-located jobs run in one
        container, whose wrapper exits with the first failure)."""
        out = []
        for assignment, (job_ids, n_pods) in self.expected.items():
            pods = [(n, f) for n, f in sorted(self.pods.items()) if f["assignment"] == assignment]
            states = [self._state(n, round_over) for n, _ in pods]
            if len(pods) < n_pods:  # a pod never created: the gang was not admitted (or not in time)
                states.append("NOT_RUN")
            state = min(states, key=lambda s: SEVERITY.index(s) if s in SEVERITY else len(SEVERITY))
            codes = [f["exit_code"] for _, f in pods if f["exit_code"] is not None]
            code = next((c for c in codes if c != 0), codes[0] if codes else None)
            detail = "; ".join(
                f"{n}: {f['phase']}"
                + (f" ({f['reason']})" if f["reason"] else "")
                + (f" [{f['container_reason']}]" if f["container_reason"] else "")
                for n, f in pods
            )
            if len(pods) < n_pods:
                detail = (detail + "; " if detail else "") + f"{n_pods - len(pods)} of {n_pods} pod(s) never created"
            pod_list = [
                {"name": n, "node": f["node"], "phase": f["phase"], "reason": f["reason"], "exit_code": f["exit_code"]}
                for n, f in pods
            ]
            for job_id in job_ids:
                out.append(
                    {
                        "job_id": job_id,
                        "assignment": assignment,
                        "state": state,
                        "exit_code": code,
                        "detail": detail,
                        "pods": pod_list,
                    }
                )
        return out


def printable(text: str) -> str:
    """A job id for one output line (characters that are not printable as escapes)."""
    return text if text.isprintable() else "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


# --------------------------------------------------------------------------- the driver


class Interrupted(Exception):
    def __init__(self, number: int) -> None:
        super().__init__(f"signal {number}")
        self.number = number


def _interrupt(number: int, _frame: Any) -> None:
    raise Interrupted(number)


class Kubectl:
    def __init__(self, namespace: str | None):
        self.base = shlex.split(os.environ.get("KUBECTL") or "kubectl")
        self.ns = ["--namespace", namespace] if namespace else []
        self.warned: set[str] = set()

    def run(self, *args: str) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(
                [*self.base, *self.ns, *args], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return subprocess.CompletedProcess(args, 1, "", str(exc))

    def pods(self, index: int) -> Any:
        out = self.run("get", "pods", "-l", f"{ROUND_LABEL}={index}", "-o", "json")
        try:
            return json.loads(out.stdout) if out.returncode == 0 else None
        except ValueError:
            return None

    def warn(self, key: str, message: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            print(f"warning: {message}", file=sys.stderr, flush=True)


def write_json(path: str, document: dict) -> None:
    """Atomically (a reader never sees half a report); a failure is a warning, not an error."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)
            handle.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        print(f"warning: cannot write the state report {path}: {exc}", file=sys.stderr, flush=True)


class Round:
    def __init__(self, spec: dict, kubectl: Kubectl, round_s: float, grace_s: float, poll_s: float) -> None:
        self.spec, self.kubectl = spec, kubectl
        self.round_s, self.grace_s, self.poll_s = round_s, grace_s, poll_s
        self.watch = Watch({o["name"]: (list(o["jobs"]), int(o["pods"])) for o in spec["objects"]})
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.error: str | None = None
        self.applied = False

    def poll(self, deadline: float) -> None:
        doc = self.kubectl.pods(self.spec["index"])
        if doc is None:
            self.kubectl.warn("get", f"cannot list the pods of {self.spec['dir']} (kubectl get pods failed)")
            return
        self.watch.update(doc)
        for name, seconds in deadline_patches(doc, deadline):
            patch = json.dumps({"spec": {"activeDeadlineSeconds": seconds}})
            out = self.kubectl.run("patch", "pod", name, "--type=merge", "-p", patch)
            if out.returncode != 0:
                self.kubectl.warn(
                    "patch",
                    f"cannot lower the deadline of pod {name} ({out.stderr.strip()[:200]}); "
                    "pods that started late run until the round's end",
                )

    def run(self) -> None:
        self.started_at = start = time.time()
        deadline, end = start + self.round_s - self.grace_s, start + self.round_s
        if self.spec["objects"]:
            out = self.kubectl.run("apply", "-f", self.spec["dir"])
            self.applied = True
            if out.returncode != 0:
                raise RuntimeError(f"kubectl apply -f {self.spec['dir']} failed: {out.stderr.strip()[:500]}")
        while self.spec["objects"]:
            self.poll(deadline)
            now = time.time()
            if self.watch.all_ended() or now >= end:
                break
            time.sleep(max(0.0, min(self.poll_s, end - now)))
        settle = time.time() + SETTLE_S
        while self.watch.started_running() and time.time() >= end and time.time() < settle:
            time.sleep(min(self.poll_s, 2.0))  # the kubelet is still stopping a pod (its SIGKILL is due at the end)
            self.poll(deadline)
        self.ended_at = time.time()
        self.delete()

    def delete(self) -> None:
        if self.applied:
            self.kubectl.run("delete", "-f", self.spec["dir"], "--ignore-not-found", "--wait=false")

    def abort(self, reason: str) -> None:
        """Delete the round's objects (SIGTERM, then SIGKILL after the grace period) and note their state."""
        self.error = reason
        self.watch.deleted_by_us = True
        self.delete()
        doc = self.kubectl.pods(self.spec["index"])
        if doc is not None:
            self.watch.update(doc)
        self.ended_at = time.time()

    def report(self) -> dict:
        return {
            "round": self.spec["dir"],
            "index": self.spec["index"],
            "applied_at": self.started_at,
            "deadline_at": self.started_at + self.round_s - self.grace_s,
            "ended_at": self.ended_at,
            "error": self.error,
            "jobs": self.watch.jobs(round_over=True),
        }


def select_rounds(plan: dict, wanted: list[str]) -> list[dict]:
    by_dir = {r["dir"]: r for r in plan["rounds"]}
    unknown = [w for w in wanted if w.rstrip("/") not in by_dir]
    if unknown:
        print(f"error: no such round: {', '.join(unknown)} (this export has {', '.join(by_dir)})", file=sys.stderr)
        raise SystemExit(2)
    return [by_dir[w.rstrip("/")] for w in wanted] if wanted else plan["rounds"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as handle:
        plan = json.load(handle)
    rounds = select_rounds(plan, args[1:])
    round_s = float(os.environ.get("ROUND_S") or plan["round_s"])
    grace_s = min(float(os.environ.get("GRACE_S") or plan["grace_s"]), round_s)
    poll_s = float(os.environ.get("POLL_S") or 5)
    report_path = os.environ.get("STATE_FILE") or plan["state_file"]
    kubectl = Kubectl(plan.get("namespace"))
    for number in STOP_SIGNALS:
        signal.signal(number, _interrupt)
    done: list[dict] = []
    status = 0
    current: Round | None = None
    try:
        for spec in rounds:
            current = Round(spec, kubectl, round_s, grace_s, poll_s)
            current.run()
            done.append(current.report())
            current = None
            if not all(j["state"] == "COMPLETED" for j in done[-1]["jobs"]):
                status = 1
            write_json(report_path, {"format": STATE_FORMAT, "exit_status": status, "rounds": done})
    except (RuntimeError, Interrupted) as exc:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish the clean-up
        status = 128 + exc.number if isinstance(exc, Interrupted) else 2
        if current is not None:
            current.abort(str(exc))
            done.append(current.report())
        print(f"error: {exc}; deleted the round's objects", file=sys.stderr, flush=True)
        write_json(report_path, {"format": STATE_FORMAT, "exit_status": status, "rounds": done})
    for rnd in done:
        print(f"{rnd['round']}: {len(rnd['jobs'])} job(s)", flush=True)
        for job in rnd["jobs"]:
            print(f"{printable(job['job_id'])}={job['state']}", flush=True)
    print(f"wrote {report_path}; exit status {status}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
