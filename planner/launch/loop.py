"""`rota run`: the round loop as one long-running command.

Each round: ask the launcher which nodes it can use now, fold the last round's outcome into
the planner state (progress reports, failures, lost and returning nodes), plan the next round
on the usable nodes (next_round, as `rota plan-next` does), write the round file and the state
(state last), export the round with the launcher's own exporter, run it on the round's clock,
and collect what became of each job. The state is written before anything is launched and
records which round was launched, so a run that stops (Ctrl-C, SIGTERM, a crash) is continued by
a new `rota run` on the same state: a planned round that never started is launched then, and a
round that ran is folded in from its saved outcome (`reports/round-NNNN.json`).

Stopping: the first SIGINT/SIGTERM lets the running round end on its clock, folds it in and
exits; a second one cancels the round's jobs now (they get SIGTERM, then are killed).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.estimate.scaling import ScaleOptions, extend_for, read_jobs_scaled
from planner.export.common import ExportContext, round_dir
from planner.formats.atomic import write_text_atomic, write_together
from planner.formats.cluster import Cluster, read_cluster, require_table_rows, tenant_name
from planner.formats.coverage import missing_cells
from planner.formats.jobs import Job
from planner.formats.progress import JobProgress, Progress
from planner.formats.state import LaunchEntry, StateDocument
from planner.formats.table import JobType, ThroughputTable, read_table
from planner.launch.adapter import JobResult, JobState, Launcher, RoundResult
from planner.launch.events import EventLog
from planner.launch.failures import DEFAULT_MAX_FAILURES, count_failures
from planner.launch.nodes import node_changes, unusable_nodes, usable_cluster
from planner.launch.reports import read_round, set_aside
from planner.modes.next_round import DEFAULT_POLICY, NextRound, next_round
from planner.modes.plan import schedule_files
from planner.modes.state import read_state
from planner.modes.tenants import refuse_barred
from planner.policies import check_tenants

OUTCOME_FORMAT = "rota.run-round/v1"
MAX_LAUNCH_ERRORS = 3  # rounds in a row the launcher refused outright before the loop stops
POLL_S = 1.0  # how often the loop looks up from a running round (the live view, a second Ctrl-C)


@dataclass
class RunConfig:
    state: Path
    work_dir: Path  # round.json, launch/ (launcher files and per-job logs), reports/, events.jsonl
    progress_dir: Path
    table: Path
    cluster: Path
    jobs: Path | None = None
    policy: str | None = None
    round_s: float | None = None
    round_auto: bool = False  # --round-length auto: chosen at this run's first plan, then the state's
    max_failures: int = DEFAULT_MAX_FAILURES
    retry: list[str] = field(default_factory=list)
    export_options: dict[str, Any] = field(default_factory=dict)
    default_command: str | None = None
    restart_cost_s: float | None = None  # --restart-cost (None: the state's, else table/cluster/learnt)
    migration_aware: bool | None = None  # --migration-aware (None: the state's)
    scaling: ScaleOptions = field(default_factory=ScaleOptions)  # a job's scale factor the table lacks

    @property
    def round_file(self) -> Path:
        return self.work_dir / "round.json"

    @property
    def launch_dir(self) -> Path:
        return self.work_dir / "launch"

    def outcome_file(self, index: int) -> Path:
        return self.work_dir / "reports" / f"{round_dir(index)}.json"


def _stamp(path: Path | None) -> tuple[int, int, int] | None:
    """What tells a changed file: size, modification time and inode (a replaced file)."""
    if path is None:
        return None
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_size, info.st_mtime_ns, info.st_ino)


class StopRequest:
    """The first SIGINT/SIGTERM: stop after this round; the second: now."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def __call__(self, number: int, _frame: object) -> None:
        self.signals.append(number)

    @property
    def after_round(self) -> bool:
        return bool(self.signals)

    @property
    def now(self) -> bool:
        return len(self.signals) >= 2

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        previous = {s: signal.signal(s, self) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


@dataclass
class Outcome:
    """One launched round, as the next planning call folds it in."""

    index: int
    start_s: float  # the round's planned start on the plan's clock
    result: RoundResult | None  # None: the run died while it ran (the launcher's view is lost)
    reports: dict[str, JobProgress]
    interrupted: bool = False  # cancelled by the operator (second Ctrl-C): no failures counted

    def to_json(self) -> dict[str, Any]:
        result = self.result
        return {
            "format": OUTCOME_FORMAT,
            "index": self.index,
            "start_s": self.start_s,
            "interrupted": self.interrupted,
            "started_at": None if result is None else result.started_at,
            "ended_at": None if result is None else result.ended_at,
            "error": None if result is None else result.error,
            "results": {}
            if result is None
            else {
                j: {"state": str(r.state), "exit_code": r.exit_code, "detail": r.detail} for j, r in result.jobs.items()
            },
            "reports": {
                j: {"steps_done": r.steps_done, "finished": r.finished, "elapsed_s": r.elapsed_s}
                for j, r in self.reports.items()
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path) -> Outcome:
        try:
            result = None
            if data.get("started_at") is not None:
                result = RoundResult(data["index"], data["started_at"], data["ended_at"], error=data.get("error"))
                result.jobs = {
                    j: JobResult(j, JobState(r["state"]), r.get("exit_code"), r.get("detail", ""))
                    for j, r in data["results"].items()
                }
            reports = {
                j: JobProgress(r.get("steps_done"), bool(r.get("finished")), None, r.get("elapsed_s"))
                for j, r in data["reports"].items()
            }
            return cls(int(data["index"]), float(data["start_s"]), result, reports, bool(data.get("interrupted")))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"not a round outcome rota run wrote ({exc})", path=path) from None

    def progress(self, planned_end: float | None) -> Progress:
        """The report next_round folds in. The plan's clock moves by the round's real length when
        it ran long (Slurm's KillWait, a slow launcher), never less than the planned round."""
        time_s = None
        if self.result is not None and planned_end is not None:
            time_s = max(planned_end, self.start_s + max(0.0, self.result.ended_at - self.result.started_at))
        return Progress(time_s=time_s, round=self.index, jobs=dict(self.reports))


@dataclass
class RunSummary:
    status: int  # 0 every job finished, 1 some failed, 128 + N stopped by signal N
    finished: list[str]
    failed: dict[str, str]
    rounds: int  # launched by this run
    stopped_by: int | None = None
    # tenant -> share of the GPU time of the rounds this run launched (None: the cluster has no tenants)
    tenant_shares: dict[str, float] | None = None


class RunLoop:
    def __init__(
        self,
        config: RunConfig,
        launcher: Launcher,
        events: EventLog,
        stop: StopRequest,
        on_round: Callable[[RunLoop], None] | None = None,
    ) -> None:
        self.config, self.launcher, self.events, self.stop = config, launcher, events, stop
        self.on_round = on_round  # the live view's refresh
        self.base_table: ThroughputTable = read_table(config.table)  # as given; estimated rows come on top
        self.table: ThroughputTable = self.base_table
        self.cluster: Cluster = read_cluster(config.cluster)
        require_table_rows(self.cluster, self.table, config.table)
        self.scales_said: set[JobType] = set()  # job types whose estimated scale factor was said
        self.jobs: list[Job] | None = None
        if config.jobs is not None:
            self.jobs = self._read_jobs(config.jobs)
        self.jobs_stamp = _stamp(config.jobs)
        self.document: StateDocument | None = None
        self.entry = LaunchEntry(launcher=launcher.name)
        self.schedule: dict[str, Any] | None = None  # the round planned and not yet launched
        self.pending: Outcome | None = None  # the round launched and not yet folded in
        self.launched = 0
        self.running: dict[str, Any] = {}  # what the live view shows of the round in flight
        self.last_plan: NextRound | None = None
        self.overhead: dict[str, float] = {}  # this round's loop cost by phase (seconds)
        self.usable: Cluster | None = None  # the cluster as planned on last (usable nodes only)
        self.launch_errors = 0  # rounds in a row in which the launcher ran no job, with an error
        self.restart_noted = False  # the "restart cost unknown" note is said once per run
        self.gaps_said: set = set()  # job types whose missing table rows were said (once per run each)
        self.round_tenants: dict[str, dict[str, float]] = {}  # tenant -> type -> GPUs in the planned round
        self.tenant_gpu_s: dict[str, float] = {}  # tenant -> GPU-seconds of the rounds this run launched

    # ------------------------------------------------------------------ set-up

    @property
    def policy_name(self) -> str:
        """The policy the next plan uses: --policy, else the state's, else the default."""
        if self.config.policy is not None:
            return self.config.policy
        return self.document.policy.name if self.document is not None else DEFAULT_POLICY

    def check_commands(self) -> None:
        for job in self.jobs or ():
            if not job.command and self.config.default_command is None:
                raise InputError(
                    f"job {job.job_id!r} has no command: add a 'command' column, or give --default-command",
                    path=self.config.jobs,
                    field="command",
                )

    def resume(self) -> None:
        """Pick up where the state stands: a planned round not yet launched, or a launched one
        whose outcome is folded in next."""
        if not self.config.state.exists():
            if self.jobs is None:
                raise InputError(f"no state yet at {self.config.state}: give --jobs to start", field="--jobs")
            return
        self.document = StateDocument.from_json(read_state(self.config.state), self.config.state)
        # the state's jobs may need rows estimated for their scale factor, as when they were added
        needed = [entry.job.job_type for entry in self.document.jobs] + [j.job_type for j in self.jobs or ()]
        self.table = extend_for(self.base_table, dict.fromkeys(needed), self.cluster, self.config.scaling).table
        if self.document.launch is not None:
            self.entry = self.document.launch
            if self.entry.launcher not in (None, self.launcher.name):
                raise InputError(
                    f"this state is run by {self.entry.launcher!r}, not {self.launcher.name!r}",
                    path=self.config.state,
                    field="launch.launcher",
                )
            self.entry.launcher = self.launcher.name
        last = self.document.last_plan
        if last is None or last.rounds == 0:
            return
        planned = last.first_round + last.rounds - 1
        if self.entry.launched_round == planned:
            self.pending = self._saved_outcome(planned)
            return
        schedule = self._round_file(last.id)
        lost = self._unusable_in(schedule) if schedule is not None else set()
        if schedule is not None and not lost:
            self.schedule = schedule
            self.events.emit("resume", round=planned, what="launching the planned round")
        else:  # the round file is gone or another's, or uses a node lost since: plan again, nobody is credited
            why = f"it uses nodes no longer usable: {', '.join(sorted(lost))}" if lost else "its round file is gone"
            self.events.emit("resume", round=planned, what=f"planning round {planned} again ({why})")
            self.pending = Outcome(planned, 0.0, None, {})

    def _unusable_in(self, schedule: dict[str, Any]) -> set[str]:
        """The nodes a planned round uses that the launcher cannot use now."""
        state = self.launcher.cluster_state(self.cluster)
        used = {g["node"] for r in schedule.get("rounds", []) for a in r["assignments"] for g in a["gpus"]}
        return {n for n in used if not (state.nodes.get(n) and state.nodes[n].usable)}

    def _round_file(self, plan_id: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self.config.round_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        found = (data.get("next_round") or {}).get("plan_id") if isinstance(data, dict) else None
        return data if found == plan_id else None

    def _saved_outcome(self, index: int) -> Outcome:
        path = self.config.outcome_file(index)
        if path.exists():
            return Outcome.from_json(json.loads(path.read_text(encoding="utf-8")), path)
        # The run died while the round ran: what the jobs reported since its launch still counts.
        since = self.entry.launched_at or 0.0
        jobs = self._round_jobs(
            self._round_file(self.document.last_plan.id) if self.document and self.document.last_plan else None
        )
        reports = read_round(self.config.progress_dir, jobs, since)
        self.events.emit(
            "resume", round=index, what="the last run stopped during this round", reports=len(reports.jobs)
        )
        return Outcome(index, 0.0, None, reports.jobs)

    @staticmethod
    def _round_jobs(schedule: dict[str, Any] | None) -> list[str]:
        if not schedule or not schedule.get("rounds"):
            return []
        return [j for a in schedule["rounds"][0]["assignments"] for j in a["jobs"]]

    # ------------------------------------------------------------------ one round

    def plan(self) -> bool:
        """Fold the pending outcome in and plan the next round; False when nothing is left."""
        began = time.perf_counter()
        state = self.launcher.cluster_state(self.cluster)
        unusable = unusable_nodes(self.cluster, state)
        changes = node_changes(self.entry.unusable, unusable)
        for node, why in changes.lost.items():
            self.events.emit("node_lost", node=node, reason=why)
        for node in changes.back:
            self.events.emit("node_back", node=node)
        self.entry.unusable = unusable
        self.usable = usable_cluster(self.cluster, state)
        self._reread_jobs()
        self._say_missing_cells()
        progress, give_up = self._fold()
        inputs = {"table": self.config.table, "cluster": self.config.cluster}
        if self.config.jobs is not None:
            inputs["jobs"] = self.config.jobs
        result = next_round(
            self.table,
            self.usable,
            state=self.document,
            jobs=self.jobs,
            progress=progress,
            policy=self.config.policy,
            round_s=self.config.round_s,
            inputs=inputs,
            state_path=self.config.state,
            progress_path=self.config.progress_dir,
            failed=give_up,
            retry=self.config.retry if self.document is not None else (),
            launch=self.entry,
            resolve=changes.summary() if changes and self.document is not None else None,
            restart_cost_s=self.config.restart_cost_s,
            migration_aware=self.config.migration_aware,
            round_auto=self.config.round_auto,
        )
        self.config.round_auto = False  # chosen once per run
        self.config.retry = []
        notes = result.notes
        if result.restart_note and not self.restart_noted:  # once per run, not every round
            notes, self.restart_noted = [*notes, result.restart_note], True
        for note in notes:
            self.events.emit("note", text=note)
        for warning in result.warnings:
            self.events.emit("warning", text=warning)
        state_text = json.dumps(result.state, separators=(",", ":")) + "\n"
        self.config.work_dir.mkdir(parents=True, exist_ok=True)
        write_together(
            [
                *schedule_files(result.schedule, self.config.round_file, None, compact=True),
                (self.config.state, state_text),
            ],
            in_place=[self.config.state],  # the state this loop reads and rewrites
        )
        self.document = StateDocument.from_json(result.state, self.config.state)
        self.entry = self.document.launch or self.entry
        self.last_plan = result
        self.schedule = result.schedule.to_json()
        self.pending = None
        rounds = self.schedule["rounds"]
        self.round_tenants = self._tenant_gpus(rounds[0]) if rounds and self.cluster.tenants is not None else {}
        self.events.emit(
            "plan",
            round=rounds[0]["index"] if rounds else None,
            assignments=len(rounds[0]["assignments"]) if rounds else 0,
            active=self.schedule["next_round"]["active_jobs"],
            waiting=self.schedule["next_round"]["waiting_jobs"],
            unusable_nodes=sorted(unusable),
            plan_ms=round(result.timings.get("total_s", 0.0) * 1000, 1),
            **({"tenants": self._round_gpus()} if self.cluster.tenants is not None else {}),
        )
        self.overhead = {"plan_s": time.perf_counter() - began}
        return bool(rounds)

    def _round_gpus(self) -> dict[str, float]:
        """Tenant -> GPUs its jobs hold in the planned round."""
        return {t: sum(by_type.values()) for t, by_type in self.round_tenants.items()}

    def _tenant_gpus(self, rnd: dict[str, Any]) -> dict[str, dict[str, float]]:
        """Tenant -> worker type -> GPUs its jobs hold in a planned round (a co-located pair's
        GPUs split between its jobs' tenants)."""
        entity = {e.job.job_id: e.job.entity for e in self.document.jobs} if self.document is not None else {}
        out: dict[str, dict[str, float]] = {}
        for a in rnd["assignments"]:
            share = len(a["gpus"]) / len(a["jobs"])
            for jid in a["jobs"]:
                by_type = out.setdefault(tenant_name(entity.get(jid)), {})
                by_type[a["worker_type"]] = by_type.get(a["worker_type"], 0) + share
        return out

    def _say_missing_cells(self) -> None:
        """A job type with no table row on a worker type it would fit never runs there: say so
        once per job type in the run (as rota plan does), not silently."""
        if self.jobs is None:
            return
        for cells in missing_cells(self.table, self.jobs, self.cluster):
            if cells.job_type not in self.gaps_said:
                self.gaps_said.add(cells.job_type)
                self.events.emit("warning", text=cells.describe())

    def _read_jobs(self, path: Path) -> list[Job]:
        """The job list, with rows estimated for scale factors the table lacks (said once each)."""
        read = read_jobs_scaled(path, table=self.base_table, cluster=self.cluster, options=self.config.scaling)
        for estimate in read.estimates:
            if estimate.job_type not in self.scales_said:
                self.scales_said.add(estimate.job_type)
                self.events.emit("warning", text=estimate.describe())
        self.table = read.table
        return read.jobs

    def _reread_jobs(self) -> None:
        """New rows in the job list are new jobs: the list is read again when it changed, so a
        running loop takes submissions. A list that no longer reads keeps the last good one."""
        path = self.config.jobs
        stamp = _stamp(path)
        if path is None or stamp == self.jobs_stamp:
            return
        self.jobs_stamp = stamp
        try:
            jobs = self._read_jobs(path)
            for job in jobs:
                if not job.command and self.config.default_command is None:
                    raise InputError(f"job {job.job_id!r} has no command", path=path, field="command")
        except InputError as exc:
            faults = "; ".join(line.strip() for line in str(exc).splitlines())  # events are one line each
            self.events.emit("warning", text=f"the job list changed but cannot be read; keeping the last one: {faults}")
            return
        known = {j.job_id for j in self.jobs or ()}
        added = [j.job_id for j in jobs if j.job_id not in known]
        if added:
            self.events.emit("jobs_added", job_ids=added, path=str(path))
        self.jobs = jobs

    def _fold(self) -> tuple[Progress | None, dict[str, str]]:
        outcome = self.pending
        if outcome is None:
            return None, {}
        give_up: dict[str, str] = {}
        if outcome.result is not None and not outcome.interrupted:
            finished = {j for j, r in outcome.reports.items() if r.finished}
            update = count_failures(
                self.entry.failures,
                outcome.result.jobs,
                set(outcome.reports),
                max_failures=self.config.max_failures,
                finished=finished,
            )
            self.entry.failures = update.failures
            for jid, why in update.faults.items():
                self.events.emit("job_failed", job_id=jid, round=outcome.index, reason=why, count=update.failures[jid])
            for jid, why in update.give_up.items():
                self.events.emit("job_given_up", job_id=jid, reason=why)
                self.entry.failures.pop(jid, None)
            give_up = update.give_up
        engine_t = self.document.engine.t if self.document is not None else None
        return outcome.progress(engine_t), give_up

    def run_round(self) -> None:
        """Launch the planned round and keep its clock; its outcome becomes pending."""
        assert self.schedule is not None and self.document is not None
        rnd = self.schedule["rounds"][0]
        index, jobs = rnd["index"], self._round_jobs(self.schedule)
        set_aside(self.config.progress_dir, index)
        self.config.progress_dir.mkdir(parents=True, exist_ok=True)
        started = time.time()
        self.entry.launched_round, self.entry.launched_at = index, started
        self._write_launch_entry()
        round_s = float(self.schedule["round_s"])
        grace = self.config.export_options.get("grace_s")
        grace_s = None if grace is None else min(float(grace), round_s / 2)
        self.running = {"index": index, "started": started, "round_s": round_s, "grace_s": grace_s, "jobs": jobs}
        self.events.emit("round_start", round=index, jobs=jobs, round_s=round_s)
        if rnd["assignments"]:
            result, interrupted = self._drive(rnd, started, round_s)
        else:  # nothing can run (every job waits for nodes): let the round's time pass
            while time.time() < started + round_s and not self.stop.after_round:
                time.sleep(min(POLL_S, max(0.0, started + round_s - time.time())))
                if self.on_round is not None:
                    self.on_round(self)
            result, interrupted = RoundResult(index, started, time.time()), False
        ran_s = max(0.0, min(round_s, result.ended_at - result.started_at))
        for tenant, by_type in self.round_tenants.items():
            self.tenant_gpu_s[tenant] = self.tenant_gpu_s.get(tenant, 0.0) + ran_s * sum(by_type.values())
        self._record(rnd, jobs, started, result, interrupted)

    def _drive(self, rnd: dict[str, Any], started: float, round_s: float) -> tuple[RoundResult, bool]:
        """Export, launch and wait for one round; (what became of it, cancelled by the operator)."""
        index = rnd["index"]
        began = time.perf_counter()
        # job logs in one place whatever the launcher's working folder (Slurm's are there already)
        options = {"log_dir": str((self.config.launch_dir / "logs").absolute()), **self.config.export_options}
        prepared = self.launcher.prepare(self._context(), self.config.launch_dir, options)
        handle = self.launcher.launch(prepared, started)
        self.overhead["launch_s"] = time.perf_counter() - began
        for a in rnd["assignments"]:
            nodes = sorted({g["node"] for g in a["gpus"]})
            for jid in a["jobs"]:
                self.events.emit("job_start", job_id=jid, round=index, worker_type=a["worker_type"], nodes=nodes)
        give_up_at = started + 10 * round_s + 600  # a launcher that never ends a round
        interrupted = False
        while not self.launcher.wait(handle, min(time.time() + POLL_S, give_up_at)):
            if self.on_round is not None:
                self.on_round(self)
            if self.stop.now:
                self.events.emit("run_stop", what="cancelling the round's jobs now")
                self.launcher.cancel(handle)
                interrupted = True
                break
            if time.time() >= give_up_at:
                self.events.emit("warning", text=f"round {index} still runs long after its end: cancelling it")
                self.launcher.cancel(handle)
                break
        began = time.perf_counter()
        result = self.launcher.collect(handle)
        self.overhead["collect_s"] = time.perf_counter() - began
        return result, interrupted

    def _record(
        self, rnd: dict[str, Any], jobs: list[str], started: float, result: RoundResult, interrupted: bool
    ) -> None:
        """Read the round's reports, log each job's end, and save the outcome (before the next
        plan folds it in: a run stopped now is continued from it)."""
        index = rnd["index"]
        for jid in jobs:
            result.jobs.setdefault(jid, JobResult(jid, JobState.NOT_RUN, None, "not started by the launcher"))
        reports = read_round(self.config.progress_dir, jobs, started)
        for path in reports.stale:
            self.events.emit("warning", text=f"{path}: written before round {index} started; not read as its report")
        for problem in reports.problems:
            self.events.emit("warning", text=problem)
        for jid in jobs:
            r, report = result.jobs[jid], reports.jobs.get(jid)
            self.events.emit(
                "job_end",
                job_id=jid,
                round=index,
                state=str(r.state),
                exit_code=r.exit_code,
                detail=r.detail,
                steps_done=None if report is None else report.steps_done,
                finished=None if report is None else report.finished,
            )
        outcome = Outcome(index, float(rnd["start_s"]), result, reports.jobs, interrupted)
        write_text_atomic(self.config.outcome_file(index), json.dumps(outcome.to_json(), indent=1) + "\n")
        self._check_launcher(result)
        seconds = round(result.ended_at - result.started_at, 2)
        # The loop's own cost this round (plan + export + launch + collect), not the jobs' time.
        loop_s = {k: round(v, 4) for k, v in self.overhead.items()}
        self.events.emit("round_end", round=index, seconds=seconds, error=result.error, loop_s=loop_s)
        self.pending, self.schedule, self.running = outcome, None, {}
        self.launched += 1

    def _check_launcher(self, result: RoundResult) -> None:
        """A launcher that refuses round after round (sbatch rejects an option, the API server is
        unreachable) must not spin the loop through empty rounds: after MAX_LAUNCH_ERRORS in a row
        in which no job ran, stop with its error."""
        ran = any(r.state not in (JobState.NOT_RUN, JobState.CANCELLED) for r in result.jobs.values())
        if result.error is None or ran:
            self.launch_errors = 0
            return
        self.launch_errors += 1
        self.events.emit("warning", text=f"round {result.index}: the launcher ran no job: {result.error}")
        if self.launch_errors >= MAX_LAUNCH_ERRORS:
            raise InputError(
                f"the launcher ran no job in {self.launch_errors} rounds in a row; the last error: {result.error}",
                field=self.launcher.name,
            )

    def _write_launch_entry(self) -> None:
        """The state with this launch noted, before anything starts: a run that dies now is
        continued without launching the round a second time."""
        assert self.document is not None
        self.document.launch = self.entry
        write_text_atomic(
            self.config.state, json.dumps(self.document.to_json(), separators=(",", ":")) + "\n", replaces_input=True
        )

    def _context(self) -> ExportContext:
        assert self.schedule is not None
        commands = {}
        for jid, entry in self.schedule["jobs"].items():
            command = entry.get("command") or self.config.default_command
            if not command:
                raise InputError(f"job {jid!r} has no command; give --default-command", field="command")
            commands[jid] = command
        usable = self.usable or usable_cluster(self.cluster, self.launcher.cluster_state(self.cluster))
        return ExportContext(self.schedule, self.config.round_file, usable, commands, self.table)

    # ------------------------------------------------------------------ the loop

    def run(self) -> RunSummary:
        self.check_commands()
        self.resume()
        check_tenants(self.policy_name, self.cluster)  # quotas the policy cannot honour: before any launch
        refuse_barred(self.jobs or (), self.table, self.cluster, self.config.jobs)
        self.events.emit("run_start", launcher=self.launcher.name, state=str(self.config.state))
        while True:
            if self.schedule is None:
                if not self.plan():
                    break
            if self.stop.after_round:
                break
            self.run_round()
            if self.stop.after_round:
                break
        return self.summary()

    def summary(self) -> RunSummary:
        doc = self.document
        failed = dict(self.entry.failed)
        finished = [] if doc is None else [e.job.job_id for e in doc.jobs if e.status == "finished"]
        stopped = self.stop.signals[0] if self.stop.signals else None
        if stopped is not None and (self.schedule is not None or self.pending is not None):
            status = 128 + stopped
        else:
            status = 1 if failed else 0
        shares = None
        if self.cluster.tenants is not None:
            total = sum(self.tenant_gpu_s.values())
            shares = {t: (s / total if total > 0 else 0.0) for t, s in self.tenant_gpu_s.items()}
        self.events.emit(
            "run_end",
            status=status,
            finished=len(finished),
            failed=sorted(failed),
            rounds=self.launched,
            **({"tenant_gpu_shares": shares} if shares is not None else {}),
        )
        return RunSummary(status, finished, failed, self.launched, stopped, shares)
