"""The run loop (`rota run`) with an in-process launcher that plays the jobs' parts at once:
the failure policy, lost and returning nodes, stale reports, stopping and continuing, --retry.
The real launchers run the same scenarios in tests/launchers/test_run_slurm.py."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from conftest import DATA

from planner.errors import InputError
from planner.export.common import progress_file_name
from planner.formats.cluster import read_cluster
from planner.formats.table import read_table
from planner.launch.adapter import ClusterState, JobResult, JobState, NodeState, RoundResult
from planner.launch.events import EventLog
from planner.launch.failures import count_failures, round_fault
from planner.launch.loop import RunConfig, RunLoop, StopRequest
from planner.launch.nodes import node_changes, unusable_nodes, usable_cluster
from planner.launch.reports import read_round, set_aside
from planner.launch.slurm import cluster_state_from, gres_gpus, parse_nodes

CLUSTER = read_cluster(DATA / "cluster.yaml")


class FakeLauncher:
    """Runs a round at once: 'ok' jobs report their planned steps, 'crash' exits 3, 'hang' is
    killed at the round's end, 'silent' exits 0 without a report, 'lost' loses its node."""

    name = "fake"

    def __init__(self, behaviour: dict[str, str], progress: Path) -> None:
        self.behaviour = behaviour
        self.progress = progress
        self.unusable: dict[str, str] = {}
        self.rounds: list[dict] = []  # the schedules launched
        self.steps: dict[str, float] = {}
        self.on_launch = None
        self.refuse: str | None = None  # the launcher refuses every round with this error

    def cluster_state(self, cluster):
        nodes = {
            n: NodeState(n, n not in self.unusable, self.unusable.get(n, ""))
            for w in cluster.worker_types.values()
            for n in w.nodes
        }
        return ClusterState(nodes)

    def prepare(self, context, out_dir, options):
        return context.schedule

    def launch(self, schedule, round_start):
        self.rounds.append(schedule)
        if self.on_launch is not None:
            self.on_launch(schedule)
        rnd = schedule["rounds"][0]
        result = RoundResult(rnd["index"], round_start, round_start + 0.01)
        if self.refuse:
            result.error = self.refuse
            return result
        for a in rnd["assignments"]:
            for jid in a["jobs"]:
                kind = self.behaviour.get(jid, "ok")
                if kind == "ok":
                    done = self.steps.get(jid, 0.0) + a["planned_steps"][jid]
                    self.steps[jid] = done
                    total = schedule["jobs"][jid]["total_steps"]
                    report = {"job_id": jid, "steps_done": done, "finished": done >= total - 1e-6}
                    (self.progress / progress_file_name(jid)).write_text(json.dumps(report))
                    result.jobs[jid] = JobResult(jid, JobState.COMPLETED, 0)
                elif kind == "crash":
                    result.jobs[jid] = JobResult(jid, JobState.FAILED, 3)
                elif kind == "hang":
                    result.jobs[jid] = JobResult(jid, JobState.KILLED, None)
                elif kind == "silent":
                    result.jobs[jid] = JobResult(jid, JobState.COMPLETED, 0)
                elif kind == "lost":
                    result.jobs[jid] = JobResult(jid, JobState.LOST, None)
        return result

    def wait(self, handle, until):
        return True

    def collect(self, handle):
        return handle

    def cancel(self, handle):
        pass


