"""`rota plan` (a whole batch, or the next round with --state) and `rota plan-next`."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from planner.cli.common import (
    MAX_ROUND_S,
    SOLVER_METHOD_HELP,
    check_method,
    err,
    hours,
    one_line,
    out,
    progress_bar,
    state_input,
    styled,
)
from planner.cli.jobs import (
    MAX_SCALE_DEFAULT_OPTION,
    MAX_SCALE_OPTION,
    SCALE_EFFICIENCY_DEFAULT_OPTION,
    SCALE_EFFICIENCY_OPTION,
)
from planner.cli.round_length import AUTO, parse_round_length
from planner.cli.simulate import (
    MIGRATION_AWARE_OPTION,
    RESTART_COST_OPTION,
    REUSE_SOLVES_HELP,
    finite,
    reuse_solves_option,
)
from planner.errors import InputError
from planner.estimate.observed import DEFAULT_MIN_OBSERVATIONS
from planner.estimate.scaling import (
    DEFAULT_MAX_FACTOR,
    ScaleEstimate,
    ScaleOptions,
    extend_for,
    read_jobs_scaled,
    scale_gaps_of,
)
from planner.formats.atomic import write_together
from planner.formats.cluster import read_cluster, require_table_rows
from planner.formats.coverage import missing_cells, refuse_missing
from planner.formats.files import read_text, same_file
from planner.formats.jobs import parse_jobs, read_job_list, validate_command
from planner.formats.safe_yaml import load_yaml
from planner.formats.schedule import Schedule
from planner.formats.state import DEFAULT_LOCK_TIMEOUT_S, StateDocument, state_lock
from planner.formats.table import ThroughputTable, read_table, write_table
from planner.modes.collector import collector_paused
from planner.modes.next_round import DEFAULT_POLICY, next_round, replayed_round
from planner.modes.plan import PlanInputs, PlanOptions, plan_batch, restart_summary, schedule_files, write_plan_outputs
from planner.modes.state import read_progress, read_state
from planner.policies import ENTITY_POLICIES, HIERARCHICAL_POLICIES, MAX_REUSE_LIMIT, check_reuse, check_tenants
from planner.policies.lp import DEFAULT_METHOD
from planner.report.text import duration
from planner.rounds.engine import DEFAULT_ROUND_S

# The round loop's restart options (plan-next, plan --state, rota run): kept in the state, so
# a call that does not give them plans as the state's first call said.
RESTART_COST_KEPT_OPTION = typer.Option(
    "--restart-cost",
    min=0.0,
    max=MAX_ROUND_S,
    callback=finite,
    help="Seconds every (re)start of a job on new GPUs costs, kept in the state (default: the state's, "
    "else the table's startup/checkpoint columns, the cluster's restart_s or what reports taught, else 0).",
)
REUSE_SOLVES_KEPT_OPTION = typer.Option(
    "--reuse-solves",
    min=0,
    max=MAX_REUSE_LIMIT,
    metavar="N",
    help=REUSE_SOLVES_HELP + "; kept in the state (default: the state's, else 0: off).",
)
MIGRATION_AWARE_KEPT_OPTION = typer.Option(
    "--migration-aware/--no-migration-aware",
    help="Keep a job on the worker type it holds unless the deficit it recovers by moving exceeds its "
    "restart cost; kept in the state (default: the state's, else off).",
)
STRICT_CELLS_HELP = (
    "Refuse a job list whose job types have no table row on a worker type of the cluster they would "
    "fit (by default the plan warns once per job type, and they do not run there), or no row at their "
    "scale factor (by default estimated from the job type's other scale factors, with a warning)."
)
STRICT_CELLS_OPTION = typer.Option("--strict-cells", help=STRICT_CELLS_HELP)  # for Annotated parameters


def plan(
    table: Optional[Path] = typer.Option(None, "--table", "-t", help="Throughput table (.csv or .parquet)."),
    jobs: Optional[Path] = typer.Option(None, "--jobs", "-j", help="Job list (.csv or .json)."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", "-c", help="Cluster spec (.yaml or .json)."),
    policy: Optional[str] = typer.Option(
        None, "--policy", "-p", help="Policy name (see 'rota policies'); default max_min_fairness_perf."
    ),
    state: Optional[Path] = typer.Option(
        None,
        "--state",
        "-s",
        help="Next-round mode: planner state to continue from (created on the first "
        "call, then updated); plans --rounds (default 1) rounds. "
        "'rota plan-next' does the same and takes more options (--state-version, --lock-timeout, "
        "--observed-min, --no-observed).",
    ),
    progress: Optional[Path] = typer.Option(
        None, "--progress", help="Next-round mode: progress reported by the launcher (see docs/launchers.md)."
    ),
    out_path: Path = typer.Option(Path("out/schedule.json"), "--out", "-o", help="Schedule JSON to write."),
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Also write the flat per-GPU CSV view."),
    rounds: Optional[int] = typer.Option(
        None,
        "--rounds",
        "-k",
        min=1,
        help="Plan only the first K rounds; unfinished jobs' finish times are estimated (the rounds "
        "simulated on, not written, then the policy as a fluid; default: plan until every job finishes).",
    ),
    horizon: Optional[str] = typer.Option(
        None, "--horizon", help="Plan this far ahead instead of --rounds: e.g. 2h, 90min, 3600s."
    ),
    until_done: bool = typer.Option(
        False, "--until-done", help="With --rounds/--horizon: still simulate to the end, for exact finish times."
    ),
    round_length_text: Optional[str] = typer.Option(
        None,
        "--round-length",
        metavar="SECONDS|auto",
        help="Round length tau in seconds (default 360; with --state, the state's), or 'auto': simulate a "
        "few lengths on these jobs with their restart costs and keep the best (docs/restarts.md).",
    ),
    method: Optional[str] = typer.Option(None, "--solver-method", help=SOLVER_METHOD_HELP),
    no_aggregate: bool = typer.Option(
        False, "--no-aggregate", help="One LP row per job instead of per class of identical jobs."
    ),
    reuse_solves: Optional[int] = reuse_solves_option(None, " (default 0: off; with --state: the state's)."),
    seed: int = typer.Option(0, "--seed", help="Seed for randomised policies (fifo, gandiva)."),
    gavel_compat: bool = typer.Option(
        False,
        "--gavel-compat",
        help="Reproduce Gavel's numbers where rota fixes its behaviour "
        "(makespan bisection, agnostic FTF/makespan copying v100).",
    ),
    entity_weights: Optional[str] = typer.Option(
        None,
        "--entity-weights",
        help="Multi-level fairness for water-filling policies: 'vision=2,nlp=1' "
        "or a YAML/JSON file mapping entity -> weight.",
    ),
    entity_policy: Optional[str] = typer.Option(
        None, "--entity-policy", help="Policy inside each entity: 'nlp=fifo,vision=fairness' (default fairness)."
    ),
    restart_cost: Optional[float] = RESTART_COST_OPTION,
    migration_aware: bool = MIGRATION_AWARE_OPTION,
    strict_cells: bool = typer.Option(False, "--strict-cells", help=STRICT_CELLS_HELP),
    max_scale: float = MAX_SCALE_DEFAULT_OPTION,
    scale_efficiency: Optional[float] = SCALE_EFFICIENCY_DEFAULT_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of tables."),
):
    """Plan a batch of jobs: policy allocation, then round-by-round GPU assignments.

    Example: rota plan --table data/throughputs.csv --jobs data/jobs.csv
    --cluster data/cluster.yaml --policy max_min_fairness_perf --out schedule.json --csv schedule.csv

    The next two hours only, finish times estimated: rota plan ... --horizon 2h

    Next round only, from a saved state: rota plan --state state.json --progress progress.json --rounds 1

    Round length chosen for 120 s restarts: rota plan ... --restart-cost 120 --round-length auto
    """
    round_s = None if round_length_text is None else parse_round_length(round_length_text)
    if state is not None and (horizon is not None or until_done):
        raise InputError(
            "--horizon and --until-done apply to batch plans; next-round mode takes --rounds", field="--state"
        )
    if state is not None:
        return plan_next_round_command(
            state=state,
            table=table,
            jobs=jobs,
            cluster=cluster,
            policy=policy,
            progress=progress,
            rounds=rounds or 1,
            out_path=out_path,
            state_out=None,
            csv_path=csv_path,
            round_length_text=round_length_text,
            method=method,
            seed=seed,
            as_json=as_json,
            reuse_solves=reuse_solves,  # None (not given): the state's
            restart_cost=restart_cost,
            migration_aware=migration_aware or None,  # not given: the state's
            strict_cells=strict_cells,
            max_scale=max_scale,
            scale_efficiency=scale_efficiency,
        )
    if progress is not None:
        raise InputError("--progress needs --state (next-round mode)", field="--progress")
    if table is None or jobs is None or cluster is None:
        option = "--table" if table is None else "--jobs" if jobs is None else "--cluster"
        raise InputError("is required (or use --state for next-round mode)", field=option)
    check_method(method or DEFAULT_METHOD)
    round_length = DEFAULT_ROUND_S if round_s is None or round_s == AUTO else round_s
    horizon_s = None
    if horizon is not None:
        if rounds is not None:
            raise InputError("give --rounds or --horizon, not both", field="--horizon")
        horizon_s = parse_duration(horizon, "--horizon")
    chosen_policy = policy or PlanOptions.policy
    entity_policies = _parse_mapping(entity_policy, "--entity-policy", str) if entity_policy else {}
    check_entity_options(chosen_policy, entity_weights, entity_policy, entity_policies)
    check_reuse(chosen_policy, reuse_solves or 0, not no_aggregate)
    options = PlanOptions(
        policy=chosen_policy,
        round_s=round_length,
        method=method or DEFAULT_METHOD,
        aggregate=not no_aggregate,
        seed=seed,
        gavel_compat=gavel_compat,
        entity_weights=_parse_mapping(entity_weights, "--entity-weights", float) if entity_weights else None,
        entity_policies=entity_policies,
        rounds=rounds,
        until_done=until_done,
        restart_cost_s=restart_cost,
        migration_aware=migration_aware,
        round_auto=round_s == AUTO,
        horizon_s=horizon_s,
        strict_cells=strict_cells,
        reuse_solves=reuse_solves or 0,
    )
    scaling = ScaleOptions(max_scale, scale_efficiency, strict_cells)
    planned_table, scaled, read = _estimate_scale_factors(table, jobs, cluster, scaling, scaled_table_path(out_path))
    # A plan of K rounds is bounded work: no collector passes over its many small objects.
    with collector_paused((options.rounds is not None or horizon_s is not None) and not until_done):
        with progress_bar("planning", "jobs finished", hidden=as_json) as bar:
            task = bar.add_task("plan", total=None)
            planned = plan_batch(
                planned_table,
                jobs,
                cluster,
                options,
                on_round=lambda rec, done, total: bar.update(task, completed=done, total=total),
                read=read,
            )
        schedule, result, estimated = planned.schedule, planned.result, planned.estimated_used
        write_plan_outputs(schedule, out_path, csv_path)
    warnings = [e.describe() for e in scaled] + [cells.describe() for cells in planned.missing_cells]
    if options.policy.endswith("_SLOs") and all(job.slo_s is None for job in planned.jobs):
        warnings.append(f"no job in {jobs} has an slo_s, so {options.policy} planned without deadlines")
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "schedule": str(out_path),
                    "rounds_written": len(schedule.rounds),
                    "rounds_total": schedule.rounds_total,
                    "makespan_s": result.makespan_s,
                    "solver": schedule.solver,
                    "utilisation": schedule.utilisation,
                    "estimated_throughputs_used": estimated,
                    "jobs": schedule.jobs,
                    **restart_summary(result),
                    "restart_note": planned.restart_note,
                    "round_length": None if planned.round_choice is None else planned.round_choice.to_json(),
                    "warnings": warnings,
                    "missing_cells": [cells.to_json() for cells in planned.missing_cells],
                    "estimated_scale_factors": [e.to_json() for e in scaled],
                    "planned_table": str(planned_table),
                }
            )
        )
        return
    for warning in warnings:
        err.print(styled("[yellow]warning:[/] ") + one_line(warning), highlight=False, soft_wrap=True)
    if planned.round_choice is not None:
        out.print(planned.round_choice.reason, highlight=False, soft_wrap=True)
    if scaled:
        out.print(_scaled_note(scaled, table, planned_table), highlight=False, soft_wrap=True)
    _print_plan_summary(schedule, result, out_path, csv_path, estimated, planned.restart_note)


def scaled_table_path(out_path: Path) -> Path:
    """Where a plan writes the table it planned with when it estimated rows: beside its schedule
    (out/schedule.json -> out/schedule.table.csv), or its state (state.json -> state.table.csv)."""
    return out_path.with_name(f"{out_path.stem}.table.csv")


def _write_scaled_table(table: ThroughputTable, path: Path, given: str | Path) -> None:
    write_table(table, path, replaces_input=same_file(path, given))  # replanning from it: updated in place


def _estimate_scale_factors(
    table: Path, jobs: Path, cluster: Path, scaling: ScaleOptions, side: Path
) -> tuple[Path, list[ScaleEstimate], PlanInputs | None]:
    """The table to plan with: `table`, or, when the job list has job types the table has at other
    scale factors only, `table` with rows estimated for them, written to `side` (so that the schedule
    names the rows it was planned with, and exports check against them). Every fault of the job list
    is raised here, a job type that could not be estimated among them (with --strict-cells, any).
    In the common case (no estimate) also the inputs as read, which the plan then does not read again."""
    spec = read_cluster(cluster)
    thr = read_table(table)
    require_table_rows(spec, thr, table)  # plan_batch's checks, in its order
    records, columns = read_job_list(jobs)
    if not scale_gaps_of(records, thr, spec, jobs):  # one row per job type checked: the common case costs little
        hint = validate_command(jobs, thr, spec)
        parsed = parse_jobs(records, table=thr, cluster=spec, path=jobs, columns=columns, hint=hint)
        return table, [], PlanInputs(thr, spec, parsed)
    read = read_jobs_scaled(jobs, table=thr, cluster=spec, options=scaling)
    if not read.estimates:
        return table, [], None
    _write_scaled_table(read.table, side, table)
    return side, read.estimates, None  # the plan reads the rows as written beside the schedule


def _scaled_note(scaled: list[ScaleEstimate], table: object, planned_table: object) -> str:
    rows = sum(len(e.workers) for e in scaled)
    kinds = "1 job type" if len(scaled) == 1 else f"{len(scaled)} job types"
    return (
        f"note: planned with {planned_table}: {table} plus {rows} estimated row(s) for the scale factors of {kinds} "
        "it lacks (the schedule names it)"
    )


def check_entity_options(
    policy: str, weights: str | None, policies: str | None, parsed_policies: dict[str, str]
) -> None:
    """Entity options that the plan would ignore, or a policy the entities cannot have: errors."""
    if weights is not None and policy not in HIERARCHICAL_POLICIES:
        raise InputError(
            f"policy {policy!r} ignores entities; multi-level fairness needs one of: "
            + ", ".join(HIERARCHICAL_POLICIES),
            field="--entity-weights",
        )
    if policies is None:
        return
    if weights is None:
        raise InputError("needs --entity-weights (the entities' shares)", field="--entity-policy")
    for entity, name in parsed_policies.items():
        if name not in ENTITY_POLICIES:
            raise InputError(
                f"entity {entity!r}: policy must be one of {', '.join(ENTITY_POLICIES)}, got {name!r}",
                field="--entity-policy",
            )


def _parse_mapping(text: str, option: str, kind):
    """'a=1,b=2' or a YAML/JSON file holding a mapping."""
    path = Path(text)
    if path.exists():
        data = load_yaml(read_text(path), path)
        if not isinstance(data, dict):
            raise InputError("expected a mapping entity -> value", path=path)
        items = list(data.items())
    else:
        items = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            if "=" not in part:
                raise InputError(f"expected name=value, got {part!r}", field=option)
            key, value = part.split("=", 1)
            items.append((key.strip(), value.strip()))
    result = {}
    for key, value in items:
        try:
            result[str(key)] = kind(value)
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"bad value {value!r} for {key!r}", field=option) from None
        if kind is float and not 0 < result[str(key)] < math.inf:
            raise InputError(f"weight of {key!r} must be positive", field=option)
    return result


SUMMARY_JOBS = 20  # the summary lists at most this many jobs; the file and --json have all


def _finish_key(info: dict) -> float:
    return math.inf if info["expected_finish_s"] is None else info["expected_finish_s"]


def _any_estimated(jobs: dict) -> bool:
    return any(info.get("finish_estimated") for info in jobs.values())


def parse_duration(text: str, option: str) -> float:
    """'2h', '90min', '45m', '3600s' or a bare number of seconds -> seconds."""
    units = {"h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0, "": 1.0}
    raw = text.strip().lower()
    number = raw.rstrip("hmins")
    unit = raw[len(number) :]
    try:
        value = float(number) * units[unit]
    except (KeyError, ValueError):
        raise InputError(f"expected a duration like 2h, 90min or 3600s, got {text!r}", field=option) from None
    if not (value > 0 and math.isfinite(value)):
        raise InputError(f"must be a positive duration, got {text!r}", field=option)
    return value


def _print_plan_summary(schedule, result, out_path, csv_path, estimated, restart_note=None) -> None:
    solver = schedule.solver
    out.print(
        styled("policy [bold]{}[/]: ", schedule.policy["name"])
        + f"{solver['status']}"
        + (f", objective {solver['objective']:.6g}" if solver["objective"] is not None else "")
        + f", build {solver['build_s'] * 1000:.1f} ms, solve {solver['solve_s'] * 1000:.1f} ms"
        + (f", {solver['n_classes']} job class{'es' * (solver['n_classes'] != 1)}" if solver["n_classes"] else "")
        + f", re-solved {len(solver['resolves'])}x"
    )
    jobs = schedule.jobs
    shown = sorted(jobs, key=lambda jid: _finish_key(jobs[jid]), reverse=True)[:SUMMARY_JOBS]
    title = "jobs" if len(shown) == len(jobs) else f"the {len(shown)} jobs finishing last, of {len(jobs)}"
    caption = "~ estimated: rounds simulated on, then the policy as a fluid" if _any_estimated(jobs) else None
    jobs_grid = Table(title=title, caption=caption)
    for column in ("job", "job type", "GPUs", "steps", "expected finish"):
        jobs_grid.add_column(column, justify="right" if column in ("GPUs", "steps", "expected finish") else "left")
    for jid in sorted(shown, key=list(jobs).index):  # in job-list order
        info = jobs[jid]
        finish = "-" if info["expected_finish_s"] is None else duration(info["expected_finish_s"])
        if info.get("finish_estimated"):
            finish = "~" + finish
        label = info["model"] if info["batch_size"] is None else f"{info['model']} bs{info['batch_size']}"
        jobs_grid.add_row(jid, label, str(info["scale_factor"]), f"{info['total_steps']:,.0f}", finish)
    out.print(jobs_grid)
    util = Table(title="worker types")
    for column in ("worker type", "GPUs", "utilisation"):
        util.add_column(column, justify="left" if column == "worker type" else "right")
    for w in result.worker_types:
        util.add_row(w, str(result.capacity[w]), f"{schedule.utilisation[w] * 100:.1f} %")
    out.print(util)
    if result.restarts is not None:
        r = restart_summary(result)
        goodput = "-" if r["goodput"] is None else f"{r['goodput'] * 100:.1f} %"
        out.print(
            f"restarts: {r['restarts']} ({r['restarts_across_types']} across GPU types), "
            f"{hours(r['restart_gpu_s'])} GPU-h lost, goodput {goodput}"
        )
    elif restart_note:
        out.print(f"note: {restart_note}", soft_wrap=True)
    if estimated:
        out.print(f"note: {estimated} of the throughputs used are estimated, not measured")
    wrote = f"wrote {out_path} ({len(schedule.rounds)} of {schedule.rounds_total} rounds"
    out.print(
        wrote
        + (f"; per-GPU view {csv_path})" if csv_path else ")")
        + f"; makespan {'~' if _any_estimated(jobs) else ''}{duration(schedule.makespan_s)}"
    )


def plan_next_round_command(
    state: Annotated[
        Path,
        typer.Option(
            "--state",
            "-s",
            help="Planner state (rota.state/v1); read if it exists, then replaced by the new state.",
            show_default=False,
        ),
    ],
    table: Annotated[
        Optional[Path], typer.Option("--table", "-t", help="Throughput table (default: the state's).")
    ] = None,
    jobs: Annotated[
        Optional[Path],
        typer.Option(
            "--jobs",
            "-j",
            help="Job list: needed for the first call; later, jobs it lists that the state lacks are added.",
        ),
    ] = None,
    cluster: Annotated[
        Optional[Path], typer.Option("--cluster", "-c", help="Cluster spec (default: the state's).")
    ] = None,
    policy: Annotated[
        Optional[str], typer.Option("--policy", "-p", help="Policy (default: the state's, else max_min_fairness_perf).")
    ] = None,
    progress: Annotated[
        Optional[Path],
        typer.Option(
            help="What the launcher saw: rota.progress/v1 JSON, a CSV "
            "(job_id, steps_done, finished) or a folder of "
            "<job_id>.json."
        ),
    ] = None,
    rounds: Annotated[int, typer.Option("--rounds", "-k", min=1, help="Rounds to plan.")] = 1,
    out_path: Annotated[Path, typer.Option("--out", "-o", help="Schedule JSON of the planned rounds.")] = Path(
        "out/schedule.json"
    ),
    state_out: Annotated[Optional[Path], typer.Option(help="Write the new state here instead of over --state.")] = None,
    csv_path: Annotated[Optional[Path], typer.Option("--csv", help="Also write the flat per-GPU CSV view.")] = None,
    round_length_text: Annotated[
        Optional[str],
        typer.Option(
            "--round-length",
            metavar="SECONDS|auto",
            help="Round length in seconds (default: the state's, else 360), or 'auto': chosen now from the jobs "
            "left and their restart costs, then kept in the state (docs/restarts.md).",
        ),
    ] = None,
    method: Annotated[Optional[str], typer.Option("--solver-method", help=SOLVER_METHOD_HELP)] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed for randomised policies (first call).")] = None,
    reuse_solves: Annotated[Optional[int], REUSE_SOLVES_KEPT_OPTION] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    state_version: Annotated[
        Optional[int],
        typer.Option(
            "--state-version",
            min=0,
            help="Plan only from this version of the state (next_round.state_version of the last round file). "
            "If a call already planned from it, return that call's round file unchanged (a safe retry).",
        ),
    ] = None,
    lock_timeout: Annotated[
        float,
        typer.Option("--lock-timeout", min=0.0, help="Seconds to wait for another call planning from the same state."),
    ] = DEFAULT_LOCK_TIMEOUT_S,
    observed_min: Annotated[
        int,
        typer.Option(
            "--observed-min",
            min=1,
            help="Progress reports a table cell needs before its observed median replaces an estimated or "
            "missing cell (measured cells are never replaced). Example: --observed-min 5",
        ),
    ] = DEFAULT_MIN_OBSERVATIONS,
    no_observed: Annotated[
        bool,
        typer.Option(
            "--no-observed", help="Decide with the table as given; observations are still recorded in the state."
        ),
    ] = False,
    restart_cost: Annotated[Optional[float], RESTART_COST_KEPT_OPTION] = None,
    migration_aware: Annotated[Optional[bool], MIGRATION_AWARE_KEPT_OPTION] = None,
    strict_cells: Annotated[bool, STRICT_CELLS_OPTION] = False,
    max_scale: Annotated[float, MAX_SCALE_OPTION] = DEFAULT_MAX_FACTOR,
    scale_efficiency: Annotated[Optional[float], SCALE_EFFICIENCY_OPTION] = None,
):
    """Plan the next round(s) from the saved state and the progress a launcher reports.

    Call it at every round boundary; with faithful progress, K calls give the rounds of
    one K-round plan. Example: rota plan-next --state state.json --jobs data/jobs.csv
    --table data/throughputs.csv --cluster data/cluster.yaml --out round.json

    Reports teach throughputs (docs/observed.md): rota plan-next --state state.json
    --progress progress.json --observed-min 3 --out round.json

    Restarts cost 120 s, keep jobs where a move does not pay (kept in the state):
    rota plan-next --state state.json ... --restart-cost 120 --migration-aware
    """

    parsed = None if round_length_text is None else parse_round_length(round_length_text)
    round_s = None if parsed == AUTO else parsed
    target = state_out or state
    if not state.exists() and (jobs is None or table is None or cluster is None):
        # before the lock: a call that cannot start leaves no lock file beside a state that does not exist
        raise InputError(f"no state yet at {state}: give --jobs, --table and --cluster to start", field="--state")
    with state_lock(target, lock_timeout, on_wait=_tell_waiting):
        saved = read_state(state) if state.exists() else None
        document = None if saved is None else StateDocument.from_json(saved, state)
        version = 0 if document is None else document.version
        if state_version is not None and state_version != version:
            replayed = replayed_round(document, state, state_version, out_path, csv_path)
            _print_next_round(replayed, _replay_notes(replayed, state_version), [], out_path, target, None, as_json)
            return
        result = _plan_next(
            saved,
            document,
            state,
            table,
            jobs,
            cluster,
            policy,
            progress,
            rounds,
            round_s,
            method,
            seed,
            None if no_observed else observed_min,
            restart_cost,
            migration_aware,
            parsed == AUTO,
            strict_cells,
            ScaleOptions(max_scale, scale_efficiency, strict_cells),
            scaled_table_path(target),
            reuse_solves,
        )
        # One set: the round file (and CSV) first, the state last. A call cut short leaves the old
        # state, and a retry plans the same round again; the files carry one plan id.
        state_text = json.dumps(result.state, separators=(",", ":")) + "\n"
        # The state is updated in place (it may be the --state read above); no other input may be replaced.
        in_place = [target] if saved is not None and same_file(target, state) else []
        write_together(
            [*schedule_files(result.schedule, out_path, csv_path, compact=True), (target, state_text)],
            in_place=in_place,
        )
    for warning in result.warnings:
        err.print(styled("[yellow]warning:[/] ") + one_line(warning), highlight=False, soft_wrap=True)
    _print_next_round(result.schedule.to_json(), result.notes, result.warnings, out_path, target, result, as_json)


def _tell_waiting(lock: Path) -> None:
    err.print(f"waiting for {lock}: another call is planning from this state", highlight=False, soft_wrap=True)


def _plan_next(
    saved,
    document,
    state,
    table,
    jobs,
    cluster,
    policy,
    progress,
    rounds,
    round_s,
    method,
    seed,
    observed_min,
    restart_cost=None,
    migration_aware=None,
    round_auto=False,
    strict_cells=False,
    scaling: ScaleOptions | None = None,
    side: Path | None = None,
    reuse_solves: int | None = None,
):
    table_path = table or state_input(saved and saved.get("inputs"), "table", state)
    cluster_path = cluster or state_input(saved and saved.get("inputs"), "cluster", state)
    if saved is None and (jobs is None or table_path is None or cluster_path is None):
        raise InputError(f"no state yet at {state}: give --jobs, --table and --cluster to start", field="--state")
    if table_path is None or cluster_path is None:  # a state that does not record its inputs
        raise InputError(
            f"the state does not name its {'table' if table_path is None else 'cluster'}; give it with "
            f"--{'table' if table_path is None else 'cluster'}",
            path=state,
        )
    spec = read_cluster(cluster_path)
    check_tenants(policy or (document.policy.name if document is not None else DEFAULT_POLICY), spec)
    thr = read_table(table_path)
    require_table_rows(spec, thr, table_path)
    scaling = scaling or ScaleOptions(strict=strict_cells)
    # Rows for the scale factors the table lacks: for the state's jobs (said, or refused under --strict-cells,
    # when they were added), then the list's.
    known = [entry.job.job_type for entry in document.jobs] if document is not None else []
    extended = extend_for(thr, known, spec, replace(scaling, strict=False)).table
    read = read_jobs_scaled(jobs, table=extended, cluster=spec, options=scaling) if jobs is not None else None
    job_list = read.jobs if read is not None else None
    scaled = [e for e in read.estimates if e.job_type not in set(known)] if read is not None else []
    if read is not None:
        extended = read.table
    if extended is not thr and side is not None:  # the rounds name the rows they were planned with
        _write_scaled_table(extended, side, table_path)
        table_path = side
    thr = extended
    # Said by the call that starts the plan; checked on every call that gives jobs under --strict-cells.
    missing = missing_cells(thr, job_list, spec) if job_list is not None and (saved is None or strict_cells) else []
    if strict_cells:
        refuse_missing(missing, table_path)
    reported = read_progress(progress) if progress is not None else None
    options: dict = {}
    if method is not None:
        check_method(method)
        options["method"] = method
    if seed is not None:
        options["seed"] = seed
    if reuse_solves is not None:
        check_reuse(policy or (document.policy.name if document is not None else DEFAULT_POLICY), reuse_solves)
        options["reuse_solves"] = reuse_solves
    inputs = {"table": table_path, "cluster": cluster_path, **({"jobs": jobs} if jobs is not None else {})}
    result = next_round(
        thr,
        spec,
        state=document,
        jobs=job_list,
        progress=reported,
        policy=policy,
        policy_options=options,
        round_s=round_s,
        rounds=rounds,
        inputs=inputs,
        state_path=state,
        progress_path=progress or "<progress>",
        observed_min=observed_min,
        restart_cost_s=restart_cost,
        migration_aware=migration_aware,
        round_auto=round_auto,
    )
    if saved is None:
        result.warnings[:0] = [cells.describe() for cells in missing]
    result.warnings[:0] = [e.describe() for e in scaled]
    return result


def _replay_notes(schedule: dict, asked: int) -> list[str]:
    indices = [r["index"] for r in schedule["rounds"]]
    what = (
        "no round"
        if not indices
        else f"round {indices[0]}"
        if len(indices) == 1
        else f"rounds {indices[0]}-{indices[-1]}"
    )
    plan = schedule["next_round"]["plan_id"]
    return [f"state version {asked} was planned already ({what}, plan {plan}): returned unchanged, nothing written"]


def _print_next_round(schedule: dict, notes, warnings, out_path, state_path, result, as_json: bool) -> None:
    window = schedule.get("next_round") or {}
    done = bool(window.get("done"))
    summary = {
        "schedule": str(out_path),
        "state": str(state_path),
        "rounds": [r["index"] for r in schedule["rounds"]],
        "done": done,
        "active_jobs": window.get("active_jobs"),
        "waiting_jobs": window.get("waiting_jobs"),
        "state_version": window.get("state_version"),
        "plan_id": window.get("plan_id"),
        "notes": notes,
        "warnings": warnings,
        "timings_ms": {} if result is None else {k: round(v * 1000, 2) for k, v in result.timings.items()},
        "table_cells": None if result is None else result.provenance,
        "restarts": _restart_books(result),
    }
    if result is not None and result.restart_note:
        summary["notes"] = [*notes, result.restart_note]
    if as_json:
        out.print_json(json.dumps(summary))
        return
    for note in summary["notes"]:
        out.print(f"note: {note}")
    for rnd in schedule["rounds"]:
        grid = Table(title=f"round {rnd['index']}: {rnd['start_s']:.0f} s - {rnd['end_s']:.0f} s")
        for column in ("jobs", "worker type", "GPUs", "planned steps"):
            grid.add_column(column)
        for a in rnd["assignments"]:
            grid.add_row(
                "+".join(a["jobs"]),
                a["worker_type"],
                ", ".join(f"{g['node']}:{g['gpu']}" for g in a["gpus"]),
                ", ".join(str(n) for n in a["planned_steps"].values()),
            )
        out.print(grid)
    if done:
        out.print("every job has finished; nothing left to plan")
    cells = {} if result is None else result.provenance
    if cells.get("observed") or cells.get("estimated"):  # an all-measured table says nothing new
        out.print(
            f"table: {cells['measured']} measured, {cells['observed']} observed, {cells['estimated']} estimated cells"
        )
    books = summary["restarts"]
    # Nothing charged and nothing asked for: the restart note above already said so.
    if books and (books["restart_gpu_s"] > 0 or books["restart_cost_s"] is not None or books["migration_aware"]):
        out.print(
            f"restarts so far: {books['restarts']}, {books['restart_gpu_s'] / 3600:.3f} GPU-h lost"
            + (" (migration-aware)" if books["migration_aware"] else "")
        )
    if result is not None:
        out.print(f"wrote {out_path} and {state_path} in {result.timings['total_s'] * 1000:.0f} ms")


def _restart_books(result) -> dict | None:
    """The state's restart tally for the summary (None when no restart cost is charged)."""
    books = None if result is None else result.restarts
    if books is None:
        return None
    return {
        "restarts": books.starts,
        "restart_gpu_s": sum(books.lost_gpu_s.values()),
        "restart_cost_s": books.cost_s,
        "migration_aware": books.migration_aware,
    }


def write_compact_schedule(schedule: Schedule, path: Path, csv_path: Path | None = None) -> None:
    """The schedule JSON without indentation (the C encoder is ~10x faster on 1000 jobs),
    with its CSV view: together or not at all."""
    write_together(schedule_files(schedule, path, csv_path, compact=True))
