"""The Slurm driver on a real Slurm when things go wrong: a failing job, a job that cannot start
before the round ends, a submission Slurm refuses, an interrupted driver. Each time it cleans
up after itself, says so in its exit status, and writes the state of every job."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from launchers.slurm_rounds import (
    Placement,
    environment,
    events,
    fake_command,
    job_state,
    queue,
    run_driver,
    wait_for,
    write_schedule,
)
from planner.export import export_schedule, load_context


def _export(tmp_path, placements, commands, round_s):
    schedule = write_schedule(tmp_path / "schedule.json", round_s, placements, commands)
    out = tmp_path / "launch"
    export_schedule("slurm", load_context(schedule), out, grace_s=2, progress_dir=str(tmp_path / "progress"))
    (tmp_path / "progress").mkdir()
    return out


def test_failed_overrunning_and_never_started_jobs_make_the_round_fail(slurm, tmp_path):
    """A job that fails, one that ignores SIGTERM and one still pending at the deadline (its GPUs
    are held by a job outside the plan): exit status 1, states FAILED and CANCELLED, the round
    ends at its length (not at the --time limit, whole minutes), and no minute-long scancel
    retries."""
    env = environment(slurm.env())
    blocker = subprocess.run(
        ["sbatch", "--parsable", "--nodelist=v100-1", "--gres=gpu:v100:4", "--time=5", "--wrap=sleep 300"],
        env=env, capture_output=True, text=True, check=True, cwd=tmp_path,
    ).stdout.strip()  # fmt: skip
    try:
        fake = tmp_path / "fake"
        fake.mkdir()
        out = _export(
            tmp_path,
            [
                Placement(["ok"], "a100", [("a100-node-0", 0)]),
                Placement(["fails"], "a100", [("a100-node-0", 1)]),
                Placement(["overruns"], "a100", [("a100-node-0", 2)]),
                Placement(["waits"], "v100", [("v100-1", 0)]),
            ],
            {
                "ok": fake_command(fake),
                "fails": fake_command(fake, "--fail"),
                "overruns": fake_command(fake, "--ignore-term", "--run-s", "300"),
                "waits": fake_command(fake),
            },
            round_s=8,
        )
        run = run_driver(out, env)
    finally:
        subprocess.run(["scancel", blocker], env=env, check=True)
    assert run.returncode == 1, run.output
    jobs = {j["job_id"]: j for j in run.report["rounds"][0]["jobs"]}
    assert (jobs["ok"]["state"], jobs["ok"]["exit_code"]) == ("COMPLETED", 0)
    assert (jobs["fails"]["state"], jobs["fails"]["exit_code"]) == ("FAILED", 3)
    # Slurm says CANCELLED for both; the driver knows which it never let start and which it killed
    assert jobs["waits"]["slurm_state"] == jobs["overruns"]["slurm_state"] == "CANCELLED"
    assert (jobs["waits"]["state"], jobs["overruns"]["state"]) == ("NOT_RUN", "KILLED")
    # the round ends when the last job left the queue: after the killed job's KillWait, not at 8 s
    assert run.report["rounds"][0]["ended_at"] > run.report["rounds"][0]["deadline_at"]
    assert run.report["exit_status"] == 1
    # scancel used to retry for 95 s; Slurm's own limit would have been 1 minute (+ KillWait=5 s)
    assert run.seconds < 40, f"the round of 8 s took {run.seconds:.0f} s"
    log = events(fake)
    assert {e["job_id"] for e in log if e["event"] == "start"} == {"ok", "fails", "overruns"}
    assert [e["event"] for e in log if e["job_id"] == "overruns"][0:2] == ["start", "signal"]
    assert not [e for e in log if e["job_id"] == "overruns" and e["event"] == "stop"], "killed, not stopped"


def test_a_refused_submission_cancels_what_was_submitted(slurm, tmp_path):
    env = environment(slurm.env())
    out = _export(
        tmp_path,
        [Placement(["first"], "a100", [("a100-node-0", 0)]), Placement(["second"], "a100", [("a100-node-0", 1)])],
        {"first": "sleep 300", "second": "sleep 300"},
        round_s=120,
    )
    second = out / "round-0000" / "second.sbatch"
    second.write_text(second.read_text().replace("--gres=gpu:a100:1", "--gres=gpu:no-such-type:1"))
    run = run_driver(out, env, timeout_s=60)
    assert run.returncode == 2, run.output
    (rnd,) = run.report["rounds"]
    assert "sbatch round-0000/second.sbatch failed" in rnd["error"]
    (first,) = rnd["jobs"]
    assert first["job_id"] == "first" and first["state"] == "CANCELLED"
    assert not queue(env)


def test_an_interrupted_driver_cancels_its_jobs(slurm, tmp_path):
    env = environment(slurm.env())
    fake = tmp_path / "fake"
    fake.mkdir()
    out = _export(
        tmp_path,
        [Placement(["j"], "t4", [("t4-0", 0), ("t4-1", 0)])],
        {"j": fake_command(fake, "--ignore-term")},
        round_s=120,
    )
    driver = subprocess.Popen([str(out / "driver.sh")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: len([e for e in events(fake) if e["event"] == "start"]) == 2, 30, "both ranks to start")
        driver.send_signal(signal.SIGINT)
        output = driver.communicate(timeout=60)[0].decode()
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 128 + signal.SIGINT, output
    report = json.loads((tmp_path / "progress-slurm-state.json").read_text())
    ((job,),) = [r["jobs"] for r in report["rounds"]]
    assert job["state"] == "CANCELLED" and job_state(env, job["slurm_job_id"]) == "CANCELLED"
    assert not queue(env)
    time.sleep(1)
    still = subprocess.run(["pgrep", "-f", str(fake)], capture_output=True, text=True).stdout.split()
    assert not still, "the job's processes are gone"