def _jobs(tmp_path: Path, rows: dict[str, tuple[str, int]]) -> Path:
    path = tmp_path / "jobs.csv"
    lines = ["job_id,model,batch_size,scale_factor,total_steps,command"]
    lines += [f"{jid},{model},{steps},train {jid}" for jid, (model, steps) in rows.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _loop(tmp_path, behaviour, rows=None, *, retry=(), max_failures=3, fake=None, jobs=True, stop=None):
    rows = rows or {"a": ("ResNet-18,64,1", 3000), "b": ("LM,20,1", 3000), "crash": ("A3C,,1", 2000)}
    config = RunConfig(
        state=tmp_path / "state.json",
        work_dir=tmp_path / "work",
        progress_dir=tmp_path / "work" / "progress",
        table=DATA / "throughputs.csv",
        cluster=DATA / "cluster.yaml",
        jobs=_jobs(tmp_path, rows) if jobs else None,
        round_s=360.0,
        max_failures=max_failures,
        retry=list(retry),
    )
    config.progress_dir.mkdir(parents=True, exist_ok=True)
    fake = fake or FakeLauncher(behaviour, config.progress_dir)
    fake.behaviour = behaviour
    events = EventLog(config.work_dir / "events.jsonl")
    return RunLoop(config, fake, events, stop or StopRequest()), fake


def _events(tmp_path):
    return [json.loads(line) for line in (tmp_path / "work" / "events.jsonl").read_text().splitlines()]


def _status(tmp_path):
    return {j["job_id"]: j["status"] for j in json.loads((tmp_path / "state.json").read_text())["jobs"]}


def test_a_crashing_job_is_given_up_after_the_limit_and_the_others_finish(tmp_path):
    loop, fake = _loop(tmp_path, {"crash": "crash"}, max_failures=2)
    summary = loop.run()
    assert summary.status == 1 and list(summary.failed) == ["crash"]
    assert _status(tmp_path) == {"a": "finished", "b": "finished", "crash": "failed"}
    crash_rounds = [r["rounds"][0]["index"] for r in fake.rounds if "crash" in r["jobs"]]
    assert len(crash_rounds) == 2, "planned once more after the limit"
    state = json.loads((tmp_path / "state.json").read_text())
    assert "exited with status 3" in state["launch"]["failed"]["crash"]
    kinds = [e["event"] for e in _events(tmp_path)]
    assert kinds.count("job_failed") == 2 and kinds.count("job_given_up") == 1 and kinds[-1] == "run_end"


@pytest.mark.parametrize("kind", ["hang", "silent"])
def test_killed_at_the_deadline_or_silent_counts_as_failed(tmp_path, kind):
    loop, _ = _loop(tmp_path, {"crash": kind}, max_failures=1)
    assert loop.run().status == 1
    assert _status(tmp_path)["crash"] == "failed"


def test_a_lost_node_is_not_the_jobs_fault(tmp_path):
    loop, fake = _loop(tmp_path, {"crash": "lost"}, max_failures=1)
    rounds = []

    def heal(schedule):  # the node comes back after two rounds
        rounds.append(schedule)
        if len(rounds) == 2:
            fake.behaviour["crash"] = "ok"

    fake.on_launch = heal
    assert loop.run().status == 0
    assert _status(tmp_path)["crash"] == "finished"


def test_unusable_nodes_are_not_planned_on_and_are_used_again_when_back(tmp_path):
    loop, fake = _loop(tmp_path, {}, rows={f"j{k}": ("ResNet-18,64,1", 40000) for k in range(8)})
    seen = []

    def drain(schedule):
        seen.append(schedule)
        if len(seen) == 1:
            fake.unusable = {"a100-node-0": "drained", "t4-0": "down"}
        elif len(seen) == 3:
            fake.unusable = {}

    fake.on_launch = drain
    assert loop.run().status == 0
    nodes = [{g["node"] for a in s["rounds"][0]["assignments"] for g in a["gpus"]} for s in fake.rounds]
    assert "a100-node-0" in nodes[0]
    assert not nodes[1] & {"a100-node-0", "t4-0"} and not nodes[2] & {"a100-node-0", "t4-0"}
    assert "a100-node-0" in nodes[3]
    events = _events(tmp_path)
    assert [(e["node"], e["reason"]) for e in events if e["event"] == "node_lost"] == [
        ("a100-node-0", "drained"),
        ("t4-0", "down"),
    ]
    assert sorted(e["node"] for e in events if e["event"] == "node_back") == ["a100-node-0", "t4-0"]
    assert any(e["event"] == "note" and "nodes changed" in e["text"] for e in events)


def test_retry_plans_a_failed_job_again(tmp_path):
    loop, fake = _loop(tmp_path, {"crash": "crash"}, max_failures=1)
    assert loop.run().status == 1
    again, _ = _loop(tmp_path, {}, retry=["crash"], fake=fake, jobs=False)
    assert again.run().status == 0
    assert _status(tmp_path)["crash"] == "finished"
    with pytest.raises(InputError, match="has not failed"):
        _loop(tmp_path, {}, retry=["a"], fake=fake, jobs=False)[0].run()


def test_stop_after_the_round_then_continue_without_running_a_round_twice(tmp_path):
    stop = StopRequest()
    loop, fake = _loop(tmp_path, {}, stop=stop)
    fake.on_launch = lambda schedule: stop(signal.SIGINT, None)
    summary = loop.run()
    assert summary.status == 128 + signal.SIGINT and len(fake.rounds) == 1
    assert json.loads((tmp_path / "state.json").read_text())["launch"]["launched_round"] == 0
    fake.on_launch = None
    again, _ = _loop(tmp_path, {}, fake=fake, jobs=False)
    assert again.run().status == 0
    indices = [s["rounds"][0]["index"] for s in fake.rounds]
    assert indices == sorted(set(indices)), f"a round ran twice: {indices}"
    assert _status(tmp_path) == {"a": "finished", "b": "finished", "crash": "finished"}
    # credited steps are what the jobs reported
    saved = {j["job_id"]: j["progress"] for j in json.loads((tmp_path / "state.json").read_text())["jobs"]}
    assert saved == pytest.approx(fake.steps)


def test_a_run_that_died_mid_round_folds_in_the_reports_written_since_the_launch(tmp_path):
    rows = {"a": ("ResNet-18,64,1", 40000), "b": ("LM,20,1", 40000)}
    loop, fake = _loop(tmp_path, {}, rows=rows)
    loop.check_commands()
    loop.resume()
    loop.plan()
    loop.run_round()
    (tmp_path / "work" / "reports" / "round-0000.json").unlink()  # died before saving the outcome
    again, _ = _loop(tmp_path, {}, rows=rows, fake=fake, jobs=False)
    assert again.run().status == 0
    indices = [s["rounds"][0]["index"] for s in fake.rounds]
    assert indices == list(range(len(indices))) and len(indices) > 2
    saved = {j["job_id"]: j["progress"] for j in json.loads((tmp_path / "state.json").read_text())["jobs"]}
    assert saved == pytest.approx(fake.steps)


def test_another_launchers_state_is_refused(tmp_path):
    loop, fake = _loop(tmp_path, {})
    loop.check_commands()
    loop.resume()
    loop.plan()
    fake.name = "other"
    with pytest.raises(InputError, match="run by 'fake'"):
        _loop(tmp_path, {}, fake=fake, jobs=False)[0].resume()


# --------------------------------------------------------------------------- the pure parts


def test_round_fault():
    assert round_fault(JobResult("j", JobState.COMPLETED, 0), reported=True) is None
    assert "without a progress report" in round_fault(JobResult("j", JobState.COMPLETED, 0), reported=False)
    assert "status 7" in round_fault(JobResult("j", JobState.FAILED, 7), reported=True)
    assert "killed" in round_fault(JobResult("j", JobState.KILLED), reported=False)
    for state in (JobState.NOT_RUN, JobState.LOST, JobState.CANCELLED):
        assert round_fault(JobResult("j", state), reported=False) is None
    assert round_fault(None, reported=False) is None


def test_count_failures_is_consecutive():
    failed = {"j": JobResult("j", JobState.FAILED, 1)}
    ok = {"j": JobResult("j", JobState.COMPLETED, 0)}
    skipped = {"j": JobResult("j", JobState.NOT_RUN)}
    counts: dict[str, int] = {}
    for results in (failed, failed, skipped, ok, failed, failed):
        update = count_failures(counts, results, reported={"j"} if results is ok else set(), max_failures=3)
        counts = update.failures
        assert not update.give_up
    update = count_failures(counts, failed, reported=set(), max_failures=3)
    assert update.give_up and "3 failed rounds in a row" in update.give_up["j"]


def test_scontrol_node_states_recorded_from_slurm():
    text = (DATA.parent / "tests" / "data" / "slurm" / "scontrol_show_node.txt").read_text()
    nodes = parse_nodes(text)
    assert nodes["t4-1"].usable is False and nodes["t4-1"].reason.startswith("drained: disk full on /scratch")
    assert nodes["v100-1"].usable is False and nodes["v100-1"].reason.startswith("down: hw")
    assert all(nodes[n].usable for n in ("a100-node-0", "t4-0", "t4-2", "t4-3", "v100-0"))
    assert (nodes["a100-node-0"].gpus, nodes["t4-0"].gpus) == (4, 2)
    state = cluster_state_from(text.replace("NodeName=t4-3 ", "NodeName=elsewhere "), CLUSTER)
    assert state.nodes["t4-3"].reason == "unknown to the launcher"
    usable = usable_cluster(CLUSTER, state)
    assert usable.worker_types["t4"].nodes == ("t4-0", "t4-2") and usable.capacity("t4") == 4
    assert usable.capacity("v100") == 4 and usable.capacity("a100") == 4


@pytest.mark.parametrize(
    ("state", "usable"),
    [("MIXED+DRAIN", False), ("ALLOCATED", True), ("IDLE*", False), ("DOWN+NOT_RESPONDING", False), ("MIXED", True)],
)
def test_scontrol_state_words(state, usable):
    (node,) = parse_nodes(f"NodeName=n1 Gres=gpu:a100:8(S:0-1) State={state} Reason=x y [u@t]").values()
    assert node.usable is usable and node.gpus == 8


def test_gres_counts():
    assert gres_gpus("gpu:a100:4(S:0),gpu:a100:2") == 6 and gres_gpus("(null)") is None and gres_gpus("gpu:2") == 2


def test_node_changes_and_partial_gpus():
    state = ClusterState({n: NodeState(n, True, gpus=1 if n == "v100-0" else None) for n in ("a100-node-0", "v100-0")})
    gone = unusable_nodes(CLUSTER, state)
    assert gone["v100-0"] == "1 of 4 GPUs usable" and gone["t4-0"] == "unknown to the launcher"
    changes = node_changes({"t4-0": "down", "x": "down"}, {"t4-0": "down", "y": "drained"})
    assert changes.lost == {"y": "drained"} and changes.back == ["x"]


def test_reports_of_earlier_rounds_are_set_aside_and_stale_ones_ignored(tmp_path):
    folder = tmp_path / "progress"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps({"job_id": "a", "steps_done": 5}))
    assert set_aside(folder, 0) == 1 and not (folder / "a.json").exists()
    assert (folder / ".rota-read" / "round-0000" / "a.json").exists()
    started = time.time()
    (folder / "a.json").write_text(json.dumps({"job_id": "a", "steps_done": 9}))
    (folder / "b.json").write_text(json.dumps({"job_id": "b", "steps_done": 3}))
    old = started - 3600
    import os

    os.utime(folder / "b.json", (old, old))
    (folder / "c.json").write_text("{not json")
    (folder / "d.json").write_text(json.dumps({"job_id": "someone-else", "steps_done": 1}))
    reports = read_round(folder, ["a", "b", "c", "d", "e"], started)
    assert list(reports.jobs) == ["a"] and reports.jobs["a"].steps_done == 9
    assert reports.stale == [str(folder / "b.json")]
    assert len(reports.problems) == 2


