"""The compiled round loop (EngineConfig.round_loop = "compiled") against the Python reference."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba")

from conftest import DATA  # noqa: E402

from planner.formats.cluster import parse_cluster  # noqa: E402
from planner.formats.gavel_json import import_gavel  # noqa: E402
from planner.formats.inputs import load_cluster  # noqa: E402
from planner.modes.generator import GeneratorConfig, JobGenerator  # noqa: E402
from planner.modes.simulate import SimulationConfig, Workload, run_simulation  # noqa: E402
from planner.policies import make_cluster_policy  # noqa: E402
from planner.rounds import compiled  # noqa: E402
from planner.rounds.engine import Engine, EngineConfig, RoundBatch  # noqa: E402

TABLE = DATA / "gavel" / "simulation_throughputs.json"
# the points whose Gavel simulator times #31's speed target is measured against
RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "gavel_simulator_times.json"


def simulate(loop: str, cluster: str, jobs: int, rate: float, seed: int, multi_gpu: bool = False, policy=None):
    table = import_gavel(TABLE)
    gen = JobGenerator(table, GeneratorConfig(seed=seed, rate_per_hour=rate, multi_gpu=multi_gpu))
    config = SimulationConfig(policy=policy or "max_min_fairness_perf", seed=seed, gavel_compat=True, round_loop=loop)
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


@pytest.mark.parametrize(
    "jobs, rate, limits, status, compiled_before",
    [
        (40, 0.0, {"max_active_jobs": 20}, "saturated", False),  # static: 40 jobs admitted at once, cap 20
        (60, 0.6, {"max_active_jobs": 6}, "saturated", True),  # arrivals push the count over the cap later
        (40, 0.0, {"max_time_s": 5 * 3600.0}, "time_limit", True),
    ],
)
def test_runs_that_stop_early_stop_on_the_same_round(jobs, rate, limits, status, compiled_before):
    """The Python loop checks the watch after every round; a compiled batch must not run past
    the round where that check stops the run (a cap on active jobs is passed after admission)."""
    table = import_gavel(TABLE)
    runs = []
    for loop in ("python", "compiled"):
        gen = JobGenerator(table, GeneratorConfig(seed=2, rate_per_hour=rate))
        config = SimulationConfig(gavel_compat=True, round_loop=loop, **limits)
        runs.append(run_simulation(table, parse_cluster("4:4:4"), Workload(generator=gen, num_jobs=jobs), config))
    py, co = runs
    assert py.status == co.status == status
    assert py.reason == co.reason
    assert py.jobs == co.jobs
    for key in ("rounds", "makespan_s", "censored_jct", "lease_extensions", "lease_opportunities", "utilisation"):
        assert py.metrics.get(key) == co.metrics.get(key), key
    assert (co.metrics["rounds_compiled"] > 0) == compiled_before  # batches ran before the stop


def test_tenant_summaries_are_the_same_with_either_loop(tmp_path):
    """Tenants with weights (no quotas: the compiled loop runs): the per-tenant GPU time is
    summed and listed in one order whichever loop booked it."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "worker_types:\n  k80: {gpus: 4}\n  p100: {gpus: 4}\n  v100: {gpus: 4}\n"
        "tenants:\n  vision: {weight: 2}\n  nlp: {weight: 1}\n  rl: {weight: 1}\n"
    )
    table = import_gavel(TABLE)
    gen = iter(JobGenerator(table, GeneratorConfig(seed=4, rate_per_hour=1.0)))
    entities = ("vision", "nlp", "rl")
    jobs = [dataclasses.replace(next(gen), entity=entities[i % 3]) for i in range(40)]
    runs = []
    for loop in ("python", "compiled"):
        config = SimulationConfig(gavel_compat=True, round_loop=loop)
        runs.append(run_simulation(table, load_cluster(cluster), Workload(jobs=list(jobs)), config))
    py, co = runs
    assert py.status == co.status == "ok" and co.metrics["rounds_compiled"] > 0
    assert json.dumps(py.metrics["tenants"]) == json.dumps(co.metrics["tenants"])  # values and key order
    assert py.jobs == co.jobs


