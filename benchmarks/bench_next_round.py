"""Next-round planning latency with 1000 active jobs.

A launcher calls `rota plan-next` at every round boundary. One call re-reads the
table and cluster, reads the state and the progress report, plans one round and
writes the schedule and the new state. Measured here, in process and as a
fresh `rota` process (which adds interpreter start and imports):
- steady state: faithful progress of the jobs that ran, no re-solve;
- a job finished early (the policy re-solves);
- a job arrived (re-solve).

Run: .venv/bin/python benchmarks/bench_next_round.py [--jobs 1000] [--calls 20]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.cli.plan import write_compact_schedule  # noqa: E402
from planner.formats.cluster import read_cluster  # noqa: E402
from planner.formats.jobs import read_jobs  # noqa: E402
from planner.formats.table import read_table  # noqa: E402
from planner.modes.next_round import next_round  # noqa: E402
from planner.modes.state import read_progress, read_state, write_state  # noqa: E402

DATA = ROOT / "data"
CLUSTER_YAML = """format: rota.cluster/v1
worker_types:
  a100: {gpus: 64, gpus_per_node: 8}
  v100: {gpus: 128, gpus_per_node: 8}
  t4: {gpus: 128, gpus_per_node: 4}
"""


def make_inputs(folder: Path, n_jobs: int, seed: int = 0) -> tuple[Path, Path]:
    """1000 long jobs of the demo table's job types (so none finishes while measured)."""
    table = read_table(DATA / "throughputs.csv")
    rng = random.Random(seed)
    types = [jt for jt in table.job_types if all(table.solo(w, jt) > 0 for w in ("a100", "v100", "t4"))]
    lines = ["job_id,model,batch_size,scale_factor,duration_s,priority_weight,command"]
    for i in range(n_jobs):
        jt = rng.choice(types)
        bs = "" if jt.batch_size is None else jt.batch_size
        lines.append(
            f"job{i:04d},{jt.model},{bs},{jt.scale_factor},{rng.uniform(2e5, 1e6):.0f},"
            f"{rng.choice([1, 1, 2])},python train.py --job job{i:04d}"
        )
    jobs = folder / "jobs.csv"
    jobs.write_text("\n".join(lines) + "\n")
    cluster = folder / "cluster.yaml"
    cluster.write_text(CLUSTER_YAML)
    return jobs, cluster


def faithful_progress(schedule: dict, done: dict[str, float]) -> dict:
    reports = []
    for a in schedule["rounds"][-1]["assignments"]:
        for jid, n in a["planned_steps"].items():
            done[jid] = done.get(jid, schedule["jobs"][jid]["steps_done_at_start"]) + n
            reports.append({"job_id": jid, "steps_done": done[jid]})
    rnd = schedule["rounds"][-1]
    return {"format": "rota.progress/v1", "round": rnd["index"], "time_s": rnd["end_s"], "jobs": reports}


def one_call(folder: Path, cluster_path: Path, jobs_path: Path | None = None) -> tuple[float, dict, dict]:
    """Everything a `rota plan-next` call does, in process; returns (seconds, schedule, timings)."""
    started = time.perf_counter()
    table_path = DATA / "throughputs.csv"
    table, cluster = read_table(table_path), read_cluster(cluster_path)
    state_path, progress_path = folder / "state.json", folder / "progress.json"
    state = read_state(state_path) if state_path.exists() else None
    jobs = read_jobs(jobs_path, table=table, cluster=cluster) if jobs_path else None
    progress = read_progress(progress_path) if progress_path.exists() else None
    result = next_round(
        table, cluster, state=state, jobs=jobs, progress=progress, inputs={"table": table_path, "cluster": cluster_path}
    )
    write_compact_schedule(result.schedule, folder / "round.json")
    write_state(result.state, state_path)
    return time.perf_counter() - started, result.schedule.to_json(), result.timings


def _cli_command(options: list[str]) -> list[str]:
    """`rota plan-next` if the CLI has it, else the same command function in a bare typer app."""
    from planner.cli import app

    if any(c.name == "plan-next" for c in app.registered_commands):
        return [sys.executable, "-m", "planner.cli", "plan-next", *options]
    script = (
        "import sys, typer; from planner.cli import user_errors; "
        "from planner.cli.plan import plan_next_round_command as f; "
        "app = typer.Typer(); app.command('plan-next')(user_errors(f)); app.command('x')(lambda: None); app()"
    )
    return [sys.executable, "-c", script, "plan-next", *options]


def summary(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]
    return f"median {statistics.median(values) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms   (n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--cli-calls", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        jobs_path, cluster_path = make_inputs(folder, args.jobs)
        first, schedule, _ = one_call(folder, cluster_path, jobs_path)
        active = schedule["next_round"]["active_jobs"]
        state_kb = (folder / "state.json").stat().st_size / 1024
        done: dict[str, float] = {}
        steady, parts = [], []
        for _ in range(args.calls):
            (folder / "progress.json").write_text(json.dumps(faithful_progress(schedule, done)))
            seconds, schedule, timings = one_call(folder, cluster_path)
            steady.append(seconds)
            parts.append(timings)
        events: dict[str, list[float]] = {"finished": [], "arrived": []}
        for k in range(max(3, args.calls // 4)):
            p = faithful_progress(schedule, done)
            if k % 2 == 0:
                p["jobs"][0]["finished"] = True
                kind = "finished"
            else:
                p["new_jobs"] = [
                    {
                        "job_id": f"new{k}",
                        "model": "ResNet-18",
                        "batch_size": 64,
                        "total_steps": 1e6,
                        "command": "python new.py",
                    }
                ]
                kind = "arrived"
            (folder / "progress.json").write_text(json.dumps(p))
            seconds, schedule, _ = one_call(folder, cluster_path)
            assert schedule["solver"]["resolves"][-1]["time_s"] == schedule["rounds"][0]["start_s"], "re-solved"
            events[kind].append(seconds)
        cli = []
        for _ in range(args.cli_calls):
            (folder / "progress.json").write_text(json.dumps(faithful_progress(schedule, done)))
            options = [
                "--state",
                str(folder / "state.json"),
                "--progress",
                str(folder / "progress.json"),
                "--out",
                str(folder / "round.json"),
                "--json",
            ]
            started = time.perf_counter()
            run = subprocess.run(_cli_command(options), capture_output=True, cwd=ROOT, text=True)
            cli.append(time.perf_counter() - started)
            if run.returncode != 0:
                raise SystemExit(f"plan-next failed: {run.stderr or run.stdout}")
            schedule = json.loads((folder / "round.json").read_text())
    step = statistics.median(t["step_s"] for t in parts)
    restore = statistics.median(t["restore_s"] for t in parts)
    save = statistics.median(t["save_s"] for t in parts)
    print(
        f"next-round planning, {active} active jobs, cluster 64 a100 + 128 v100 + 128 t4, "
        f"policy max_min_fairness_perf, state file {state_kb:.0f} KiB"
    )
    print(f"  first call (job list, first solve)   {first * 1000:7.1f} ms")
    print(f"  steady state (no re-solve)           {summary(steady)}")
    print(
        f"     of which restore {restore * 1000:.1f} ms, plan the round {step * 1000:.1f} ms, "
        f"schedule + state {save * 1000:.1f} ms (files read/written: the rest)"
    )
    print(f"  a job finished early (re-solve)      {summary(events['finished'])}")
    print(f"  a job arrived (re-solve)             {summary(events['arrived'])}")
    print(f"  as a fresh process (plan-next)       {summary(cli)}   (interpreter start and imports included)")


if __name__ == "__main__":
    main()
