"""`rota run slurm` on a real single-host Slurm: a week's troubles in a few rounds.

Healthy jobs, a job that always crashes, one that ignores SIGTERM, one an operator scancels,
a stale progress report, a node drained mid-run and resumed; then Ctrl-C and a continued run.
Each run ends with every healthy job finished, the faulty ones failed after --max-failures, no
process of the test's jobs left, and credited steps equal to what the trainer checkpointed."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
from conftest import DATA

from launchers.run_loop import (
    checkpoint_steps,
    common_args,
    fake_events,
    fake_jobs,
    job_list,
    marked_processes,
    start_run,
    state_jobs,
)
from launchers.slurm_rounds import environment, wait_for


def _no_orphans(fake) -> None:
    wait_for(lambda: not marked_processes(str(fake)), 30, "the jobs' processes to end")


def _credited_equals_checkpoints(state, fake, jobs) -> None:
    saved = state_jobs(state)
    for jid in jobs:
        assert saved[jid]["progress"] == int(checkpoint_steps(fake, jid)), (jid, saved[jid])


def test_faulty_jobs_fail_after_the_limit_and_a_drained_node_is_left_alone(slurm, tmp_path):
    env = environment(slurm.env())
    fake, jobs = fake_jobs(
        tmp_path,
        {
            "healthy-a": ("ResNet-18,64,1", 4000, "--rate-scale 2"),
            "healthy-b": ("LM,20,1", 7000, "--rate-scale 2"),
            "gang": ("ResNet-50,32,2", 1500, "--rate-scale 2"),
            "poked": ("CycleGAN,,1", 250, "--rate-scale 2"),
            "crash": ("A3C,,1", 1000, "--fail"),
            "stubborn": ("Transformer,64,1", 100000, "--ignore-term"),
        },
    )
    with start_run(tmp_path, "slurm", env, *common_args(jobs, 30, 8, "--max-failures", "2")) as run:
        # round 0: an operator cancels 'poked' once it runs; a stale report for 'crash' appears
        run.wait_event(lambda e: e["event"] == "job_start" and e["job_id"] == "poked", 60, "poked's start")
        wait_for(lambda: any(e["event"] == "start" and e["job_id"] == "poked" for e in fake_events(fake)), 30, "poked")
        subprocess.run(["scancel", "--name=rota-r0000-poked"], env=env, check=True)
        stale = run.work / "progress" / "crash.json"
        stale.write_text(json.dumps({"job_id": "crash", "steps_done": 999, "finished": False}))
        an_hour_ago = time.time() - 3600
        os.utime(stale, (an_hour_ago, an_hour_ago))
        # round 1: drain the node healthy-b runs on; resume it once round 2 has started
        start_b = run.wait_event(
            lambda e: e["event"] == "job_start" and e["job_id"] == "healthy-b" and e["round"] == 1, 120, "round 1"
        )
        drained = start_b["nodes"][0]
        # drain it under a running job (a job not yet started there would never start: NOT_RUN)
        wait_for(
            lambda: any(
                e["event"] == "start" and e["job_id"] == "healthy-b" and e["round"] == "1" for e in fake_events(fake)
            ),
            60,
            "healthy-b to run in round 1",
        )
        subprocess.run(
            ["scontrol", "update", f"nodename={drained}", "state=drain", "reason=rota-test"], env=env, check=True
        )
        run.wait_event(lambda e: e["event"] == "round_start" and e["round"] == 2, 120, "round 2")
        subprocess.run(["scontrol", "update", f"nodename={drained}", "state=resume"], env=env, check=True)
        status = run.finish(600)
    events = run.events()
    output = run.output()
    assert status == 1, output
    assert "failed: crash:" in output and "failed: stubborn:" in output
    saved = state_jobs(run.state)
    assert {j for j, e in saved.items() if e["status"] == "failed"} == {"crash", "stubborn"}
    assert all(saved[j]["status"] == "finished" for j in ("healthy-a", "healthy-b", "gang", "poked")), saved
    given_up = [e for e in events if e["event"] == "job_given_up"]
    assert sorted(e["job_id"] for e in given_up) == ["crash", "stubborn"]
    ends = {(e["job_id"], e["round"]): e for e in events if e["event"] == "job_end"}
    assert ends[("stubborn", 0)]["state"] == "killed" and ends[("crash", 0)]["state"] == "failed"
    assert ends[("poked", 0)]["state"] == "cancelled"
    assert not [e for e in events if e["event"] == "job_failed" and e["job_id"] == "poked"]
    # the stale report was not read as crash's: it was never credited a step
    assert any(e["event"] == "warning" and "crash.json: written before round 0" in e["text"] for e in events)
    assert saved["crash"]["progress"] == 0
    # the drained node: reported lost, not planned on while drained, then back
    lost = [e for e in events if e["event"] == "node_lost"]
    assert [(e["node"], "drained" in e["reason"]) for e in lost] == [(drained, True)]
    assert any(e["event"] == "node_back" and e["node"] == drained for e in events)
    plans = [e for e in events if e["event"] == "plan"]
    assert any(drained in e["unusable_nodes"] for e in plans)
    starts = [e for e in events if e["event"] == "job_start"]
    assert not [e for e in starts if e["round"] == 2 and drained in e["nodes"]]
    _no_orphans(fake)
    _credited_equals_checkpoints(run.state, fake, ["healthy-a", "healthy-b", "gang", "poked", "crash"])
    # one log per job across every round, appended
    logs = run.work / "launch" / "logs"
    assert sorted(p.name for p in logs.glob("*.log")) == sorted(f"{j}.log" for j in saved)
    rounds_b = {r for (j, r), e in ends.items() if j == "healthy-b" and e["state"] != "not_run"}
    assert len(rounds_b) >= 3
    assert (logs / "healthy-b.log").read_text().count("fake_train start job=healthy-b") == len(rounds_b)


def test_ctrl_c_stops_after_the_round_and_a_new_run_continues(slurm, tmp_path):
    env = environment(slurm.env())
    fake, jobs = fake_jobs(
        tmp_path,
        {"one": ("ResNet-18,64,1", 2500, "--rate-scale 2"), "two": ("LM,20,1", 2500, "--rate-scale 2")},
    )
    args = common_args(jobs, 20, 6)
    with start_run(tmp_path, "slurm", env, *args) as run:
        run.wait_event(lambda e: e["event"] == "job_start", 60, "a job's start")
        run.proc.send_signal(signal.SIGINT)
        status = run.finish(120)
    assert status == 128 + signal.SIGINT, run.output()
    events = run.events()
    # the round ran to its end: both jobs ended by themselves (completed), nothing cancelled
    assert {e["job_id"]: e["state"] for e in events if e["event"] == "job_end"} == {
        "one": "completed",
        "two": "completed",
    }
    assert (run.work / "reports" / "round-0000.json").exists()
    assert json.loads(run.state.read_text())["launch"]["launched_round"] == 0
    _no_orphans(fake)

    with start_run(tmp_path, "slurm", env) as again:  # the state names its inputs
        status = again.finish(300)
    assert status == 0, again.output()
    events = again.events()
    assert len([e for e in events if e["event"] == "round_start" and e["round"] == 0]) == 1, "round 0 ran twice"
    saved = state_jobs(again.state)
    assert saved["one"]["status"] == saved["two"]["status"] == "finished"
    _credited_equals_checkpoints(again.state, fake, ["one", "two"])
    _no_orphans(fake)


def test_a_second_ctrl_c_cancels_the_round_now_and_nothing_is_lost(slurm, tmp_path):
    env = environment(slurm.env())
    fake, jobs = fake_jobs(
        tmp_path,
        {"one": ("ResNet-18,64,1", 6000, "--rate-scale 2"), "two": ("LM,20,1", 6000, "--rate-scale 2")},
    )
    with start_run(tmp_path, "slurm", env, *common_args(jobs, 120, 10)) as run:
        run.wait_event(lambda e: e["event"] == "job_start", 60, "a job's start")
        wait_for(lambda: len([e for e in fake_events(fake) if e["event"] == "start"]) == 2, 60, "both jobs to run")
        run.proc.send_signal(signal.SIGINT)
        time.sleep(1)
        run.proc.send_signal(signal.SIGINT)
        status = run.finish(90)  # well before the 120 s round's end
    assert status == 128 + signal.SIGINT, run.output()
    events = run.events()
    assert any(e["event"] == "run_stop" for e in events)
    assert json.loads((run.work / "reports" / "round-0000.json").read_text())["interrupted"] is True
    _no_orphans(fake)

    with start_run(tmp_path, "slurm", env, "--round-length", "30", "--grace", "8") as again:
        status = again.finish(400)
    assert status == 0, again.output()
    events = again.events()
    assert not [e for e in events if e["event"] == "job_failed"], "an operator's cancel is nobody's failure"
    assert len([e for e in events if e["event"] == "round_start" and e["round"] == 0]) == 1
    _credited_equals_checkpoints(again.state, fake, ["one", "two"])
    _no_orphans(fake)


def test_the_reference_trainer_under_rota_run(slurm, tmp_path):
    torch = pytest.importorskip("torch", reason="the reference trainer needs torch (the profiler extra)")
    env = environment(slurm.env())
    trainer = DATA.parent / "examples" / "train_reference.py"
    ckpt = tmp_path / "ckpt"
    command = (
        f"{shlex.quote(sys.executable)} {shlex.quote(str(trainer))} --checkpoint-dir "
        f"{shlex.quote(str(ckpt))}/$ROTA_JOB_ID --step-time 0.05 --log-every 0"
    )
    rows = ["job_id,model,batch_size,scale_factor,total_steps,command"]
    rows += [f'{jid},{model},300,"{command}"' for jid, model in (("ref-a", "ResNet-18,64,1"), ("ref-b", "LM,20,1"))]
    (tmp_path / "jobs.csv").write_text("\n".join(rows) + "\n")
    with start_run(tmp_path, "slurm", env, *common_args(tmp_path / "jobs.csv", 20, 6)) as run:
        status = run.finish(400)
    assert status == 0, run.output()
    saved = state_jobs(run.state)
    for jid in ("ref-a", "ref-b"):
        assert saved[jid]["status"] == "finished"
        step = torch.load(ckpt / jid / "latest.pt", weights_only=False)["step"]
        assert saved[jid]["progress"] == step == 300
    log = (run.work / "launch" / "logs" / "ref-a.log").read_text()
    starts = [e for e in run.events() if e["event"] == "job_start" and e["job_id"] == "ref-a"]
    assert len(starts) >= 2, "finished within a round: nothing was resumed"
    assert "resumed from step" in log


def test_a_launcher_that_refuses_every_round_stops_the_run(slurm, tmp_path):
    """sbatch refuses every script (no such partition): no traceback, no spinning through empty
    rounds; after three refused rounds the run stops with Slurm's error and exit status 2."""
    env = environment(slurm.env())
    fake = tmp_path / "fake"
    fake.mkdir()
    jobs = job_list(tmp_path / "jobs.csv", fake, {"one": ("ResNet-18,64,1", 2500, "")})
    with start_run(tmp_path, "slurm", env, *common_args(jobs, 20, 6, "--partition", "no-such-partition")) as run:
        status = run.finish(120)
    output = run.output()
    assert status == 2, output
    assert "error:" in output and "ran no job in 3 rounds in a row" in output and "Traceback" not in output
    assert "partition" in output.lower()
    assert not [e for e in fake_events(fake) if e["event"] == "start"]