def _recorded_points() -> list[dict]:
    return json.loads(RECORDED.read_text())["points"]


def _run_point(point: dict, loop: str):
    table = import_gavel(TABLE)
    gen = JobGenerator(table, GeneratorConfig(seed=point["seed"], rate_per_hour=point["rate_per_hour"]))
    window = tuple(point["window"]) if point.get("window") else None
    config = SimulationConfig(
        policy=point["policy"], seed=point["seed"], gavel_compat=True, window=window, round_loop=loop
    )
    workload = Workload(generator=gen, num_jobs=point.get("jobs"))
    return run_simulation(table, parse_cluster(point["cluster"]), workload, config)


@pytest.mark.slow
@pytest.mark.parametrize("n", range(len(_recorded_points())))
def test_every_recorded_point_is_the_same_with_either_loop(n):
    """#31: the fast path against the reference on every point bench_simulate.py times."""
    point = _recorded_points()[n]
    py, co = _run_point(point, "python"), _run_point(point, "compiled")
    assert py.status == co.status == "ok"
    assert py.jobs == co.jobs  # every job's arrival, finish, JCT and steps, exactly
    for key in ("rounds", "makespan_s", "jct_s", "utilisation", "lease_extensions", "lease_opportunities",
                "resolves", "idle_after_finish_gpu_s", "window_finished"):  # fmt: skip
        assert py.metrics.get(key) == co.metrics.get(key), key
    # the compiled loop really ran most of the rounds (a silent fallback would pass the checks above)
    assert co.metrics["rounds_compiled"] > 0.9 * co.metrics["rounds"]
    assert "rounds_compiled" not in py.metrics


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


# --- each stop of the compiled call, in lockstep with the Python loop ------------------------------


def _state(e: Engine) -> dict:
    """What the next round depends on (and what the run reports), without building deferred leases
    on the engine itself (reading `mech.previous` would make the next compiled call reload them)."""
    m = e.mech
    leases = m._previous_source() if m._previous_source is not None else m._previous
    return {
        "t": e.t, "n_rounds": e.n_rounds, "finished": e.finished, "busy": dict(e.busy),
        "origin": e._round_origin, "need_update": e.need_update, "order": list(e.order),
        "active": list(e.active), "pending": [job.job_id for job in e.pending],
        "outcomes": {jid: (o.finish_s, o.steps_done) for jid, o in e.outcomes.items()},
        "keys": list(m.keys), "spent": m._spent.tolist(), "deficit": m._deficit.tolist(),
        "worker_time": m.worker_time.tolist(), "last_reset": m.last_reset,
        "alloc": {k: v.tolist() for k, v in m.alloc.items()}, "leases": leases,
        "shuffle": e._shuffle.getstate(), "solves": len(e.solves),
    }  # fmt: skip


def _make(cluster="4:4:4", jobs=20, rate=0.0, seed=1, interval=None, policy="max_min_fairness_perf", **engine):
    """Engine factory: `make(loop)` builds the same Gavel-compat engine with either round loop."""

    def make(loop: str) -> Engine:
        table = import_gavel(TABLE)
        c = parse_cluster(cluster)
        config = SimulationConfig(policy=policy, gavel_compat=True, round_loop=loop, resolve_interval_s=interval)
        pol = make_cluster_policy(policy, c, gavel_compat=True)
        it = iter(JobGenerator(table, GeneratorConfig(seed=seed, rate_per_hour=rate)))
        engine_config = dataclasses.replace(config.engine_config(pol), **engine)
        return Engine(table, c, pol, engine_config, [next(it) for _ in range(jobs)])

    return make


