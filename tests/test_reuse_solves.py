"""--reuse-solves: LAS gives the last solve's shares again while the job classes stay
(planner/policies/reuse.py): when it reuses, what it gives, its limit, its memory across
plan-next calls, and the options that turn it on."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import DATA, make_problem
from test_state import canonical, faithful
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.formats.cluster import parse_cluster, read_cluster
from planner.formats.gavel_json import import_gavel
from planner.formats.jobs import Job
from planner.formats.table import read_table
from planner.modes.generator import GeneratorConfig, JobGenerator
from planner.modes.next_round import make_policy_from, next_round
from planner.modes.plan import build_schedule
from planner.modes.simulate import SimulationConfig, Workload, run_simulation
from planner.policies import MaxMinFairness, make_policy
from planner.policies.base import Status
from planner.policies.reuse import ReusingMaxMinFairness
from planner.rounds.engine import Engine, EngineConfig

TABLE = read_table(DATA / "throughputs.csv")
CLUSTER = read_cluster(DATA / "cluster.yaml")
GAVEL = DATA / "gavel" / "simulation_throughputs.json"


def same_class_jobs() -> list[Job]:
    """Two job types, three jobs each, of different lengths and arrivals: many re-solves where
    only class sizes change (a job of a class that stays finishes, or joins one)."""
    base = [j for j in _demo_jobs() if j.scale_factor == 1][:2]
    jobs = []
    for k, template in enumerate(base):
        for i in range(3):
            jobs.append(
                dataclasses.replace(
                    template,
                    job_id=f"{template.job_id}-{i}",
                    total_steps=template.total_steps * (0.4 + 0.3 * i),
                    arrival_s=[0.0, 0.0, 900.0][i] + 300.0 * k,
                )
            )
    return jobs


def _demo_jobs() -> list[Job]:
    from planner.formats.jobs import read_jobs

    return read_jobs(DATA / "jobs.csv", table=TABLE, cluster=CLUSTER)


def plan_engine(jobs, reuse: int) -> Engine:
    policy = make_policy_from("max_min_fairness_perf", {"reuse_solves": reuse})
    engine = Engine(TABLE, CLUSTER, policy, EngineConfig(keep_rounds=True), jobs)
    engine.run()
    return engine


def statuses(engine: Engine) -> list[str]:
    return [s.allocation.status for s in engine.solves if s.job_ids]


def test_only_las_without_packing_gets_the_reusing_policy():
    assert type(make_policy("max_min_fairness_perf")) is MaxMinFairness
    assert isinstance(make_policy("max_min_fairness_perf", reuse_solves=2), ReusingMaxMinFairness)
    assert isinstance(make_policy("max_min_fairness", reuse_solves=1), ReusingMaxMinFairness)
    assert type(make_policy("max_min_fairness_packed", reuse_solves=2)) is MaxMinFairness


def test_a_reuse_gives_each_job_its_class_share_from_the_last_solve():
    policy = ReusingMaxMinFairness(reuse_limit=5)
    first = make_problem([[1.0, 2.0], [1.0, 2.0], [3.0, 1.0]], [2, 2])
    solved = policy.allocate(first)
    assert solved.status == Status.OPTIMAL and policy.reused == 0
    # the same two classes, the first one bigger and in another order: no solve
    again = make_problem([[3.0, 1.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0]], [2, 2])
    reused = policy.allocate(again)
    assert reused.status == Status.REUSED and policy.reused == 1
    assert np.array_equal(reused.x, solved.x[[2, 0, 0, 0]])
    # no LP was solved for these jobs: no objective of its own, the last solve's beside it
    assert reused.objective is None and reused.info == {"reused_in_row": 1, "last_solve_objective": solved.objective}
    # a new class: solves (and a real solve of this problem differs from the reused shares)
    new = make_problem([[3.0, 1.0], [1.0, 2.0], [5.0, 5.0]], [2, 2])
    assert policy.allocate(new).status == Status.OPTIMAL and policy.reused == 1


@pytest.mark.parametrize(
    "changed",
    [
        {"capacity": [1, 2]},  # a drained node: another LP
        {"names": ["a", "b"]},  # other worker types
        {"weight": [1, 1, 2]},  # a weight is part of the class
        {"scale": [1, 1, 2]},
    ],
)
def test_anything_else_the_lp_reads_makes_it_solve(changed):
    policy = ReusingMaxMinFairness(reuse_limit=5)
    rows = [[1.0, 2.0], [1.0, 2.0], [3.0, 1.0]]
    policy.allocate(make_problem(rows, [2, 2]))
    args = {"capacity": [2, 2], **changed}
    problem = make_problem(rows, args.pop("capacity"), **args)
    assert policy.allocate(problem).status == Status.OPTIMAL and policy.reused == 0


@pytest.mark.parametrize("limit", [1, 2])
def test_reuses_in_a_row_stay_within_the_limit(limit):
    engine = plan_engine(same_class_jobs(), limit)
    seen = statuses(engine)
    assert Status.REUSED in seen  # the trace does exercise the reuse
    run = longest = 0
    for status in seen:
        run = run + 1 if status == Status.REUSED else 0
        longest = max(longest, run)
    assert longest <= limit
    assert engine.policy.reused == seen.count(Status.REUSED)


def test_without_the_option_every_resolve_solves():
    assert Status.REUSED not in statuses(plan_engine(same_class_jobs(), 0))


@pytest.mark.parametrize("limit, method", [(1, "ipm"), (2, "ipm"), (0, "compiled-ipm"), (2, "compiled-ipm")])
def test_plan_next_calls_reuse_exactly_when_one_plan_does(limit, method):
    """The last solve's shares and the count in a row travel in the state file: K single-round
    calls give the rounds of one K-round plan, reuses included (with a limit of 1, a count
    lost between calls would reuse twice in a row). The solver method travels too (#31:
    `plan-next` reproduces the simulation round for round with the compiled interior point)."""
    if method == "compiled-ipm":
        pytest.importorskip("numba")
    jobs = same_class_jobs()
    options = {"reuse_solves": limit, "method": method}
    engine = Engine(TABLE, CLUSTER, make_policy_from("max_min_fairness_perf", options), EngineConfig(), jobs)
    plan = build_schedule(
        engine.run(), inputs={}, policy="max_min_fairness_perf", options={}, config=engine.config
    ).to_json()
    assert (Status.REUSED in statuses(engine)) == (limit > 0)
    state, progress, got = None, None, []
    done = {j.job_id: j.steps_done for j in jobs}
    memories = []
    for _ in range(len(plan["rounds"]) + 1):
        step = next_round(
            TABLE,
            CLUSTER,
            state=state,
            jobs=jobs if state is None else None,
            policy="max_min_fairness_perf" if state is None else None,
            policy_options=options if state is None else None,
            progress=progress,
        )
        state = json.loads(json.dumps(step.state))  # through the file format
        memories.append(json.dumps(state["policy"], sort_keys=True))
        if not step.schedule.rounds:
            break
        got += step.schedule.rounds
        progress = faithful(step.schedule.to_json(), done)
    assert canonical(got) == canonical(plan["rounds"])
    assert state["policy"]["options"]["method"] == method
    if limit:
        assert state["policy"]["options"]["reuse_solves"] == limit
        assert any('"in_row": 1' in m for m in memories)  # a reuse was carried from one call to the next


def _solved_state(**policy) -> dict:
    solver = ReusingMaxMinFairness(reuse_limit=3, **policy)
    solver.allocate(make_problem([[1.0, 2.0], [3.0, 1.0]], [2, 2]))
    return json.loads(json.dumps(solver.get_state()))


@pytest.mark.parametrize(
    "saved_by, resumed_by",
    [
        ({}, {"perf_aware": False}),  # another LAS variant: the same keys may mean another LP
        ({}, {"method": "simplex"}),
        ({"perf_aware": False}, {}),
    ],
)
def test_a_solve_by_another_variant_or_method_is_not_reused(saved_by, resumed_by):
    resumed = ReusingMaxMinFairness(reuse_limit=3, **resumed_by)
    resumed.set_state(_solved_state(**saved_by))
    assert resumed._last is None
    same = ReusingMaxMinFairness(reuse_limit=3, **saved_by)
    same.set_state(_solved_state(**saved_by))
    assert same._last is not None and same._last.in_row == 0


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.pop("shares"), "classes and shares"),
        (lambda s: s["shares"].append([0.5, 0.5]), "classes and shares"),
        (lambda s: s["shares"][0].pop(), "each share must be a list of 2"),
        (lambda s: s["shares"][0].__setitem__(0, 1.5), r"\[0, 1\]"),
        (lambda s: s["classes"][0].__setitem__(0, "fast"), "each class"),
        (lambda s: s.__setitem__("capacity", [2]), "capacity must be a list of 2"),
        (lambda s: s.__setitem__("worker_types", "w0"), "worker_types"),
        (lambda s: s.__setitem__("in_row", -1), "in_row"),
        (lambda s: s.__setitem__("objective", "high"), "objective"),
    ],
)
def test_a_malformed_saved_solve_is_a_one_line_error(edit, message):
    state = _solved_state()
    edit(state["last_solve"])
    with pytest.raises(InputError, match=message):
        ReusingMaxMinFairness(reuse_limit=3).set_state(state)


def test_one_lp_row_per_job_or_tenant_quotas_have_no_classes_to_reuse():
    problem = make_problem([[1.0, 2.0], [1.0, 2.0]], [2, 2])
    assert ReusingMaxMinFairness(aggregate=False).class_keys(problem) is None
    assert ReusingMaxMinFairness().class_keys(problem) == [(1.0, 2.0, 1.0, 1.0)] * 2


def _gavel_run(reuse: int):
    table = import_gavel(GAVEL)
    gen = JobGenerator(table, GeneratorConfig(seed=0, rate_per_hour=0.8))
    config = SimulationConfig(policy="max_min_fairness_perf", seed=0, gavel_compat=True, reuse_solves=reuse)
    return run_simulation(table, parse_cluster("8:8:8"), Workload(generator=gen, num_jobs=100), config)


def test_a_recorded_point_stays_within_issue_31s_bounds():
    """The 100-job 8:8:8 point (the others: benchmarks/bench_simulate.py --candidate reuse:N)."""
    reference, reused = _gavel_run(0), _gavel_run(3)
    assert reused.metrics["resolves_reused"] > 0 and "resolves_reused" not in reference.metrics
    jct = reused.metrics["jct_s"]["mean"] / reference.metrics["jct_s"]["mean"] - 1
    span = reused.metrics["makespan_s"] / reference.metrics["makespan_s"] - 1
    assert jct != 0.0 and abs(jct) <= 0.005 and abs(span) <= 0.01
    assert reused.config["reuse_solves"] == 3 and "reuse_solves" not in reference.config


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_the_cli_records_the_option_and_counts_reuses(tmp_path):
    out = tmp_path / "sim"
    result = _cli("simulate", "-t", str(GAVEL), "-c", "4:4:4", "-n", "20", "--rate", "0.8", "--gavel-compat",
                  "--reuse-solves", "2", "-o", str(out), "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["reuse_solves"] == 2
    assert 0 < summary["metrics"]["resolves_reused"] < summary["metrics"]["resolves"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policy", "fifo", "--reuse-solves", "1"], "--reuse-solves applies to max_min_fairness and"),
        (["--reuse-solves", "101"], "--reuse-solves"),
        (["--reuse-solves", "-1"], "--reuse-solves"),
        (["--reuse-solves", "2", "--no-aggregate"], "which --no-aggregate turns off"),
    ],
)
def test_the_cli_refuses_reuse_where_it_has_no_meaning(tmp_path, args, message):
    out = tmp_path / "sim"
    result = _cli("simulate", "-t", str(GAVEL), "-c", "4:4:4", "-n", "5", "-o", str(out), *args)
    assert result.exit_code == 2 and message in " ".join(result.output.replace("│", " ").split()), result.output
    assert not out.exists()


def test_plan_records_the_option_and_plan_next_keeps_it(tmp_path):
    schedule = tmp_path / "plan.json"
    common = ["-t", str(DATA / "throughputs.csv"), "-c", str(DATA / "cluster.yaml")]
    result = _cli("plan", *common, "-j", str(DATA / "jobs.csv"), "--reuse-solves", "3", "-o", str(schedule))
    assert result.exit_code == 0, result.output
    assert json.loads(schedule.read_text())["policy"]["options"]["reuse_solves"] == 3
    state = tmp_path / "state.json"
    result = _cli("plan-next", "--state", str(state), *common, "-j", str(DATA / "jobs.csv"),
                  "--reuse-solves", "2", "-o", str(tmp_path / "round.json"))  # fmt: skip
    assert result.exit_code == 0, result.output
    saved = json.loads(state.read_text())["policy"]
    assert saved["options"]["reuse_solves"] == 2 and "last_solve" in json.dumps(saved)
    result = _cli("plan-next", "--state", str(state), "--policy", "fifo", "--reuse-solves", "1",
                  "-o", str(tmp_path / "round2.json"))  # fmt: skip
    assert result.exit_code == 2 and "applies to max_min_fairness" in " ".join(result.output.split())
    # rota plan --state: 0 turns it off (not "keep the state's")
    result = _cli("plan", "--state", str(state), "--reuse-solves", "0", "-o", str(tmp_path / "round2.json"))
    assert result.exit_code == 0, result.output
    assert json.loads(state.read_text())["policy"]["options"]["reuse_solves"] == 0


def test_a_policy_without_reuse_drops_the_saved_option_with_a_note(tmp_path):
    state = tmp_path / "state.json"
    common = ["-t", str(DATA / "throughputs.csv"), "-c", str(DATA / "cluster.yaml")]
    result = _cli("plan-next", "--state", str(state), *common, "-j", str(DATA / "jobs.csv"),
                  "--reuse-solves", "2", "-o", str(tmp_path / "round.json"))  # fmt: skip
    assert result.exit_code == 0, result.output
    result = _cli("plan-next", "--state", str(state), "--policy", "fifo", "-o", str(tmp_path / "round2.json"))
    assert result.exit_code == 0, result.output
    assert "fifo does not reuse solves: --reuse-solves 2 dropped" in " ".join(result.output.split())
    assert "reuse_solves" not in json.loads(state.read_text())["policy"]["options"]


def test_a_bad_saved_option_names_the_state_file(tmp_path):
    state = tmp_path / "state.json"
    common = ["-t", str(DATA / "throughputs.csv"), "-c", str(DATA / "cluster.yaml")]
    result = _cli("plan-next", "--state", str(state), *common, "-j", str(DATA / "jobs.csv"),
                  "--reuse-solves", "2", "-o", str(tmp_path / "round.json"))  # fmt: skip
    saved = json.loads(state.read_text())
    saved["policy"]["options"]["reuse_solves"] = "2"
    state.write_text(json.dumps(saved))
    result = _cli("plan-next", "--state", str(state), "-o", str(tmp_path / "round2.json"))
    assert result.exit_code == 2 and "policy.options.reuse_solves" in result.output, result.output
    assert "Traceback" not in result.output


def test_both_round_loops_give_the_same_run_with_reuses():
    """A reused allocation may ask a type for more GPU time than it has: the compiled loop
    places by priority exactly as the Python loop does."""
    table = import_gavel(GAVEL)
    runs = {}
    for loop in ("python", "compiled"):
        gen = JobGenerator(table, GeneratorConfig(seed=2, rate_per_hour=0.6))
        config = SimulationConfig(gavel_compat=True, seed=2, reuse_solves=3, round_loop=loop)
        runs[loop] = run_simulation(table, parse_cluster("4:4:4"), Workload(generator=gen, num_jobs=40), config)
    python, compiled = runs["python"], runs["compiled"]
    assert python.status == "ok" and python.metrics["resolves_reused"] > 0 and compiled.metrics["rounds_compiled"] > 0
    assert python.jobs == compiled.jobs
    for key in ("rounds", "resolves", "resolves_reused", "jct_s", "makespan_s", "utilisation"):
        assert python.metrics[key] == compiled.metrics[key], key
