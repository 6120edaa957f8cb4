"""Run the rounds of a rota Slurm export (written by `rota export slurm`); driver.sh calls it.

    python3 slurm_driver.py slurm_rounds.json               every round, in order
    python3 slurm_driver.py slurm_rounds.json round-0003    one round (the next-round loop)

Per round: submit its batch scripts (uneven gangs last), then keep the round's clock itself,
because Slurm's own is coarse (`--time` in whole minutes, `--signal` up to a minute early):

* at round_s - grace_s after the submission, SIGTERM to every running job's processes (they
  checkpoint) and cancel what has not started yet;
* at round_s, cancel whatever still runs (Slurm's SIGTERM, then SIGKILL after its KillWait);
* the round is over once no job is left in the queue.

Then each job's state and exit code go into a JSON report (`state_file` of the plan, or
STATE_FILE). Exit status: 0 every job completed; 1 a job failed, was cancelled, did not run or is unknown;
2 a submission failed (the round's jobs were cancelled) or no such round; 128 + N after
signal N (SIGINT, SIGTERM, SIGHUP: the jobs were cancelled). ROUND_S and GRACE_S override the
plan's times.

Copied next to the scripts; Python 3 standard library only, nothing from rota.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

STATE_FORMAT = "rota.slurm-state/v1"
# Job states of a job that has not ended yet (squeue's long names).
ACTIVE = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
}
POLL_S = 0.5
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SETTLE_S = 60  # after the round's end: how long to wait for killed jobs to leave the queue
TOOL_TIMEOUT_S = 30


class Interrupted(Exception):
    def __init__(self, number: int) -> None:
        super().__init__(f"signal {number}")
        self.number = number


class SubmitError(Exception):
    pass


def _interrupt(number: int, _frame: object) -> None:
    raise Interrupted(number)


def run_tool(args: list[str], cwd: str | None = None) -> subprocess.CompletedProcess:
    """A Slurm command; a missing or hanging one reads as a failed one."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(args, 127, "", str(exc))


def submit(script: str, cwd: str | None = None) -> str:
    out = run_tool(["sbatch", "--parsable", script], cwd)
    job_id = out.stdout.strip().split(";")[0]
    if out.returncode != 0 or not job_id:
        raise SubmitError(f"sbatch {script} failed: {(out.stderr or out.stdout).strip()}")
    return job_id


