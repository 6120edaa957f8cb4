"""The run loop's own cost per round (plan + export + launch + collect), without the jobs' time.

Target (issue: `rota run`): at most 2 s per round on the test Slurm and the test Ray with 30 s
rounds. Each round's cost is what `rota run` itself logs in its `round_end` event (`loop_s`:
planning, including the launcher's node states; writing and starting the round; collecting it),
so the figures are the command's own, on real launchers: a single-host Slurm (needs root and
Debian's slurm-wlm, as the integration tests do) and a local Ray cluster of CPU-only raylets
posing as GPU nodes, both started here. A launcher that cannot start here is named and skipped.

    python benchmarks/bench_run_loop.py [--rounds 3] [--jobs 6] [--launcher slurm|ray|both]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from launchers.slurm_cluster import SlurmCluster, missing_tools  # noqa: E402

from planner.formats.cluster import read_cluster  # noqa: E402

TARGET_S = 2.0
MODELS = ["ResNet-18,64,1", "LM,20,1", "ResNet-50,32,1", "Transformer,64,1", "Recommendation,1024,1", "CycleGAN,,1"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--launcher", choices=["slurm", "ray", "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="2 rounds")
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    worst = []
    if args.launcher in ("slurm", "both"):
        worst += on_slurm(rounds, args.jobs)
    if args.launcher in ("ray", "both"):
        worst += on_ray(rounds, args.jobs)
    if worst:
        print(
            f"worst round on any launcher: {max(worst):.3f} s; target <= {TARGET_S} s: "
            f"{'met' if max(worst) <= TARGET_S else 'NOT met'}"
        )
    return 0


def on_slurm(rounds: int, n_jobs: int) -> list[float]:
    missing = missing_tools()
    if missing or os.geteuid() != 0:
        why = f"not installed: {', '.join(missing)}" if missing else "slurmd must run as root"
        print(f"slurm: skipped, no test Slurm here ({why}); nothing measured")
        return []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        slurm = SlurmCluster(read_cluster(ROOT / "data" / "cluster.yaml"), work / "slurm")
        (work / "slurm").mkdir()
        slurm.start()
        try:
            events = run(work, "slurm", slurm.env(), rounds, n_jobs, ROOT / "data" / "cluster.yaml")
        finally:
            slurm.stop()
    return table("the test Slurm", events, n_jobs)


def on_ray(rounds: int, n_jobs: int) -> list[float]:
    try:
        import ray  # noqa: F401
        from launchers.ray_cluster import FakeNode, LocalRayCluster
    except ImportError as exc:
        print(f"ray: skipped, ray cannot be imported ({exc}); nothing measured")
        return []
    spec = read_cluster(ROOT / "data" / "cluster.yaml")
    nodes = [FakeNode(n, w.gpus_per_node, name.upper()) for name, w in spec.worker_types.items() for n in w.nodes]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cluster = LocalRayCluster(nodes)
        try:
            cluster.start()
        except (RuntimeError, OSError) as exc:
            cluster.stop()
            print(f"ray: skipped, a local Ray cluster did not start ({exc}); nothing measured")
            return []
        try:
            events = run(
                work,
                "ray",
                dict(os.environ),
                rounds,
                n_jobs,
                ROOT / "data" / "cluster.yaml",
                "--address",
                cluster.address,
            )
        finally:
            cluster.stop()
    return table(f"a local Ray cluster of {len(nodes)} raylets", events, n_jobs)


def table(where: str, events: list[dict], n_jobs: int) -> list[float]:
    costs = [sum(e["loop_s"].values()) for e in events if e["event"] == "round_end"]
    plans = [e["loop_s"].get("plan_s", 0.0) for e in events if e["event"] == "round_end"]
    if not costs:
        print(f"{where}: no round ended; nothing measured")
        return []
    print(f"\n{len(costs)} rounds of 30 s on {where}, {n_jobs} jobs")
    print("round  plan+nodes (s)  export+submit (s)  collect (s)  total (s)")
    for e in (e for e in events if e["event"] == "round_end"):
        c = e["loop_s"]
        total = sum(c.values())
        plan, launch, collect = c.get("plan_s", 0.0), c.get("launch_s", 0.0), c.get("collect_s", 0.0)
        print(f"{e['round']:5d}  {plan:14.3f}  {launch:17.3f}  {collect:11.3f}  {total:9.3f}")
    worst = max(costs)
    print(
        f"median {statistics.median(costs):.3f} s, worst {worst:.3f} s per round; target <= {TARGET_S} s: "
        f"{'met' if worst <= TARGET_S else 'NOT met'} ({worst / TARGET_S:.2f} of the target)"
    )
    print(f"plan share of the worst round: {max(plans):.3f} s")
    return costs


def run(
    work: Path, launcher: str, base_env: dict[str, str], rounds: int, n_jobs: int, cluster: Path, *more: str
) -> list[dict]:
    fake = work / "fake"
    fake.mkdir()
    trainer = ROOT / "tests" / "launchers" / "fake_train.py"
    lines = ["job_id,model,batch_size,scale_factor,total_steps,command"]
    for k in range(n_jobs):
        # long jobs: every round runs them all (a bounded run: --ignore-term would cost KillWait)
        lines.append(f"job{k},{MODELS[k % len(MODELS)]},10000000,{sys.executable} {trainer}")
    (work / "jobs.csv").write_text("\n".join(lines) + "\n")
    env = {**base_env, "FAKE_TRAIN_DIR": str(fake), "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable, "-m", "planner.cli", "run", launcher, "--state", str(work / "state.json"),
        "--jobs", str(work / "jobs.csv"), "--table", str(ROOT / "data" / "throughputs.csv"),
        "--cluster", str(cluster), "--round-length", "30", "--grace", "8", "--no-live", *more,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = work / "state.json.run" / "events.jsonl"
    try:
        import time

        while proc.poll() is None:
            done = log.exists() and log.read_text().count('"event": "round_end"') >= rounds
            if done:
                proc.send_signal(2)  # stop after the running round
                proc.send_signal(2)  # and now: the next round's jobs are not needed
                break
            time.sleep(1)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return [json.loads(line) for line in log.read_text().splitlines()]


if __name__ == "__main__":
    sys.exit(main())
