"""`rota capacity`: the catalogue, the search, the screen against full simulation, the CLI.

The brute-force checks simulate every configuration of a small grid (the lab example on Gavel's
table, two node types x 0-2 added nodes) and compare what the search recommends with the best
of them; the screen's ranking is compared with the simulations' (Spearman rank correlation).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from conftest import DATA
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.formats.catalogue import catalogue_from_dict
from planner.formats.cluster import read_cluster
from planner.formats.jobs import read_jobs
from planner.formats.table import read_table
from planner.modes.capacity import (
    JCT_TIE,
    Config,
    Question,
    Screen,
    answer,
    check_catalogue,
    cluster_for,
    configurations,
    confirm,
    parse_target,
    union_cluster,
)
from planner.modes.simulate import SimulationConfig

TABLE = DATA / "gavel" / "simulation_throughputs.csv"
LAB = DATA / "examples" / "lab"
SIM = SimulationConfig(policy="max_min_fairness_perf", round_s=1800)
GRID = {
    "format": "rota.catalogue/v1",
    "node_types": {
        "v100x8": {"worker_type": "v100", "gpus_per_node": 8, "price_per_node": 80000, "power_per_gpu_w": 300},
        "k80x8": {"worker_type": "k80", "gpus_per_node": 8, "price_per_node": 15000, "power_per_gpu_w": 300},
    },
}
runner = CliRunner()


def grid(max_nodes: int = 2, **changes):
    doc = json.loads(json.dumps(GRID))
    for spec in doc["node_types"].values():
        spec["max_nodes"] = max_nodes
    for key, value in changes.items():
        name, field = key.split("__")
        doc["node_types"][name][field] = value
    return catalogue_from_dict(doc, path="grid.yaml")


@pytest.fixture(scope="module")
def lab():
    table, cluster = read_table(TABLE), read_cluster(LAB / "cluster.yaml")
    catalogue = grid()
    jobs = read_jobs(LAB / "jobs.csv", table=table, cluster=union_cluster(catalogue, cluster))
    return table, cluster, catalogue, jobs


# --------------------------------------------------------------------------- the catalogue


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"node_types": {"x": {"worker_type": "v100"}}}, "node_types.x.gpus_per_node': is required"),
        ({"node_types": {"x": {"gpus_per_node": 8, "price_per_node": -1}}}, "node_types.x.price_per_node"),
        ({"node_types": {"x": {"gpus_per_node": 8, "colour": "red"}}}, "node_types.x.colour': unknown key"),
        ({"node_types": {"x": {"gpus_per_node": 8, "max_nodes": 10**6}}}, "more than the 1000"),
        ({"node_types": {"x": {"gpus_per_node": 8, "price_per_node": float("nan")}}}, "price_per_node"),
        ({"format": "rota.catalogue/v9", "node_types": {"x": {"gpus_per_node": 1}}}, "unsupported format"),
        ({"node_types": {}}, "at least one node type"),
    ],
)
def test_a_bad_catalogue_is_one_error_naming_the_field(change, needle):
    with pytest.raises(InputError, match=needle.replace("'", "'").replace(".", r"\.")):
        catalogue_from_dict(change, path="c.yaml")


def test_node_types_the_question_cannot_use_are_refused(lab):
    table, cluster, _, _ = lab
    with pytest.raises(InputError, match="worker type 'h100' has no rows in the table"):
        check_catalogue(grid(v100x8__worker_type="h100"), cluster, table, Question())
    with pytest.raises(InputError, match="4 GPUs per node, but the cluster's v100 nodes have 8"):
        check_catalogue(grid(v100x8__gpus_per_node=4), cluster, table, Question())
    no_price = grid(v100x8__price_per_node=None)
    check_catalogue(no_price, cluster, table, Question())  # no money asked: fine
    with pytest.raises(InputError, match="price_per_node': is needed for a money budget"):
        check_catalogue(no_price, cluster, table, Question(budget=1e5))
    with pytest.raises(InputError, match="rent_per_gpu_hour': is needed"):
        check_catalogue(grid(), cluster, table, Question(budget=1e5, rent_months=6))


def test_targets_parse_or_say_what_they_expect():
    assert str(parse_target("avg_jct_h<=20")) == "avg_jct_h <= 20"
    assert parse_target(" makespan_h <= 1.5 ").limit == 1.5
    for bad in ("avg_jct<=3", "avg_jct_h<3", "avg_jct_h<=-1", "avg_jct_h<=nan", "p90_jct_h<=x"):
        with pytest.raises(InputError, match="--target"):
            parse_target(bad)


def test_configurations_respect_limits_and_budgets_and_retiring(lab):
    _, cluster, catalogue, _ = lab
    every = list(configurations(catalogue, cluster, Question()))
    assert every[0] == Config((0, 0)) and len(every) == 9
    cheap = list(configurations(catalogue, cluster, Question(budget=100000)))
    assert {c.added for c in cheap} == {(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)}
    assert all(
        c.added[0] * 8 * 300 + c.added[1] * 8 * 300 <= 5000
        for c in configurations(catalogue, cluster, Question(power_budget_kw=5.0))
        if c.added != (0, 0)
    )
    retiring = list(configurations(catalogue, cluster, Question(retire=True)))
    assert min(c.added[0] for c in retiring) == -1 and min(c.added[1] for c in retiring) == -2  # the lab's nodes
    smaller = cluster_for(catalogue, Config((-1, -1)), cluster)
    assert "v100" not in smaller.worker_types and smaller.worker_types["k80"].gpus == 8
    bigger = cluster_for(catalogue, Config((2, 0)), cluster)
    assert bigger.worker_types["v100"].gpus == 24 and bigger.worker_types["v100"].nodes[1:] == (
        "v100-new-0",
        "v100-new-1",
    )


# --------------------------------------------------------------------------- against brute force


@pytest.fixture(scope="module")
def brute_force(lab):
    table, cluster, catalogue, jobs = lab
    question = Question(budget=150000)
    configs = list(configurations(catalogue, cluster, question))
    screen = Screen(jobs, table, catalogue, cluster, SIM.policy)
    screened = {c: screen(c, question) for c in configs}
    simulated = {c: confirm(jobs, table, catalogue, cluster, c, SIM) for c in configs}
    return question, screened, simulated


def test_the_recommendation_is_the_brute_force_best(lab, brute_force):
    table, cluster, catalogue, jobs = lab
    question, screened, simulated = brute_force
    result = answer(jobs, table, catalogue, cluster, question, SIM, top=3)
    assert result.recommended is not None and result.current is not None
    lowest = min(c.avg_jct_h for c in simulated.values())
    near = [c for c in simulated if simulated[c].avg_jct_h <= lowest * (1 + JCT_TIE)]
    cheapest = min(screened[c].cost for c in near)
    chosen = result.recommended.config
    assert simulated[chosen].avg_jct_h <= lowest * (1 + JCT_TIE)  # as good as any configuration in the budget
    assert screened[chosen].cost == cheapest  # and the cheapest such
    assert result.recommended.avg_jct_h == pytest.approx(simulated[chosen].avg_jct_h)


def test_the_screen_ranks_configurations_as_simulation_does(brute_force):
    _, screened, simulated = brute_force
    configs = list(screened)
    screen = pd.Series([screened[c].est_avg_jct_h for c in configs]).rank()
    truth = pd.Series([simulated[c].avg_jct_h for c in configs]).rank()
    assert screen.corr(truth) >= 0.9, list(zip(screen, truth))


@settings(max_examples=25, deadline=None)
@given(v100=st.integers(0, 2), k80=st.integers(0, 2), which=st.sampled_from([0, 1]))
def test_adding_gpus_never_makes_the_screened_objective_worse(lab, v100, k80, which):
    table, cluster, catalogue, jobs = lab
    screen = Screen(jobs, table, catalogue, cluster, SIM.policy)
    before = screen(Config((v100, k80)), Question())
    added = [v100, k80]
    added[which] += 1
    after = screen(Config(tuple(added)), Question())
    # max-min fairness maximises the smallest normalised share: more GPUs never lower it
    assert after.objective >= before.objective - 1e-9 * max(1.0, abs(before.objective))


# --------------------------------------------------------------------------- the command


def _args(tmp_path, *extra):
    catalogue = tmp_path / "catalogue.json"
    doc = json.loads(json.dumps(GRID))
    for spec in doc["node_types"].values():
        spec["max_nodes"] = 2
    catalogue.write_text(json.dumps(doc))
    return [
        "capacity",
        "--jobs",
        str(LAB / "jobs.csv"),
        "--table",
        str(TABLE),
        "--cluster",
        str(LAB / "cluster.yaml"),
        "--catalogue",
        str(catalogue),
        "--round-length",
        "1800",
        "--workers",
        "1",
        "--out",
        str(tmp_path / "out"),
        *extra,
    ]


def test_the_command_writes_every_configuration_and_a_cluster_ready_for_plan(tmp_path):
    result = runner.invoke(app, _args(tmp_path, "--budget", "100000", "--top", "3"))
    assert result.exit_code == 0, result.output
    assert "recommended: " in result.output and "than today" in result.output
    doc = json.loads((tmp_path / "out" / "capacity.json").read_text())
    assert doc["format"] == "rota.capacity/v1" and len(doc["configurations"]) == 5
    assert sum(c["recommended"] for c in doc["configurations"]) == 1
    assert sum(c["simulation"] is not None for c in doc["configurations"]) == 4  # top 3 and the current cluster
    planned = runner.invoke(
        app,
        ["plan", "--table", str(TABLE), "--jobs", str(LAB / "jobs.csv")]
        + ["--cluster", str(tmp_path / "out" / "recommended_cluster.yaml"), "--out", str(tmp_path / "s.json")],
    )
    assert planned.exit_code == 0, planned.output


def test_a_target_picks_the_cheapest_that_meets_it(tmp_path):
    result = runner.invoke(app, _args(tmp_path, "--target", "avg_jct_h<=19", "--top", "8", "--json"))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["recommendation"]["why"] == "the cheapest that meets avg_jct_h <= 19"
    meeting = [c for c in doc["configurations"] if c["simulation"] and c["simulation"]["avg_jct_h"] <= 19]
    (chosen,) = [c for c in doc["configurations"] if c["recommended"]]
    assert chosen["cost"] == min(c["cost"] for c in meeting)


def test_a_search_too_large_to_enumerate_is_sampled_the_same_way_every_time(tmp_path):
    runs = []
    for _ in range(2):
        result = runner.invoke(app, _args(tmp_path, "--max-configs", "4", "--json"))
        assert result.exit_code == 0, result.output
        runs.append(json.loads(result.stdout))
    first = runs[0]
    assert first["sampled_from"] == 9 and len(first["configurations"]) <= 4
    assert first["configurations"][0]["label"] == "current cluster"  # always screened (and simulated)
    assert [c["added_nodes"] for c in first["configurations"]] == [c["added_nodes"] for c in runs[1]["configurations"]]
    assert first["recommendation"] == runs[1]["recommendation"]


def test_the_sampled_search_finds_what_enumeration_finds(lab):
    """3 node types x 0-6 nodes (343 configurations): 60 sampled trials against all of them."""
    table, cluster, _, jobs = lab
    wide = {"worker_type": None, "gpus_per_node": 8, "max_nodes": 6}
    prices = {"v100": 80000, "p100": 40000, "k80": 15000}
    doc = {"node_types": {f"{w}x8": {**wide, "worker_type": w, "price_per_node": p} for w, p in prices.items()}}
    catalogue = catalogue_from_dict(doc)
    question = Question(budget=300000)
    every = answer(jobs, table, catalogue, cluster, question, SIM, top=10)
    sampled = answer(jobs, table, catalogue, cluster, question, SIM, top=10, max_screened=60)
    assert sampled.sampled_from == 343 and every.sampled_from is None
    assert len(sampled.screened) <= 60 < len(every.screened)
    assert sampled.recommended is not None and every.recommended is not None
    assert sampled.recommended.avg_jct_h <= every.recommended.avg_jct_h * (1 + 2 * JCT_TIE)


def test_an_answer_resting_on_estimates_is_asked_again_at_their_pessimistic_end(tmp_path):
    frame = pd.read_csv(TABLE, dtype=str, keep_default_na=False)
    p100 = (frame["worker_type"] == "p100") & (frame["status"] == "ok")  # rows of jobs that run there
    frame.loc[p100, ["source", "status"]] = "estimated"
    frame.loc[p100, "device_name"] = "estimated: solo from 3 measured cells; p90 error 40 %"
    table = tmp_path / "estimated.csv"
    frame.to_csv(table, index=False)
    args = _args(tmp_path, "--budget", "100000", "--top", "3")
    args[args.index(str(TABLE))] = str(table)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "estimated: p100:" in text and "(p90 error up to 40 %)" in text
    doc = json.loads((tmp_path / "out" / "capacity.json").read_text())
    assert doc["sensitivity"]["estimated_cells"][0]["worker_type"] == "p100"
    again = doc["sensitivity"]["recommendation"]["label"]
    # the verdict printed is the one the two simulations give
    if again == doc["recommendation"]["label"]:
        assert "at the pessimistic end of the estimates: the same recommendation" in text
    else:
        assert f"at the pessimistic end of the estimates: the recommendation changes to {again}" in text
    simulated = [c for c in doc["configurations"] if c["simulation"]]
    assert all(c["pessimistic_avg_jct_h"] is not None for c in simulated)
    current = doc["configurations"][0]
    # the p100s, 16 of the lab's 40 GPUs, 40 % slower: the jobs take longer
    assert current["pessimistic_avg_jct_h"] > current["simulation"]["avg_jct_h"]
    measured = runner.invoke(app, _args(tmp_path, "--budget", "100000", "--top", "3", "--json"))
    assert json.loads(measured.stdout)["sensitivity"] is None  # Gavel's measured table: nothing to re-check


def test_generated_job_lists_are_simulated_per_seed_with_their_spread(tmp_path):
    args = _args(tmp_path, "--top", "2", "--json")
    jobs_at = args.index("--jobs")
    generated = args[:jobs_at] + args[jobs_at + 2 :] + ["--num-jobs", "30", "--rate", "2", "--seeds", "3"]
    result = runner.invoke(app, generated)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    simulated = [c["simulation"] for c in doc["configurations"] if c["simulation"]]
    assert len(simulated) == 3 and all(s["seeds"] == 3 for s in simulated)
    # three different job lists: their average JCTs differ, and the spread says by how much
    assert all(s["avg_jct_spread_h"] is not None and s["avg_jct_spread_h"] > 0 for s in simulated)
    both = runner.invoke(app, [*args, "--num-jobs", "30"])
    assert both.exit_code == 2 and "give either --jobs or --num-jobs" in both.output
    seeds = runner.invoke(app, [*args, "--seeds", "2"])
    assert seeds.exit_code == 2 and "--seeds needs --num-jobs" in seeds.output


def test_a_target_is_met_as_cheaply_as_brute_force_finds(lab, brute_force):
    table, cluster, catalogue, jobs = lab
    question, screened, simulated = brute_force
    jcts = sorted(c.avg_jct_h for c in simulated.values())
    for limit in (jcts[len(jcts) // 2], jcts[1] * 1.0001):
        target = parse_target(f"avg_jct_h<={limit}")
        meeting = [c for c in simulated if simulated[c].avg_jct_h <= limit]
        cheapest = min(screened[c].cost for c in meeting)
        asked = replace(question, target=target)
        result = answer(jobs, table, catalogue, cluster, asked, SIM, top=2)  # too few to simulate them all
        assert result.recommended is not None and result.why == f"the cheapest that meets {target}"
        assert screened[result.recommended.config].cost == cheapest, (limit, result.recommended.config)


def test_spread_picks_both_ends_and_evenly_between():
    from planner.modes.capacity import spread

    assert spread(10, 4) == [0, 3, 6, 9] and spread(3, 5) == [0, 1, 2] and spread(7, 1) == [6]


def test_reused_solves_are_recorded_and_refused_where_they_have_no_meaning(tmp_path):
    """--reuse-solves (docs/simulation.md) reaches every simulation of the search: the document
    says the simulated JCTs are not the every-solve reference's, and the JCTs may move."""
    for name in ("plain", "reused", "fifo"):
        (tmp_path / name).mkdir()
    plain = runner.invoke(app, _args(tmp_path / "plain", "--budget", "100000", "--top", "2", "--json"))
    reused = runner.invoke(app, _args(tmp_path / "reused", "--budget", "100000", "--top", "2", "--reuse-solves", "3",
                                      "--json"))  # fmt: skip
    assert plain.exit_code == 0 and reused.exit_code == 0, reused.output
    plain_doc, reused_doc = json.loads(plain.stdout), json.loads(reused.stdout)
    assert "simulation_options" not in plain_doc and reused_doc["simulation_options"] == {"reuse_solves": 3}
    assert [c["cost"] for c in plain_doc["configurations"]] == [c["cost"] for c in reused_doc["configurations"]]
    jcts = [
        [c["simulation"] and c["simulation"]["avg_jct_h"] for c in d["configurations"]] for d in (plain_doc, reused_doc)
    ]
    assert jcts[0] != jcts[1]  # the option reached the simulations (the screen is the same LP either way)
    refused = runner.invoke(app, _args(tmp_path / "fifo", "--policy", "fifo", "--reuse-solves", "1"))
    assert refused.exit_code == 2 and "applies to max_min_fairness" in " ".join(refused.output.split())
    assert not (tmp_path / "fifo" / "out").exists()
