"""Profiler benchmark: timing overhead against a bare loop, and the spread of
repeated measurements of one model. Prints ratios measured in this run.

    .venv/bin/python benchmarks/bench_profiler.py            # tiny LM on the CPU
    .venv/bin/python benchmarks/bench_profiler.py --model ResNet-18 --batch-size 32 --repeats 5

Overhead: the same step function is timed by `profiler.timing.measure` (1.5 s
measurements with the default 0.25 s windows) and right after by a bare `for` loop over as many steps,
alternately, `--rounds` times; reported are the median of how much longer a
step looks through the profiler (1 / steps_per_s vs the bare loop's per-step
time) and the median share of the timed phase's wall time spent outside timed
windows (the loop's own bookkeeping).

Repeatability: the model is measured `--repeats` times, each in a fresh process
exactly as `rota profile` does; the CV is stdev / mean of steps/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.timing import HostClock, TimingConfig, measure  # noqa: E402


class WallClock(HostClock):
    """HostClock that also adds up the wall time spent inside windows."""

    def __init__(self):
        super().__init__()
        self.inside = 0.0

    def window(self, step, n):
        seconds = super().window(step, n)
        self.inside += seconds
        return seconds


def bare_loop(step, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - start) / n


def overhead(step, rounds: int) -> dict:
    """Alternate short profiler measurements with bare loops of the same steps, so
    both see the same background load; medians over many rounds."""
    # The default 0.25 s windows; 1.5 s per measurement keeps many rounds affordable.
    config = TimingConfig(budget_s=1.5, target_spread=0.0)
    step_ratio, outside_share = [], []
    n = measure(step, config).n_steps  # steps per measurement, for the bare loops
    for i in range(rounds):
        bare_first = i % 2 == 1  # alternate the order so drift over time cancels
        bare = bare_loop(step, n) if bare_first else 0.0
        clock = WallClock()
        began = time.perf_counter()
        m = measure(step, config, clock=clock)
        total = time.perf_counter() - began - m.warmup_seconds
        if not bare_first:
            bare = bare_loop(step, n)
        step_ratio.append((1.0 / m.steps_per_s) / bare)
        outside_share.append((total - m.elapsed_s) / m.elapsed_s)
    return {
        "step_time_ratio": statistics.median(step_ratio),
        "outside_windows_share": statistics.median(outside_share),
        "rounds": rounds,
    }


def repeatability(spec, batch_size, scale: str, config: TimingConfig, repeats: int) -> dict:
    from profiler.devices import cpu_device
    from profiler.processes import run_group
    from profiler.worker import WorkerJob

    cpu = cpu_device()
    job = WorkerJob(spec.builder, batch_size, "cpu", config, scale, dict(spec.options), cpu.cpu_set(0))
    rates, median_rates = [], []
    for _ in range(repeats):
        (r,) = run_group([job], "solo", timeout_s=600)
        if r.status != "ok":
            raise SystemExit(f"measurement failed: {r.status} {r.message}")
        rates.append(r.steps_per_s)
        median_rates.append(1.0 / r.step_time_median_s)
    return {
        "steps_per_s": rates,
        "mean": statistics.mean(rates),
        "cv": _cv(rates),
        "cv_of_inverse_median": _cv(median_rates),
    }


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="LM")
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--scale", default="tiny", choices=["tiny", "full"])
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=10, help="alternations for the overhead test")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch

    import models
    from profiler.devices import cpu_device
    from profiler.fakes import spin

    cpu = cpu_device()
    os.sched_setaffinity(0, cpu.cpu_set(0))  # the core a profiler worker would get
    torch.set_num_threads(len(cpu.cpu_set(0)))
    spec = models.get(args.model)
    batch = None if not spec.batch_sizes else args.batch_size
    config = TimingConfig(budget_s=args.budget)

    built = models.build(spec, models.BuildContext(batch, "cpu", args.scale))
    data = built.make_batch()
    results = {
        "fake_1ms": overhead(lambda: spin(0.001), args.rounds),
        "model": overhead(lambda: built.train_step(built.model, data), args.rounds),
        "repeat": repeatability(spec, batch, args.scale, config, args.repeats),
        "label": f"{spec.model} batch {batch} ({args.scale})",
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    label = results["label"]
    for name, what in (("fake_1ms", "busy-wait step of 1 ms"), ("model", label)):
        r = results[name]
        print(
            f"timing overhead, {what}: profiler step time / bare-loop step time = "
            f"{r['step_time_ratio']:.4f} ({100 * (r['step_time_ratio'] - 1):+.2f} %); "
            f"time outside windows = {100 * r['outside_windows_share']:.3f} % of timed time "
            f"(median of {r['rounds']} alternations)"
        )
    rep = results["repeat"]
    rates = ", ".join(f"{x:.1f}" for x in rep["steps_per_s"])
    print(
        f"repeatability, {label}, {len(rep['steps_per_s'])} fresh-process measurements of "
        f"{args.budget:g} s: steps/s = {rates}; mean {rep['mean']:.1f}, CV {100 * rep['cv']:.2f} % "
        f"(CV of 1 / median step time: {100 * rep['cv_of_inverse_median']:.2f} %)"
    )


if __name__ == "__main__":
    main()
