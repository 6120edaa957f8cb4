"""The `rota` command line (typer): one module per command group, each a thin layer over planner.

User errors print one line (`planner.cli.common.user_errors`), never a traceback. Command
modules import heavy libraries (pyomo, pandas, matplotlib) inside the commands that need
them only where that keeps `rota --help` and the launcher loop's fresh process fast.
"""

from __future__ import annotations

import typer

from planner import __version__
from planner.cli import capacity, compare, export, jobs, plan, policies, run, schedule, simulate, sweep, table
from planner.cli.common import user_errors
from planner.cli.help_format import hide_flag_types
from planner.cli.trace_import import import_app as trace_import_app

app = typer.Typer(
    no_args_is_help=True,
    help="rota: heterogeneity-aware scheduling for deep-learning training clusters.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rota {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print rota's version and exit."
    ),
) -> None:
    """rota: heterogeneity-aware scheduling for deep-learning training clusters."""


def _register() -> None:
    # The profiler's command imports torch only when it runs.
    from profiler.cli import profile_command
    from profiler.jobs_cli import profile_jobs_app, ray_command, slurm_command

    app.add_typer(table.table_app, name="table")
    app.command("profile")(user_errors(profile_command))
    profile_jobs_app.command("slurm")(user_errors(slurm_command))
    profile_jobs_app.command("ray")(user_errors(ray_command))
    app.add_typer(profile_jobs_app, name="profile-jobs")
    app.command("policies")(policies.policies)
    app.command("plan")(user_errors(plan.plan))
    app.command("plan-next")(user_errors(plan.plan_next_round_command))
    app.command("simulate")(user_errors(simulate.simulate_command))
    app.command("sweep")(user_errors(sweep.sweep_command))
    app.command("compare")(user_errors(compare.compare_command))
    app.command("capacity")(user_errors(capacity.capacity_command))
    trace_app = typer.Typer(no_args_is_help=True, help="Generate job traces (Gavel's generator) or import public ones.")
    trace_app.command("generate")(user_errors(simulate.trace_generate_command))
    trace_app.add_typer(trace_import_app, name="import")
    app.add_typer(trace_app, name="trace")
    app.command("export")(user_errors(export.export_command))
    app.command("run")(user_errors(run.run_command))
    schedule_app = typer.Typer(no_args_is_help=True, help="Check and view schedule files.")
    schedule_app.command("validate")(user_errors(schedule.schedule_validate_command))
    schedule_app.command("show")(user_errors(schedule.schedule_show_command))
    app.add_typer(schedule_app, name="schedule")
    app.add_typer(jobs.jobs_app, name="jobs")


hide_flag_types()
_register()

__all__ = ["app", "main", "user_errors"]


def main() -> None:
    app()
