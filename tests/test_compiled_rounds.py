"""The compiled round loop (EngineConfig.round_loop = "compiled") against the Python reference."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from planner.formats.cluster import parse_cluster  # noqa: E402
from planner.formats.gavel_json import import_gavel  # noqa: E402
from planner.modes.generator import GeneratorConfig, JobGenerator  # noqa: E402
from planner.modes.simulate import SimulationConfig, Workload, run_simulation  # noqa: E402
from planner.policies import make_cluster_policy  # noqa: E402
from planner.rounds.engine import Engine, RoundBatch  # noqa: E402

from conftest import DATA  # noqa: E402

TABLE = DATA / "gavel" / "simulation_throughputs.json"


def simulate(loop: str, cluster: str, jobs: int, rate: float, seed: int, multi_gpu: bool = False, policy=None):
    table = import_gavel(TABLE)
    gen = JobGenerator(table, GeneratorConfig(seed=seed, rate_per_hour=rate, multi_gpu=multi_gpu))
    config = SimulationConfig(
        policy=policy or "max_min_fairness_perf", seed=seed, gavel_compat=True, round_loop=loop
    )
    return run_simulation(table, parse_cluster(cluster), Workload(generator=gen, num_jobs=jobs), config)


@pytest.mark.parametrize(
    "cluster, jobs, rate, seed, multi_gpu, policy",
    [
        ("8:8:8", 40, 0.8, 0, False, None),
        ("4:4:4", 30, 0.0, 3, False, None),  # static: every job at t = 0
        ("8:8:8", 30, 0.5, 5, True, None),  # gangs now and then: the Python step takes those rounds
        ("6:2:4", 40, 0.5, 7, False, "fifo_perf"),
    ],
)
def test_compiled_rounds_reproduce_the_python_run(cluster, jobs, rate, seed, multi_gpu, policy):
    py = simulate("python", cluster, jobs, rate, seed, multi_gpu, policy)
    co = simulate("compiled", cluster, jobs, rate, seed, multi_gpu, policy)
    assert py.status == co.status == "ok"
    assert py.jobs == co.jobs  # every finish time, JCT, step count, exactly
    for key in ("rounds", "makespan_s", "jct_s", "utilisation", "lease_extensions", "lease_opportunities",
                "resolves", "idle_after_finish_gpu_s"):  # fmt: skip
        assert py.metrics[key] == co.metrics[key], key


def _engine(loop: str) -> Engine:
    table = import_gavel(TABLE)
    cluster = parse_cluster("4:4:4")
    config = SimulationConfig(gavel_compat=True, round_loop=loop)
    policy = make_cluster_policy(config.policy, cluster, gavel_compat=True)
    gen = JobGenerator(table, GeneratorConfig(seed=1, rate_per_hour=0.0))
    it = iter(gen)
    jobs = [next(it) for _ in range(20)]
    return Engine(table, cluster, policy, config.engine_config(policy), jobs)


def test_a_snapshot_after_compiled_rounds_is_the_python_one():
    py, co = _engine("python"), _engine("compiled")
    batches = 0
    while batches < 5:
        item = co.step_many()
        assert item is not None
        batches += isinstance(item, RoundBatch)
    while py.n_rounds < co.n_rounds:
        assert py.step() is not None
    a, b = py.snapshot(), co.snapshot()
    state = ("t", "finished", "busy", "round_origin", "rounds_done", "active", "pending", "need_update", "order")
    assert [getattr(a, f) for f in state] == [getattr(b, f) for f in state]
    assert [(o.job.job_id, o.finish_s, o.steps_done) for o in a.outcomes] == [
        (o.job.job_id, o.finish_s, o.steps_done) for o in b.outcomes
    ]
    assert a.mechanism.previous == b.mechanism.previous
    assert np.array_equal(a.mechanism.worker_time, b.mechanism.worker_time)
    assert a.mechanism.job_time.keys() == b.mechanism.job_time.keys()
    for key in a.mechanism.job_time:
        assert np.array_equal(a.mechanism.job_time[key], b.mechanism.job_time[key])
    # and both go on the same way from there
    while py.step() is not None:
        pass
    while co.step_many() is not None:
        pass
    assert {j: o.finish_s for j, o in py.outcomes.items()} == {j: o.finish_s for j, o in co.outcomes.items()}