def test_a_planned_round_not_launched_is_launched_by_the_next_run_unless_its_nodes_are_gone(tmp_path):
    loop, fake = _loop(tmp_path, {})
    loop.check_commands()
    loop.resume()
    loop.plan()  # stopped here: round 0 planned, never launched
    planned = json.loads((tmp_path / "work" / "round.json").read_text())
    nodes = {g["node"] for a in planned["rounds"][0]["assignments"] for g in a["gpus"]}
    again, _ = _loop(tmp_path, {}, fake=fake, jobs=False)
    again.resume()
    assert again.schedule is not None and again.schedule["next_round"]["plan_id"] == planned["next_round"]["plan_id"]

    fake.unusable = {sorted(nodes)[0]: "drained"}
    third, _ = _loop(tmp_path, {}, fake=fake, jobs=False)
    assert third.run().status == 0
    first = fake.rounds[0]["rounds"][0]
    assert sorted(nodes)[0] not in {g["node"] for a in first["assignments"] for g in a["gpus"]}
    assert any(e["event"] == "resume" and "no longer usable" in e["what"] for e in _events(tmp_path))


def test_the_live_panel_shows_the_round_the_jobs_the_utilisation_and_what_comes_next(tmp_path):
    from rich.console import Console

    from planner.launch.view import RunView

    loop, fake = _loop(tmp_path, {"crash": "crash"}, max_failures=1)
    loop.config.export_options["grace_s"] = 60
    console = Console(record=True, width=100)
    shown = []

    def look(schedule):
        loop.running = {**loop.running}  # what run_round set before launching
        console.print(RunView(console, live=False).panel(loop))
        shown.append(console.export_text())

    fake.on_launch = look
    loop.run()
    first = shown[0]
    assert "round 0: 3 job(s)" in first and "SIGTERM (checkpoint) at" in first and "round ends at" in first
    assert "planned utilisation" in first and "a100" in first
    assert "active" in first and "failed" in first