def lockstep(make, until_s: float = math.inf) -> tuple[Engine, Engine, list]:
    """Run the compiled engine call by call and the Python engine round by round up to the same
    round after each call; the states must be equal after every call, and both must end together.
    Returns both engines and what each `step_many` gave (RoundBatch or RoundRecord)."""
    py, co = make("python"), make("compiled")
    items = []
    while (item := co.step_many(until_s)) is not None:
        items.append(item)
        while py.n_rounds < co.n_rounds:
            assert py.step() is not None
        assert _state(py) == _state(co), f"after round {co.n_rounds}"
    assert py.step() is None
    assert _state(py) == _state(co)
    return py, co, items


def _stops(co: Engine, stop: int) -> int:
    return co.compiled_stats["stops"][stop]


def test_a_job_finishing_ends_the_call():
    # every job at t = 0, re-solve at every change: each call runs up to the next completion
    _, co, items = lockstep(_make("4:4:4", 20, 0.0, seed=1, interval=0.0))
    assert _stops(co, compiled.STOP_FINISHED) >= 15
    assert all(isinstance(i, RoundBatch) for i in items)
    assert sum(i.last_finished for i in items) == co.finished == 20


def test_the_next_arrival_and_a_resolve_due_end_the_call():
    # arrivals, Gavel's 1920 s between re-solves: calls end at arrivals and when the interval passes
    _, co, _ = lockstep(_make("4:4:4", 20, 0.8, seed=0))
    assert co.config.min_resolve_interval_s == 1920.0
    assert _stops(co, compiled.STOP_ARRIVAL) > 0
    assert _stops(co, compiled.STOP_RESOLVE) > 0


def test_an_idle_round_ends_the_call_and_python_jumps():
    # the jobs waiting have no allocation yet (re-solve not due): nothing runs, Python jumps ahead
    _, co, _ = lockstep(_make("4:4:4", 20, 0.8, seed=2))
    assert _stops(co, compiled.STOP_IDLE) > 0


def test_until_ends_the_call_after_the_round_that_passes_it():
    until = 6 * 3600.0
    py, co, items = lockstep(_make("4:4:4", 20, 0.8, seed=0), until_s=until)
    assert _stops(co, compiled.STOP_UNTIL) > 0
    # the reference: the Python rounds, one by one; the first call that passes `until` stops at
    # the first round that ends after it
    ref = _make("4:4:4", 20, 0.8, seed=0)("python")
    while (record := ref.step()) is not None and record.end_s <= until:
        pass
    assert record is not None
    first = next(i for i in items if isinstance(i, RoundBatch) and i.ends[-1] > until)
    assert (first.index, float(first.ends[-1])) == (record.index, record.end_s)


def test_max_rounds_ends_the_call_and_the_run():
    py, co, _ = lockstep(_make("4:4:4", 20, 0.8, seed=0, max_rounds=300))
    assert py.n_rounds == co.n_rounds == 300
    assert _stops(co, compiled.STOP_MAX_ROUNDS) > 0
    assert co.finished < 20


# --- cases the compiled call must leave to the Python step -----------------------------------------


def test_a_shuffled_visiting_order_runs_the_python_step():
    # an agnostic policy: Gavel shuffles the worker types every round
    py, co, items = lockstep(_make("4:4:4", 20, 0.8, seed=0, policy="max_min_fairness"))
    assert co.config.visit_order == "shuffle"
    assert co.compiled_stats["calls"] == 0 and not any(isinstance(i, RoundBatch) for i in items)


def test_pairs_run_the_python_step():
    py, co, items = lockstep(_make("4:4:4", 20, 0.8, seed=0, policy="max_min_fairness_packed"))
    python_rounds = [i for i in items if not isinstance(i, RoundBatch)]
    assert any(len(p.jobs) > 1 for r in python_rounds for p in r.placements)  # pairs ran, in Python
    assert co.n_rounds > co.compiled_stats["rounds"]