def queue_states(ids: list[str]) -> dict[str, str] | None:
    """Slurm's state of each job it still lists; None when squeue failed."""
    out = run_tool(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T"])
    if out.returncode != 0:
        return None
    states = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def active(ids: list[str]) -> list[str] | None:
    states = queue_states(ids)
    if states is None:
        return None
    return [i for i in ids if states.get(i) in ACTIVE]


def pending(ids: list[str]) -> list[str]:
    """The jobs that still wait to start."""
    states = queue_states(ids)
    return [i for i in ids if (states or {}).get(i) == "PENDING"]


def signal_running(ids: list[str], name: str) -> None:
    """`name` to every process of the jobs that run (not the batch shells: their srun waits);
    jobs that still wait to start are cancelled. --state keeps scancel from retrying on them."""
    run_tool(["scancel", "--state=RUNNING", f"--signal={name}", *ids])
    run_tool(["scancel", "--state=PENDING", *ids])


def cancel(ids: list[str]) -> None:
    """Slurm's cancel: SIGTERM to every process, SIGKILL KillWait seconds later (30 by default;
    a SIGKILL from scancel is a cancel too, so nothing ends a job sooner)."""
    if ids:
        run_tool(["scancel", *ids])


def final_state(job_id: str) -> dict:
    """State, exit code and start time (Slurm's local time, as scontrol prints it) from slurmctld
    (which remembers ended jobs for MinJobAge, 300 s by default); UNKNOWN when it no longer knows
    the job. The start time tells a job that started late in its round from one that crashed."""
    out = run_tool(["scontrol", "show", "-o", "job", job_id])
    fields = dict(t.split("=", 1) for t in out.stdout.split() if "=" in t) if out.returncode == 0 else {}
    code, _, sig = fields.get("ExitCode", "").partition(":")
    return {
        "state": fields.get("JobState", "UNKNOWN"),
        "exit_code": int(code) if code.isdigit() else None,
        "signal": int(sig) if sig.isdigit() else None,
        "start_time": fields.get("StartTime"),
    }


def slurm_time(text: object) -> float | None:
    """A time as scontrol prints it ('2026-12-07T12:46:00', this machine's local time) as seconds
    since the epoch; None for 'Unknown', 'None' or anything else."""
    if not isinstance(text, str):
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def started_too_late(state: dict, signalled_at: float | None, grace_s: float) -> float | None:
    """Seconds between Slurm's start of a job and the round's SIGTERM, when the job got less than
    the grace period before it and then died of it (exit 143) or outlived the round (KILLED): a
    job that late (Slurm was slow, or its nodes were busy) had no fair chance to set its handler,
    so its end says nothing about the job. None otherwise (the end stands as Slurm gave it)."""
    died_of_it = state["state"] in ("FAILED", "COMPLETED") and state.get("exit_code") == 143
    if signalled_at is None or not (died_of_it or state["state"] == "KILLED"):
        return None
    started = slurm_time(state.get("start_time"))
    if started is None or signalled_at - started >= grace_s:
        return None
    return max(0.0, signalled_at - started)


def write_json(path: str, document: dict) -> None:
    """Atomically (a reader never sees half a report); a failure is a warning, not an error."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)
            handle.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        print(f"warning: cannot write the state report {path}: {exc}", file=sys.stderr, flush=True)


class Round:
    """One round: `start()` submits its scripts, `poll(until)` keeps its clock until `until` (or until
    no job is left in the queue), `report()` says what became of each job. `run()` does all three.

    What the driver did to a job decides how its end reads: cancelled while it still waited to
    start is NOT_RUN, and so is a job Slurm started too late to take the round's SIGTERM
    (`started_too_late`; `late_start_s` says how long it had); cancelled at the round's end (it
    outlived its grace) is KILLED, cancelled by anyone else (an operator's scancel) stays
    CANCELLED; `ended_at` is when the last job left."""

    def __init__(self, spec: dict, round_s: float, grace_s: float, cwd: str | None = None) -> None:
        self.spec = spec
        self.round_s = round_s
        self.grace_s = grace_s
        self.cwd = cwd  # where the scripts' relative paths (and their logs/) are
        self.submitted: list[tuple[dict, str]] = []  # (script entry, Slurm job id)
        self.states: dict[str, dict] = {}  # Slurm job id -> final state, read as the job leaves the queue
        self.never_started: set[str] = set()  # cancelled by the driver while pending
        self.killed: set[str] = set()  # cancelled by the driver at the round's end
        self.started_at = time.time()
        self.signalled_at: float | None = None
        self.deadline_at: float | None = None  # when the driver cancelled what still ran
        self.ended_at: float | None = None
        self.error: str | None = None
        self.left: list[str] = []

    @property
    def ids(self) -> list[str]:
        return [job_id for _, job_id in self.submitted]

    def submit_all(self) -> None:
        """Submit the scripts in order; a signal meanwhile waits until the job id is noted."""
        for entry in self.spec["scripts"]:
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                self.submitted.append((entry, submit(entry["script"], self.cwd)))
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def start(self, started_at: float | None = None) -> None:
        """Submit the round. Its clock runs from `started_at` (time.time(); default: now)."""
        self.started_at = time.time() if started_at is None else started_at
        self.submit_all()
        self.left = list(self.ids)

    def wait(self, left: list[str], until: float) -> list[str]:
        """Poll the queue once (sleeping until `until` at most, time.time()); note the final
        state of each job that left it."""
        time.sleep(max(0.0, min(POLL_S, until - time.time())))
        still = active(left)
        if still is None:  # squeue failed: ask again next time
            return left
        for job_id in left:
            if job_id not in still:
                self.states[job_id] = final_state(job_id)
        return still

    def poll(self, until: float) -> bool:
        """Keep the round's clock until `until` (time.time()) or until no job is left; True when the
        round is over (every job left the queue, or SETTLE_S after its end some still did not)."""
        signal_at = self.started_at + self.round_s - self.grace_s
        end_at = self.started_at + self.round_s
        while self.left:
            now = time.time()
            if now >= end_at + SETTLE_S:
                print(f"{self.spec['dir']}: still in the queue: {','.join(self.left)}", file=sys.stderr, flush=True)
                break
            if now >= end_at and self.deadline_at is None:
                self.deadline_at = now
                self.killed.update(self.left)
                cancel(self.left)
            elif now >= signal_at and self.signalled_at is None:
                self.signalled_at = now
                self.never_started.update(pending(self.left))
                signal_running(self.left, "TERM")
            if now >= until:
                return False
            self.left = self.wait(self.left, min(until, signal_at if self.signalled_at is None else end_at))
        if self.ended_at is None:
            self.ended_at = time.time()
        return True

    def run(self) -> None:
        self.start()
        print(f"{self.spec['dir']}: submitted {len(self.ids)} job(s): {','.join(self.ids)}", flush=True)
        self.poll(float("inf"))

    def abort(self, reason: str) -> None:
        """Cancel every job of the round and wait (briefly) until they have left the queue."""
        self.error = reason
        cancel(self.ids)
        left, deadline = list(self.ids), time.time() + 15
        while left and time.time() < deadline:
            left = self.wait(left, deadline)
        self.left = []
        self.ended_at = time.time()

    def outcome(self, slurm_id: str, state: dict) -> str:
        """Slurm's state, told apart where CANCELLED covers different ends."""
        if state["state"].startswith("CANCELLED"):
            if slurm_id in self.never_started:
                return "NOT_RUN"
            if slurm_id in self.killed:
                return "KILLED"
        return state["state"]

    def report(self) -> dict:
        jobs = []
        for entry, slurm_id in self.submitted:
            state = self.states.get(slurm_id) or final_state(slurm_id)
            state = {**state, "state": self.outcome(slurm_id, state), "slurm_state": state["state"]}
            state["late_start_s"] = started_too_late(state, self.signalled_at, self.grace_s)
            if state["late_start_s"] is not None:
                state["state"] = "NOT_RUN"
            for job_id in entry["jobs"]:
                jobs.append({"job_id": job_id, "slurm_job_id": slurm_id, "script": entry["script"], **state})
        return {
            "round": self.spec["dir"],
            "index": self.spec["index"],
            "submitted_at": self.started_at,
            "signalled_at": self.signalled_at,
            "deadline_at": self.deadline_at,
            "ended_at": self.ended_at,
            "error": self.error,
            "jobs": jobs,
        }


def succeeded(job: dict) -> bool:
    return job["state"] == "COMPLETED" and job["exit_code"] == 0


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
    report_path = os.environ.get("STATE_FILE") or plan["state_file"]
    os.makedirs("logs", exist_ok=True)
    for number in STOP_SIGNALS:
        signal.signal(number, _interrupt)
    done: list[dict] = []
    status = 0
    current: Round | None = None
    try:
        for spec in rounds:
            current = Round(spec, round_s, grace_s)
            current.run()
            done.append(current.report())
            current = None
            if not all(succeeded(j) for j in done[-1]["jobs"]):
                status = 1
            write_json(report_path, {"format": STATE_FORMAT, "exit_status": status, "rounds": done})
    except (SubmitError, Interrupted) as exc:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish the clean-up
        status = 2 if isinstance(exc, SubmitError) else 128 + exc.number
        if current is not None:
            current.abort(str(exc))
            done.append(current.report())
        print(f"error: {exc}; cancelled the round's submitted jobs", file=sys.stderr, flush=True)
        write_json(report_path, {"format": STATE_FORMAT, "exit_status": status, "rounds": done})
    for rnd in done:
        summary = ", ".join(f"{j['job_id']}={j['state']}({j['exit_code']})" for j in rnd["jobs"])
        print(f"{rnd['round']}: {summary or 'no jobs'}", flush=True)
    print(f"wrote {report_path}; exit status {status}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