def test_a_launcher_that_refuses_every_round_stops_the_loop_with_its_error(tmp_path):
    loop, fake = _loop(tmp_path, {})
    fake.refuse = "sbatch: error: invalid partition specified: gpu-typo"
    with pytest.raises(InputError, match="ran no job in 3 rounds in a row.*invalid partition"):
        loop.run()
    assert len(fake.rounds) == 3
    state = json.loads((tmp_path / "state.json").read_text())
    # nobody was credited a step (the steps before the last planned round) nor charged a failure
    assert set(state["last_plan"]["jobs"].values()) == {0} and not state["launch"]["failures"]


def test_rows_added_to_the_job_list_while_the_loop_runs_are_new_jobs(tmp_path):
    loop, fake = _loop(tmp_path, {}, rows={"a": ("ResNet-18,64,1", 40000)})
    jobs = tmp_path / "jobs.csv"
    launched = []

    def submit(schedule):
        launched.append(schedule)
        if len(launched) == 1:
            with jobs.open("a") as handle:
                handle.write('late,LM,20,1,3000,train late\nbroken,"unclosed\n')
        elif len(launched) == 2:
            jobs.write_text(jobs.read_text().replace('broken,"unclosed\n', ""))

    fake.on_launch = submit
    assert loop.run().status == 0
    events = _events(tmp_path)
    assert any(e["event"] == "warning" and "cannot be read" in e["text"] for e in events)
    assert [e["job_ids"] for e in events if e["event"] == "jobs_added"] == [["late"]]
    assert _status(tmp_path) == {"a": "finished", "late": "finished"}
    assert any("late" in s["jobs"] for s in fake.rounds)