def _quota_engines():
    from planner.formats.cluster import cluster_from_dict
    from planner.formats.jobs import Job
    from planner.formats.table import JobType, ThroughputTable

    rates = (("g", 1.0), ("h", 2.0))
    records = [{"worker_type": w, "model": "A", "scale_factor": 1, "throughput": r} for w, r in rates]
    table = ThroughputTable.from_records(records)
    cluster = cluster_from_dict(
        {"worker_types": {"g": 4, "h": 2}, "tenants": {"big": {"quota": {"g": 1.5}}, "small": {"weight": 1}}}
    )
    a = JobType("A", None, 1)
    jobs = [Job(f"b{i}", a, 3600.0 * (i + 1), entity="big") for i in range(5)]
    jobs += [Job(f"s{i}", a, 1800.0 * (i + 1), arrival_s=600.0 * i, entity="small") for i in range(4)]

    def make(loop: str) -> Engine:
        policy = make_cluster_policy("max_min_fairness_perf", cluster, gavel_compat=True)
        config = EngineConfig(gavel_compat=True, keep_rounds=False, min_resolve_interval_s=1920.0, round_loop=loop)
        return Engine(table, cluster, policy, config, list(jobs))

    return make


def test_tenant_quotas_run_the_python_step():
    py, co, _ = lockstep(_quota_engines())
    assert co.compiled_stats["calls"] == 0
    assert py.quota_credit == co.quota_credit and py.quota_credit


@pytest.mark.parametrize("restart", [False, True])
def test_rota_rounds_run_the_python_step(restart):
    # outside Gavel's compatibility mode (whole gangs, backfill); restart costs exist only there
    from planner.rounds.restart import RestartCosts

    table = import_gavel(TABLE)
    cluster = parse_cluster("4:4:4")

    def make(loop: str) -> Engine:
        policy = make_cluster_policy("max_min_fairness_perf", cluster)
        config = SimulationConfig(seed=2).engine_config(policy)
        config.round_loop = loop
        it = iter(JobGenerator(table, GeneratorConfig(seed=2, rate_per_hour=0.8)))
        costs = RestartCosts(override=120.0) if restart else None
        return Engine(table, cluster, policy, config, [next(it) for _ in range(15)], restart=costs)

    py, co, items = lockstep(make)
    assert not co.config.gavel_compat
    assert co.compiled_stats["calls"] == 0 and not any(isinstance(i, RoundBatch) for i in items)
    if restart:
        assert py.restart_tally is not None and co.restart_tally is not None
        assert py.restart_tally == co.restart_tally and py.restart_tally.starts > 0


def test_launcher_edits_between_compiled_calls_match_the_python_engine():
    # what a launcher reports between rounds: a job reopened (its allocation row is gone until the
    # next re-solve, so it must wait), one withdrawn, a lease moved, steps corrected
    make = _make("4:4:4", 20, 0.8, seed=0)
    py, co = make("python"), make("compiled")
    edits = 0
    while (item := co.step_many()) is not None:
        while py.n_rounds < co.n_rounds:
            assert py.step() is not None
        assert _state(py) == _state(co)
        if not isinstance(item, RoundBatch) or edits >= 4 or not item.finished:
            continue
        edits += 1
        done = item.finished[0]
        running = [p for p in co.mech.previous.values() if p.jobs[0] != done]
        for e in (py, co):
            e.reopen(done)
            e.set_steps_done(done, e.outcomes[done].job.total_steps - 1000)
            if running:
                jid = running[0].jobs[0]
                e.set_steps_done(jid, e.outcomes[jid].steps_done + 1)
            if edits == 2 and len(running) > 1:
                e.withdraw(running[1].jobs[0], e.t)
            if edits == 3 and running:
                p = running[0]
                e.move_lease(p.jobs[0], p.worker_type, p.gpus)
        assert _state(py) == _state(co)
    assert py.step() is None
    assert edits == 4 and _state(py) == _state(co)


