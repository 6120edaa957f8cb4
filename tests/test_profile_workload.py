"""`rota profile --workload package.module:factory`: a user's own model, profiled like the reference ones.

The workloads here are torch-free modules written into a temporary folder (the
current folder while the command runs, as a user's project would be), built
on profiler.fakes' busy-wait step, so a measurement takes about a second.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from models.spec import BuildContext, Built
from planner.errors import InputError
from planner.formats.table import read_table
from profiler.cli import profile_command
from profiler.workloads import WorkloadShapeError, as_built, check_entry_points, parse_workload

app = typer.Typer()
app.command("profile")(profile_command)


@app.command("other")
def _other() -> None:  # keeps "profile" a subcommand, as in the real app
    pass


USER_MODULE = textwrap.dedent(
    """
    from models.spec import Built
    from profiler.fakes import spin

    def build(ctx):
        return Built(None, None, lambda: None, lambda model, batch: spin(0.002), ctx.batch_size or 1)

    def build_step(ctx):
        return lambda: spin(0.003)

    def build_wrong(ctx):
        return 42

    def build_oom(ctx):
        raise MemoryError("out of memory (simulated)")

    def two_args(ctx, extra):
        return None

    def defaulted(device="cpu", scale="full"):  # all defaults: passes a bind(None), fails in torch
        return None

    def nothing():
        return None

    def keyword_only(*, ctx):
        return None

    def needs_a_keyword(ctx, *, seed):
        return None

    def with_options(ctx: "BuildContext", scale="full", *more, seed=0, **extra) -> "Built":
        return build(ctx)

    def wrapper(*args, **kwargs):
        return build(*args, **kwargs)

    class Factory:
        def __call__(self, ctx):
            return build(ctx)

    factory_object = Factory()

    not_a_function = 3
    """
)

FAST = ["--device-types", "cpu", "--budget", "0.3", "--window-s", "0.05", "--warmup-steps", "2"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A user's project folder holding `userwl.py`, made the current folder."""
    (tmp_path / "userwl.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str):
    return CliRunner().invoke(app, ["profile", *args])


def one_line_error(result, mid_run: bool = False) -> str:
    """The one error line of exit code 2; mid-run, after the progress bar's last state."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and (lines[-1] == errors[0] if mid_run else lines == errors), result.output
    assert "Traceback" not in result.output
    return errors[0]


# --------------------------------------------------------------------------- parsing and checks


def test_parse_workload_names_and_entry_points():
    spec = parse_workload("pkg.sub.mymodel:build", (8, 16))
    assert (spec.model, spec.builder, spec.batch_sizes, spec.scale_factors) == (
        "mymodel",
        "pkg.sub.mymodel:build",
        (8, 16),
        (1,),
    )
    assert parse_workload("My-Net=pkg.mod:make").model == "My-Net"
    assert parse_workload("pkg.mod:make").batch_choices == (None,)
    for bad in ("pkg.mod", "pkg.mod:", ":build", "pkg mod:build", "bad name=pkg.mod:build", "-x=pkg.mod:build"):
        with pytest.raises(InputError, match="--workload"):
            parse_workload(bad)


def test_entry_point_check_names_the_import_error(project):
    check_entry_points(["userwl:build", "userwl:build_step"])  # fine: no error
    with pytest.raises(InputError, match=r"nosuchpkg\.mod:build: cannot import it: ModuleNotFoundError"):
        check_entry_points(["nosuchpkg.mod:build"])
    with pytest.raises(InputError, match="userwl:missing: cannot import it: AttributeError"):
        check_entry_points(["userwl:missing"])
    with pytest.raises(InputError, match="must take one required positional argument"):
        check_entry_points(["userwl:two_args"])
    with pytest.raises(InputError, match="is a int, not a factory"):
        check_entry_points(["userwl:not_a_function"])
    (project / "broken.py").write_text("import math\nraise RuntimeError('no licence server')\n")
    with pytest.raises(InputError, match="broken:build: cannot import it: RuntimeError: no licence server"):
        check_entry_points(["broken:build"])


@pytest.mark.parametrize(
    "factory,why,found",
    [
        ("defaulted", "its first parameter, device, has a default", "def defaulted(device='cpu', scale='full')"),
        ("nothing", "it takes no positional parameter", "def nothing()"),
        ("keyword_only", "it takes no positional parameter", "def keyword_only(*, ctx)"),
        ("two_args", "it also requires extra", "def two_args(ctx, extra)"),
        ("needs_a_keyword", "it also requires seed", "def needs_a_keyword(ctx, *, seed)"),
    ],
)
def test_a_factory_not_shaped_factory_ctx_is_refused_naming_both_signatures(project, factory, why, found):
    with pytest.raises(InputError) as raised:
        check_entry_points([f"userwl:{factory}"])
    message = str(raised.value)
    assert f"userwl:{factory}: the factory must take one required positional argument, the context ({why}" in message
    assert "expected `def factory(ctx: models.spec.BuildContext) -> models.spec.Built | step callable`" in message
    assert message.endswith(f"found `{found}`")


def test_a_factory_with_optional_extras_or_a_generic_signature_passes_the_check(project):
    check_entry_points(["userwl:with_options", "userwl:wrapper", "userwl:factory_object"])  # no error


def test_as_built_accepts_built_or_a_step_and_names_a_wrong_shape():
    ctx = BuildContext(batch_size=4)
    built = Built("m", "o", lambda: "b", lambda model, batch: None, 4)
    assert as_built(built, ctx, "x:y") is built
    calls = []
    wrapped = as_built(lambda: calls.append(1), ctx, "x:y")
    wrapped.train_step(wrapped.model, wrapped.make_batch())
    assert calls == [1] and wrapped.samples_per_step == 4 and wrapped.model is None
    with pytest.raises(WorkloadShapeError, match="x:y returned int; expected models.spec.Built"):
        as_built(42, ctx, "x:y")
    with pytest.raises(WorkloadShapeError, match="train_step is not callable"):
        as_built(Built("m", "o", lambda: None, None, 1), ctx, "x:y")  # type: ignore[arg-type]
    with pytest.raises(WorkloadShapeError, match="samples_per_step=0"):
        as_built(Built("m", "o", lambda: None, lambda m, b: None, 0), ctx, "x:y")


# --------------------------------------------------------------------------- through the command


def test_a_workload_is_profiled_alone_and_paired_with_provenance_and_resume(project):
    out = project / "t.csv"
    args = [*FAST, "--workload", "userwl:build", "--workload", "stepper=userwl:build_step", "--out", str(out)]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    rows = {(r["model"], r["partner_model"]): r for r in read_table(out).rows}
    # two solo rows, and the three pairs (with itself, with the other) as four rows
    assert set(rows) == {
        ("userwl", None),
        ("stepper", None),
        ("userwl", "userwl"),
        ("userwl", "stepper"),
        ("stepper", "userwl"),
        ("stepper", "stepper"),
    }
    assert all(r["status"] == "ok" and r["throughput"] > 0 and r["source"] == "measured" for r in rows.values())
    # the note names the workload (a busy machine may add "; noisy: ..." after it)
    assert rows[("userwl", None)]["notes"].split("; noisy: ")[0] == "workload userwl:build"
    assert rows[("stepper", "userwl")]["notes"].split("; noisy: ")[0] == "workload userwl:build_step"
    for solo in (rows[("userwl", None)], rows[("stepper", None)]):
        assert solo["startup_s"] is not None and 0 < solo["startup_s"] < 600 and math.isfinite(solo["startup_s"])
        assert solo["checkpoint_save_s"] is None  # no torch state to save in these
    assert rows[("userwl", "stepper")]["startup_s"] is None  # restart cost is a solo measurement
    # a busy-wait of 2 ms is at most 500 steps/s
    assert rows[("userwl", None)]["throughput"] <= 500
    again = invoke(*args, "--resume")
    assert again.exit_code == 0 and "5 skipped" in again.output, again.output


def test_a_workload_that_runs_out_of_memory_is_an_oom_row(project):
    out = project / "t.csv"
    result = invoke(*FAST, "--workload", "userwl:build_oom", "--pairs", "none", "--out", str(out))
    assert result.exit_code == 0, result.output
    (row,) = read_table(out).rows
    assert (row["model"], row["status"], row["throughput"]) == ("userwl", "oom", 0.0)


def test_a_factory_of_the_wrong_shape_is_a_one_line_error_and_no_row(project):
    out = project / "t.csv"
    result = invoke(*FAST, "--workload", "userwl:build_wrong", "--pairs", "none", "--out", str(out))
    line = one_line_error(result, mid_run=True)
    assert "userwl:build_wrong returned int" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "workload,needle",
    [
        ("nosuchpkg.mod:build", "nosuchpkg.mod:build: cannot import it: ModuleNotFoundError"),
        ("userwl:two_args", "userwl:two_args: the factory must take one required positional argument"),
        ("userwl:defaulted", "found `def defaulted(device='cpu', scale='full')`"),
        ("LM=userwl:build", "name 'LM' is already a reference model"),
        ("userwl", "expected [NAME=]package.module:factory"),
    ],
)
def test_bad_workloads_are_one_line_errors(project, workload, needle):
    line = one_line_error(invoke("--dry-run", "--device-types", "cpu", "--workload", workload))
    assert needle in line


def test_list_models_shows_user_workloads_beside_the_reference_ones(project):
    result = invoke("--list-models", "--json", "--workload", "userwl:build", "--batch-sizes", "8,16")
    assert result.exit_code == 0, result.output
    listed = {m["model"]: m for m in json.loads(result.output)}
    assert listed["ResNet-18"]["kind"] == "reference"
    assert listed["userwl"] == {
        "model": "userwl",
        "kind": "workload",
        "batch_sizes": [8, 16],
        "scale_factors": [1],
        "runs": "userwl:build",
    }
    text = invoke("--list-models", "--workload", "userwl:build").output
    assert "userwl" in text and "workload" in text and "ResNet-18" in text


def test_dry_run_with_workloads_and_models(project):
    result = invoke("--dry-run", "--json", "--device-types", "cpu", "--workload", "userwl:build", "--models", "A3C")
    assert result.exit_code == 0, result.output
    jobs = [m["jobs"] for m in json.loads(result.output)["measurements"]]
    assert jobs == [["A3C"], ["userwl"], ["A3C", "A3C"], ["A3C", "userwl"], ["userwl", "userwl"]]