def test_a_job_type_missing_a_row_is_said_once_per_run(tmp_path):
    rows = (DATA / "throughputs.csv").read_text().splitlines()
    gappy = tmp_path / "gappy.csv"

    def lm20_on_t4(row: str) -> bool:  # its solo row and the pairs that name it
        cells = row.split(",")
        return cells[0] == "t4" and ("LM", "20") in ((cells[1], cells[2]), (cells[4], cells[5]))

    gappy.write_text("\n".join(r for r in rows if not lm20_on_t4(r)) + "\n")
    loop, _ = _loop(tmp_path, {}, {"a": ("ResNet-18,64,1", 60000), "b": ("LM,20,1", 60000)})
    loop.table = read_table(gappy)  # as if the run were started on the gappy table
    assert loop.run().status == 0
    said = [e["text"] for e in _events(tmp_path) if e["event"] == "warning" and "has no t4 row" in e.get("text", "")]
    assert len(said) == 1 and said[0].startswith("LM (batch size 20) (1 job) has no t4 row"), said
    assert len([e for e in _events(tmp_path) if e["event"] == "round_start"]) > 1  # several rounds, one warning


def test_a_scale_factor_the_table_lacks_is_estimated_said_once_and_run(tmp_path):
    # The table has ResNet-18 (64) at 1, 2 and 4 GPUs; an 8-GPU job of it used to stop the loop
    # at start-up. Its rows are estimated, said once, and the job runs, also after a restart.
    rows = {"a": ("ResNet-18,64,1", 3000), "big": ("ResNet-18,64,8", 3000)}
    loop, fake = _loop(tmp_path, {}, rows)
    assert loop.run().status == 0
    said = [e["text"] for e in _events(tmp_path) if e["event"] == "warning" and "x8" in e.get("text", "")]
    assert len(said) == 1 and said[0].startswith("ResNet-18 (batch size 64)"), said
    assert _status(tmp_path) == {"a": "finished", "big": "finished"}
    again, _ = _loop(tmp_path, {}, rows, fake=fake, jobs=False)  # continued from the state alone
    again.resume()
    assert any(jt.scale_factor == 8 and jt.model == "ResNet-18" for jt in again.table.job_types)