def _simulate_cli(tmp_path, *extra: str):
    from typer.testing import CliRunner

    from planner.cli import app

    args = ["simulate", "-t", str(TABLE), "-c", "4:4:4", "--num-jobs", "12", "--rate", "0.8", "--gavel-compat"]
    return CliRunner().invoke(app, [*args, "-o", str(tmp_path / "sim"), "--json", *extra])


def test_the_cli_runs_either_loop_with_the_same_summary(tmp_path):
    runs = {}
    for loop in ("python", "compiled", "auto"):
        result = _simulate_cli(tmp_path / loop, "--round-loop", loop)
        assert result.exit_code == 0, result.output
        runs[loop] = json.loads((tmp_path / loop / "sim" / "summary.json").read_text())
    for loop in ("compiled", "auto"):
        assert runs[loop]["metrics"]["rounds_compiled"] > 0  # numba is installed: auto compiles
        for key in ("rounds", "jct_s", "makespan_s", "utilisation"):
            assert runs[loop]["metrics"][key] == runs["python"]["metrics"][key], key
    assert runs["python"]["config"]["round_loop"] == "python" and "round_loop" not in runs["auto"]["config"]


def test_the_cli_refuses_an_unknown_loop_and_compiled_without_numba(tmp_path, monkeypatch):
    result = _simulate_cli(tmp_path, "--round-loop", "fast")
    assert result.exit_code == 2 and "unknown round loop 'fast'" in result.output
    from typer.testing import CliRunner

    import planner.cli.simulate as cli_simulate
    from planner.cli import app

    result = CliRunner().invoke(app, ["simulate", "-t", str(TABLE), "-c", "4:4:4", "-n", "5", "--round-loop",
                                      "compiled", "-o", str(tmp_path / "sim")])  # fmt: skip
    assert result.exit_code == 2 and "Gavel-compat simulations only" in " ".join(result.output.split())
    monkeypatch.setattr(cli_simulate, "have_numba", lambda: False)
    result = _simulate_cli(tmp_path, "--round-loop", "compiled")
    assert result.exit_code == 2 and "needs numba" in " ".join(result.output.split()), result.output
    assert not (tmp_path / "sim").exists()


def test_auto_falls_back_to_the_python_loop_without_numba(monkeypatch):
    import planner.modes.simulate as modes_simulate

    monkeypatch.setattr(modes_simulate, "have_numba", lambda: False)
    assert SimulationConfig(gavel_compat=True).engine_round_loop() == "python"
    assert SimulationConfig(gavel_compat=True, round_loop="python").engine_round_loop() == "python"
    with pytest.raises(ValueError, match="unknown round loop"):
        SimulationConfig(round_loop="numba").engine_round_loop()


def test_a_failed_compile_turns_the_loop_off_with_python_results(monkeypatch):
    """numba refusing the kernel (another release, an unwritable cache) must not end the run:
    one warning, then the Python loop, from a state the failed call did not touch."""

    class Refusing:
        signatures: list = []

        def compile(self, signature):
            raise OSError("cache folder is read-only")

    monkeypatch.setattr(compiled, "_kernel", lambda: Refusing())
    monkeypatch.setattr(compiled, "_READY", [])  # as in a fresh process: not compiled yet
    monkeypatch.setattr(compiled, "_OFF", [])
    with pytest.warns(RuntimeWarning, match="compiled round loop is off .OSError: cache folder is read-only"):
        co = simulate("compiled", "4:4:4", 20, 0.8, 1)
    assert compiled.available() is False
    monkeypatch.setattr(compiled, "_OFF", [])
    py = simulate("python", "4:4:4", 20, 0.8, 1)
    assert co.status == py.status == "ok" and co.jobs == py.jobs
    assert co.metrics["rounds_compiled"] == 0 and co.metrics["rounds"] == py.metrics["rounds"]
