"""The rota CLI through typer's runner: real files in, files and one-line errors out."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.formats.schedule import SCHEDULE_FORMAT

runner = CliRunner()
DEMO = [
    "--table",
    str(DATA / "throughputs.csv"),
    "--jobs",
    str(DATA / "jobs.csv"),
    "--cluster",
    str(DATA / "cluster.yaml"),
]


def plan(tmp_path, *extra):
    out = tmp_path / "schedule.json"
    result = runner.invoke(app, ["plan", *DEMO, "--out", str(out), "--csv", str(tmp_path / "s.csv"), *extra])
    return result, out


def test_plan_demo_writes_valid_schedule(tmp_path):
    result, out = plan(tmp_path)
    assert result.exit_code == 0, result.output
    assert "makespan" in result.output
    schedule = json.loads(out.read_text())
    assert schedule["format"] == SCHEDULE_FORMAT
    assert schedule["solver"]["status"] == "optimal"
    assert set(schedule["inputs"]) == {"table", "jobs", "cluster"}
    assert all(v["digest"].startswith("sha256:") for v in schedule["inputs"].values())
    assert len(schedule["allocation"]["x"]) == 12
    assert all(job["expected_finish_s"] is not None for job in schedule["jobs"].values())
    # planned steps add up to each job's total
    done = {}
    for r in schedule["rounds"]:
        for a in r["assignments"]:
            for jid, n in a["planned_steps"].items():
                done[jid] = done.get(jid, 0) + n
    for jid, job in schedule["jobs"].items():
        assert done[jid] >= job["total_steps"] - 1e-6
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert sum(1 for r in rows if r["round"] == "0") == sum(
        len(a["gpus"]) for a in schedule["rounds"][0]["assignments"]
    )


from planner.policies import POLICY_NAMES  # noqa: E402


@pytest.mark.parametrize("policy", [p for p in POLICY_NAMES if p != "allox"])
def test_plan_every_policy(tmp_path, policy):
    result, out = plan(tmp_path, "--policy", policy, "--rounds", "3", "--json")
    assert result.exit_code == 0, result.output
    schedule = json.loads(out.read_text())
    assert len(schedule["rounds"]) == 3 and schedule["rounds_total"] >= 3
    assert json.loads(result.output)["rounds_written"] == 3


def test_plan_bad_input_is_one_line_and_writes_nothing(tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,model,batch_size,total_steps\nx,ResNet-18,64,-3\n")
    out = tmp_path / "schedule.json"
    args = [
        "plan",
        "--table",
        str(DATA / "throughputs.csv"),
        "--jobs",
        str(jobs),
        "--cluster",
        str(DATA / "cluster.yaml"),
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "row 1" in lines[0] and "total_steps" in lines[0]
    assert "Traceback" not in result.output and not out.exists()


def test_plan_unknown_policy(tmp_path):
    result, _ = plan(tmp_path, "--policy", "fastest")
    assert result.exit_code == 2 and "unknown policy" in result.output


def test_plan_with_gavel_table(gavel_dir, tmp_path):
    table = tmp_path / "gavel.csv"
    assert (
        runner.invoke(
            app, ["table", "import-gavel", str(gavel_dir / "simulation_throughputs.json"), "--out", str(table)]
        ).exit_code
        == 0
    )
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("worker_types:\n  k80: {gpus: 4}\n  p100: {gpus: 4}\n  v100: {gpus: 4, gpus_per_node: 2}\n")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "job_id,model,batch_size,scale_factor,duration_s\n"
        "0,ResNet-50,64,1,3600\n1,LM,10,2,7200\n2,Transformer,128,1,1800\n3,Recommendation,512,1,900\n"
    )
    out = tmp_path / "s.json"
    result = runner.invoke(
        app, ["plan", "--table", str(table), "--jobs", str(jobs), "--cluster", str(cluster), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["solver"]["status"] == "optimal"


def test_table_commands(tmp_path):
    result = runner.invoke(app, ["table", "show", str(DATA / "throughputs.csv")])
    assert result.exit_code == 0 and "a100" in result.output and "cannot run" in result.output
    result = runner.invoke(app, ["table", "show", str(DATA / "throughputs.csv"), "--scale-factor", "3"])
    assert result.exit_code == 2 and "no job type with scale factor 3 (the table has 1, 2, 4)" in result.output
    result = runner.invoke(app, ["table", "validate", str(DATA / "throughputs.csv")])
    assert result.exit_code == 0 and "ok" in result.output
    gavel = tmp_path / "g.json"
    assert (
        runner.invoke(app, ["table", "export-gavel", str(DATA / "throughputs.csv"), "--out", str(gavel)]).exit_code == 0
    )
    back = tmp_path / "back.parquet"
    assert runner.invoke(app, ["table", "import-gavel", str(gavel), "--out", str(back)]).exit_code == 0
    merged = tmp_path / "m.csv"
    assert (
        runner.invoke(app, ["table", "merge", str(DATA / "throughputs.csv"), str(back), "--out", str(merged)]).exit_code
        == 0
    )


def test_table_validate_bad_file(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("worker_type,model,scale_factor,throughput\nv100,LM,1,-2\n")
    result = runner.invoke(app, ["table", "validate", str(bad)])
    assert result.exit_code == 2
    assert "row 1" in result.output and "throughput" in result.output and "Traceback" not in result.output


def test_policies_and_help():
    result = runner.invoke(app, ["policies", "--json"])
    assert "max_min_fairness_perf" in json.loads(result.output)
    for command in (
        ["plan"],
        ["table", "show"],
        ["table", "validate"],
        ["table", "import-gavel"],
        ["table", "export-gavel"],
        ["table", "merge"],
        ["policies"],
    ):
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0 and "Example" in result.output, command


def test_allox_needs_single_gpu_jobs(tmp_path):
    result, out = plan(tmp_path, "--policy", "allox")
    assert result.exit_code == 2 and "single-GPU" in result.output and not out.exists()
    jobs = tmp_path / "single.csv"
    jobs.write_text("job_id,model,batch_size,total_steps\na,ResNet-18,64,20000\nb,LM,20,90000\nc,A3C,,3000\n")
    result = runner.invoke(
        app,
        [
            "plan",
            "--table",
            str(DATA / "throughputs.csv"),
            "--jobs",
            str(jobs),
            "--cluster",
            str(DATA / "cluster.yaml"),
            "--policy",
            "allox",
            "--out",
            str(tmp_path / "a.json"),
        ],
    )
    assert result.exit_code == 0, result.output


def test_plan_multi_level_fairness(tmp_path):
    result, out = plan(
        tmp_path,
        "--policy",
        "max_min_fairness_water_filling_perf",
        "--rounds",
        "2",
        "--entity-weights",
        "vision=2,nlp=1,ads=1,rl=1",
        "--entity-policy",
        "ads=fifo",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["policy"]["options"]["entity_weights"]["vision"] == 2.0
    result, _ = plan(tmp_path, "--policy", "max_min_fairness_water_filling_perf", "--entity-weights", "vision=2")
    assert result.exit_code == 2 and "no weight" in result.output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--entity-policy", "nlp=fifo"], "field '--entity-policy': needs --entity-weights"),
        (
            ["--entity-weights", "vision=2,nlp=1,ads=1,rl=1", "--entity-policy", "nlp=foo"],
            "field '--entity-policy': entity 'nlp': policy must be one of fairness, fifo, got 'foo'",
        ),
    ],
)
def test_plan_refuses_entity_options_it_would_ignore_or_misread(tmp_path, options, message):
    result, out = plan(tmp_path, "--policy", "max_min_fairness_water_filling_perf", *options)
    assert result.exit_code == 2 and message in result.output and not out.exists()


def test_plan_refuses_entity_weights_for_a_policy_without_entities(tmp_path):
    result, out = plan(tmp_path, "--policy", "max_min_fairness_perf", "--entity-weights", "vision=2")
    assert result.exit_code == 2 and not out.exists()
    assert "field '--entity-weights': policy 'max_min_fairness_perf' ignores entities" in result.output


def _leaf_commands(group, prefix=()):
    for name, command in group.commands.items():
        if hasattr(command, "commands"):  # a command group
            yield from _leaf_commands(command, prefix + (name,))
        else:
            yield prefix + (name,)


def test_every_command_has_help_with_an_example():
    import typer.main

    commands = list(_leaf_commands(typer.main.get_command(app)))
    assert ("plan",) in commands and ("table", "estimate") in commands and ("simulate",) in commands
    for command in commands:
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0 and "Example" in result.output, command


def test_help_shows_no_type_for_flags_and_keeps_it_for_values():
    # A flag takes no value: `--gavel-compat <bool>` would read as if it wanted one.
    result = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    lines = {line.split()[1]: line for line in result.output.splitlines() if line.startswith("│") and "--" in line}
    assert "<bool>" not in result.output
    assert "--gavel-compat" in lines and "<" not in lines["--gavel-compat"].split("Gavel")[0]
    assert "<path>" in lines["--trace"] and "<int range>" in lines["--num-jobs"]


def test_plan_state_mode_continues_round_by_round(tmp_path):
    state = tmp_path / "state.json"
    full, full_out = plan(tmp_path, "--rounds", "3")
    assert full.exit_code == 0, full.output
    expected = json.loads(full_out.read_text())["rounds"]
    got = []
    for k in range(3):
        extra = DEMO if k == 0 else []
        out = tmp_path / f"r{k}.json"
        result = runner.invoke(app, ["plan", "--state", str(state), *extra, "--out", str(out)])
        assert result.exit_code == 0, result.output
        got += json.loads(out.read_text())["rounds"]
    strip = lambda rounds: [(r["index"], r["start_s"], r["end_s"], r["assignments"]) for r in rounds]  # noqa: E731
    assert [(i, s, e) for i, s, e, _ in strip(got)] == [(i, s, e) for i, s, e, _ in strip(expected)]
    for a, b in zip(got, expected):
        key = lambda r: sorted(  # noqa: E731
            (
                x["jobs"],
                x["worker_type"],
                [(g["node"], g["gpu"]) for g in x["gpus"]],  # noqa: E731
                sorted(x["planned_steps"].items()),
            )
            for x in r["assignments"]
        )
        assert key(a) == key(b)


def test_plan_needs_inputs_without_state(tmp_path):
    result = runner.invoke(app, ["plan", "--out", str(tmp_path / "s.json")])
    assert result.exit_code == 2 and "--table" in result.output


def test_plan_accepts_the_profiled_cpu_table(tmp_path):
    cluster = tmp_path / "cpu.yaml"
    cluster.write_text("worker_types:\n  cpu: {gpus: 2}\n")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "job_id,model,batch_size,scale_factor,total_steps\na,LM,20,1,5000\nb,ResNet-18,32,2,800\nc,A3C,,1,3000\n"
    )
    out = tmp_path / "s.json"
    result = runner.invoke(
        app,
        [
            "plan",
            "--table",
            str(DATA / "throughputs_cpu_tiny.csv"),
            "--jobs",
            str(jobs),
            "--cluster",
            str(cluster),
            "--policy",
            "max_min_fairness_packed",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert all(j["expected_finish_s"] for j in json.loads(out.read_text())["jobs"].values())


def test_version_option():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    import planner

    assert result.output.strip() == f"rota {planner.__version__}"


def test_table_validate_lists_every_problem_once(tmp_path):
    lines = (DATA / "throughputs.csv").read_text().splitlines()
    header = lines[0].split(",")
    first, third = lines[1].split(","), lines[3].split(",")
    first[header.index("throughput")] = "-2.0"
    third[header.index("status")] = "fast"
    lines[1], lines[3] = ",".join(first), ",".join(third)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["table", "validate", str(bad)])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    # Both bad rows, and no echo of them in the co-location rows whose partner they are.
    assert len(errors) == 2, result.output
    assert "row 1: field 'throughput'" in errors[0] and "row 3: field 'status'" in errors[1]
    assert "2 problem(s)" in result.output


def test_table_validate_caps_a_long_list(tmp_path):
    rows = ["worker_type,model,batch_size,scale_factor,status,throughput"]
    rows += [f"v100,m{i},32,1,ok,NaN" for i in range(120)]
    bad = tmp_path / "many.csv"
    bad.write_text("\n".join(rows) + "\n")
    result = runner.invoke(app, ["table", "validate", str(bad)])
    assert result.exit_code == 2
    assert sum(line.startswith("error:") for line in result.output.splitlines()) == 50
    assert "120 problem(s) (the first 50 shown, 70 more)" in result.output


def test_outputs_default_to_the_out_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["plan", *DEMO, "--rounds", "2"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "schedule.json").read_text())["format"] == SCHEDULE_FORMAT
    (tmp_path / "out" / "schedule.json").unlink()
    result = runner.invoke(app, ["plan-next", "--state", "state.json", *DEMO])
    assert result.exit_code == 0, result.output
    assert len(json.loads((tmp_path / "out" / "schedule.json").read_text())["rounds"]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "state.json", "state.json.lock"]


def test_plan_names_the_cluster_file_it_needs_for_an_inline_spec(tmp_path):
    args = ["plan", "--table", str(DATA / "throughputs.csv"), "--jobs", str(DATA / "jobs.csv")]
    result = runner.invoke(app, [*args, "--cluster", "v100=4", "--out", str(tmp_path / "s.json")])
    assert result.exit_code == 2
    assert "v100=4: file not found; an inline spec works in simulate" in result.output
    assert "plan needs a cluster file, e.g. data/cluster.yaml" in result.output
    result = runner.invoke(app, [*args, "--cluster", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and result.output.strip().endswith("nope.yaml: file not found")
    assert not (tmp_path / "s.json").exists()


def test_the_cli_starts_without_torch_or_pandas():
    """Start-up cost: `rota plan` and friends import neither (pandas only where a table is converted)."""
    import subprocess
    import sys

    code = "import sys, planner.cli; print(sorted({'torch', 'pandas', 'ray'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_slo_policy_on_jobs_without_deadlines_warns(tmp_path):
    policy = "max_sum_throughput_normalized_by_cost_perf_SLOs"
    result, out = plan(tmp_path, "--policy", policy, "--rounds", "1")
    assert result.exit_code == 0, result.output
    assert f"has an slo_s, so {policy} planned without deadlines" in result.output and out.exists()
    jobs = tmp_path / "jobs.csv"
    rows = (DATA / "jobs.csv").read_text().splitlines()
    jobs.write_text("\n".join([rows[0] + ",slo_s"] + [r + ",86400" for r in rows[1:]]) + "\n")
    demo = [a if a != str(DATA / "jobs.csv") else str(jobs) for a in DEMO]
    result = runner.invoke(app, ["plan", *demo, "--out", str(out), "--policy", policy, "--rounds", "1"])
    assert result.exit_code == 0 and "without deadlines" not in result.output, result.output


@pytest.mark.parametrize(
    "command",
    [
        ["plan", *DEMO, "--round-length", "inf"],
        ["plan", *DEMO, "--round-length", "1e300"],
        ["simulate", "--table", str(DATA / "throughputs.csv"), "--cluster", str(DATA / "cluster.yaml")]
        + ["--num-jobs", "2", "--round-length", "inf"],
        ["trace", "generate", "--table", str(DATA / "throughputs.csv"), "--num-jobs", "2", "--duration-h", "inf"],
    ],
)
def test_infinite_or_absurd_lengths_are_refused_by_the_parser(tmp_path, command):
    """These options had only a lower bound: inf passed and crashed later (an OverflowError)."""
    result = runner.invoke(app, [*command, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "less than or equal" in result.output, result.output
    assert not (tmp_path / "out").exists()
