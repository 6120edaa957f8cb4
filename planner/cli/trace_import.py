"""`rota trace import gavel|philly|helios|alibaba-pai`: public cluster traces as rota job lists."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import typer

from planner.cli.common import out, progress_bar, user_errors
from planner.cli.simulate import finite, seed_option
from planner.errors import InputError
from planner.formats.atomic import write_text_atomic
from planner.formats.fields import MAX_TIME_S, short
from planner.formats.files import same_file
from planner.formats.inputs import load_table
from planner.formats.trace import write_trace
from planner.formats.trace_import import alibaba_pai, gavel, helios, philly
from planner.formats.trace_import.common import (
    DROP_REASONS,
    MAX_GPUS,
    MAX_GPUS_ACTIONS,
    MAX_IMPORT_JOBS,
    UNMEASURED_ACTIONS,
    BadRows,
    ImportOptions,
    ImportSummary,
    SourceJob,
    choice,
    split_list,
)
from planner.formats.trace_import.convert import convert
from planner.formats.trace_import.sizing import Sizer

MAX_FILES = 10_000  # Gavel trace files in one import
OUT_SUFFIXES = (".csv", ".json", ".trace")

import_app = typer.Typer(
    no_args_is_help=True,
    help="Convert public cluster traces (Gavel's msr traces, Philly, Helios, Alibaba PAI) into rota job lists.",
)

# --------------------------------------------------------------------------- options every format has

TABLE = typer.Option(
    ..., "--table", "-t", help="Throughput table (.csv/.parquet) or Gavel's JSON: the job types and their speeds."
)
OUT = typer.Option(
    ..., "--out", "-o", help="Job list to write: .csv (rota's, with entity), .json, or .trace (Gavel's)."
)
SUMMARY = typer.Option(None, "--summary", help="Where to write the summary JSON (default: OUT with .summary.json).")
ENTITIES = typer.Option(
    None, "--entity", "--vc", help="Keep only these entities (virtual clusters, users), comma-separated."
)
START = typer.Option(
    None,
    "--start-s",
    min=0.0,
    max=MAX_TIME_S,
    callback=finite,
    help="Keep jobs submitted at least this many seconds after the trace's first submission.",
)
END = typer.Option(
    None,
    "--end-s",
    min=0.0,
    max=MAX_TIME_S,
    callback=finite,
    help="Keep jobs submitted less than this many seconds after the trace's first submission.",
)
MAX_JOBS = typer.Option(
    None, "--max-jobs", min=1, max=MAX_IMPORT_JOBS, help="Keep the first N jobs (arrival order) that pass the filters."
)
MAX_GPUS_OPTION = typer.Option(
    None, "--max-gpus", min=1, max=MAX_GPUS, help="Largest GPU count a job may have (see --max-gpus-action)."
)
MAX_GPUS_ACTION = typer.Option("cap", "--max-gpus-action", help="A job above --max-gpus: cap (to it) or drop.")
UNMEASURED = typer.Option(
    "keep",
    "--unmeasured",
    help="A GPU count the table has no row for: keep (for a table estimated or measured later), "
    "cap (to the largest measured count below it) or drop.",
)
REFERENCE = typer.Option(
    None, "--reference-type", help="Worker type run times refer to (default v100, else the fastest on average)."
)
SKIP_BAD = typer.Option(
    False,
    "--skip-bad-rows",
    help="Drop unparseable rows (counted, the first 20 quoted in the summary) instead of stopping.",
)
AS_JSON = typer.Option(False, "--json", help="Print the summary as JSON.")

# Traces of real clusters: job types are drawn.
SEED = seed_option("Seed of the job-type draws.")
JOB_TYPES = typer.Option(
    None,
    "--job-types",
    help="Job types to draw from, comma-separated: labels such as 'ResNet-18 (batch size 32)' or model names "
    "(all their batch sizes); default: every single-GPU type of the table.",
)
STATUS = typer.Option(None, "--status", help="Keep only jobs that ended with these statuses, comma-separated.")
MIN_DURATION = typer.Option(
    0.0, "--min-duration-s", min=0.0, max=MAX_TIME_S, callback=finite, help="Drop jobs that ran less than this."
)


def _options(**given: Any) -> ImportOptions:
    return ImportOptions(
        seed=given.get("seed", 0),
        job_types=split_list(given.get("job_types"), "--job-types"),
        reference_type=given["reference_type"],
        max_gpus=given["max_gpus"],
        max_gpus_action=choice(given["max_gpus_action"], MAX_GPUS_ACTIONS, "--max-gpus-action"),
        unmeasured=choice(given["unmeasured"], UNMEASURED_ACTIONS, "--unmeasured"),
        statuses=_statuses(given.get("status"), given.get("known_statuses", ())),
        entities=split_list(given["entities"], "--entity"),
        start_s=given["start_s"],
        end_s=given["end_s"],
        max_jobs=given["max_jobs"],
        min_duration_s=given.get("min_duration_s", 0.0),
        skip_bad_rows=given["skip_bad_rows"],
    )


def _statuses(text: Optional[str], known: tuple[str, ...]) -> tuple[str, ...] | None:
    """--status values, spelled as the trace spells them (case-insensitive on input)."""
    items = split_list(text, "--status")
    if items is None:
        return None
    spelled = {k.lower(): k for k in known}
    for item in items:
        if item.lower() not in spelled:
            raise InputError(f"unknown status {short(item)} (this trace's: {', '.join(known)})", field="--status")
    return tuple(spelled[item.lower()] for item in items)


def _targets(out_path: Path, given: Optional[Path], inputs: list[str]) -> Path:
    """The summary's path; checks, before any reading, that neither output is an input."""
    if out_path.suffix.lower() not in OUT_SUFFIXES:
        raise InputError(f"unsupported job list format (use {', '.join(OUT_SUFFIXES)})", path=out_path, field="--out")
    path = given if given is not None else out_path.with_name(out_path.stem + ".summary.json")
    if same_file(path, out_path):
        raise InputError("is the job list's own path; give another --summary", field="--summary", path=path)
    for target, option in ((out_path, "--out"), (path, "--summary")):
        if any(same_file(target, source) for source in inputs):
            raise InputError("is an input of this import; give another path", path=target, field=option)
    return path


# --------------------------------------------------------------------------- one import


def _run(
    summary: ImportSummary,
    read: Callable[[BadRows], Iterator[SourceJob]],
    *,
    table: Path,
    out_path: Path,
    summary_path: Optional[Path],
    options: ImportOptions,
    draws: bool,
    as_json: bool,
    counts: dict[str, int] | None = None,
) -> None:
    target = _targets(out_path, summary_path, [*summary.inputs, str(table)])
    thr = load_table(table)
    sizer = Sizer(thr, options, summary)
    if draws:
        summary.details["job_types_drawn_from"] = [jt.name for jt in sizer.pool]  # checks --job-types first
    bad = BadRows(summary, options.skip_bad_rows)
    with progress_bar(f"importing {summary.source}", "jobs read", hidden=as_json) as bar:
        task = bar.add_task("import", total=None)
        jobs = convert(read(bad), sizer, options, summary, tick=lambda n: bar.advance(task, n))
    if counts:
        summary.fractional_gpus = counts.pop("fractional_gpus", 0)
        summary.details.update(counts)
    write_trace(jobs, out_path, thr)
    doc = summary.to_json(output=str(out_path), table=str(table), options=options)
    write_text_atomic(target, json.dumps(doc, indent=1) + "\n")
    if as_json:
        out.print_json(json.dumps(doc))
        return
    for line in _report(doc, target, draws):
        out.print(line, highlight=False, soft_wrap=True)


def _report(doc: dict[str, Any], target: Path, draws: bool) -> list[str]:
    scales = ", ".join(f"{n} x{k}" for k, n in doc["scale_factors"].items())
    hours = doc["last_arrival_s"] / 3600
    lines = [
        f"wrote {doc['output']}: {doc['jobs_kept']} of {doc['jobs_read']} jobs ({scales} GPUs), "
        f"{doc['entities']} {'entity' if doc['entities'] == 1 else 'entities'}, arrivals over {hours:.1f} h"
    ]
    if doc["dropped"]:
        parts = [f"{n} {DROP_REASONS[k]}" for k, n in sorted(doc["dropped"].items(), key=lambda kv: -kv[1])]
        lines.append(f"dropped {doc['jobs_dropped']}: " + "; ".join(parts))
    if draws:
        lines.append(
            f"job types: drawn from {len(doc['options']['job_types_drawn_from'])} types "
            f"(seed {doc['options']['seed']}), {doc['types_redrawn']} redrawn to one measured at the job's GPU count; "
            f"steps = run time x throughput on {doc['reference_type']}"
        )
    gpus = "job's GPU count", "jobs' GPU counts"
    changes = [
        (doc["gpus_capped_max"], gpus, f"lowered to --max-gpus {doc['options']['max_gpus']}"),
        (doc["gpus_capped_unmeasured"], gpus, "lowered to the largest the table measures"),
        (doc["unmeasured_kept"], gpus, "kept without a row in the table"),
        (doc["fractional_gpus_rounded_up"], ("job's GPU share", "jobs' GPU shares"), "rounded up to whole GPUs"),
        (doc["ids_renamed"], ("repeated job id", "repeated job ids"), "renamed"),
    ]
    done = [f"{n} {what[n != 1]} {how}" for n, what, how in changes if n]
    if done:
        lines.append("changed: " + "; ".join(done))
    lines.append(f"summary: {target}")
    return lines


# --------------------------------------------------------------------------- the commands


@import_app.command("gavel")
@user_errors
def gavel_command(
    files: list[Path] = typer.Argument(
        ..., help="Gavel .trace files: 7-column msr traces or 10-column generated ones; each file's stem is an entity."
    ),
    table: Path = TABLE,
    out_path: Path = OUT,
    summary_path: Optional[Path] = SUMMARY,
    entity_from: str = typer.Option("file", "--entity-from", help="Entity of a file's jobs: file (its stem) or none."),
    entities: Optional[str] = ENTITIES,
    start_s: Optional[float] = START,
    end_s: Optional[float] = END,
    max_jobs: Optional[int] = MAX_JOBS,
    max_gpus: Optional[int] = MAX_GPUS_OPTION,
    max_gpus_action: str = MAX_GPUS_ACTION,
    unmeasured: str = UNMEASURED,
    reference_type: Optional[str] = REFERENCE,
    skip_bad_rows: bool = SKIP_BAD,
    as_json: bool = AS_JSON,
):
    """Import Gavel's traces: the msr traces of Philly's 14 virtual clusters, merged in arrival order.

    Example: rota trace import gavel msr/seed=0/*.trace --table data/gavel/simulation_throughputs.csv
    --unmeasured cap --out msr.csv
    """
    if len(files) > MAX_FILES:
        raise InputError(f"at most {MAX_FILES} files, got {len(files)}", field="FILES")
    choice(entity_from, gavel.ENTITY_FROM, "--entity-from")
    options = _options(**locals())
    summary = ImportSummary("gavel", [str(f) for f in files], details={"entity_from": entity_from})
    _run(
        summary,
        lambda bad: gavel.read_gavel(files, bad, entity_from=entity_from),
        table=table,
        out_path=out_path,
        summary_path=summary_path,
        options=options,
        draws=False,
        as_json=as_json,
    )


@import_app.command("philly")
@user_errors
def philly_command(
    log: Path = typer.Argument(..., help="Philly's cluster_job_log (JSON)."),
    table: Path = TABLE,
    out_path: Path = OUT,
    summary_path: Optional[Path] = SUMMARY,
    duration: str = typer.Option(
        "sum", "--duration", help="Run time: sum (of the attempts), last (attempt) or span (first start to last end)."
    ),
    entity_from: str = typer.Option("vc", "--entity-from", help="A job's entity: vc, user or none."),
    seed: int = SEED,
    job_types: Optional[str] = JOB_TYPES,
    status: Optional[str] = STATUS,
    entities: Optional[str] = ENTITIES,
    min_duration_s: float = MIN_DURATION,
    start_s: Optional[float] = START,
    end_s: Optional[float] = END,
    max_jobs: Optional[int] = MAX_JOBS,
    max_gpus: Optional[int] = MAX_GPUS_OPTION,
    max_gpus_action: str = MAX_GPUS_ACTION,
    unmeasured: str = UNMEASURED,
    reference_type: Optional[str] = REFERENCE,
    skip_bad_rows: bool = SKIP_BAD,
    as_json: bool = AS_JSON,
):
    """Import Microsoft's Philly trace (cluster_job_log); job types are drawn from the table.

    Example: rota trace import philly trace-data/cluster_job_log --table data/gavel/simulation_throughputs.csv
    --status Pass --vc 6214e9 --max-gpus 8 --out philly.csv
    """
    choice(duration, philly.DURATIONS, "--duration")
    choice(entity_from, philly.ENTITY_FROM, "--entity-from")
    options = _options(**locals(), known_statuses=philly.STATUSES)
    summary = ImportSummary("philly", [str(log)], details={"duration": duration, "entity_from": entity_from})
    _run(
        summary,
        lambda bad: philly.read_philly(log, bad, duration=duration, entity_from=entity_from),
        table=table,
        out_path=out_path,
        summary_path=summary_path,
        options=options,
        draws=True,
        as_json=as_json,
    )


@import_app.command("helios")
@user_errors
def helios_command(
    log: Path = typer.Argument(..., help="A Helios cluster's cluster_log.csv."),
    table: Path = TABLE,
    out_path: Path = OUT,
    summary_path: Optional[Path] = SUMMARY,
    entity_from: str = typer.Option("vc", "--entity-from", help="A job's entity: vc, user or none."),
    seed: int = SEED,
    job_types: Optional[str] = JOB_TYPES,
    status: Optional[str] = STATUS,
    entities: Optional[str] = ENTITIES,
    min_duration_s: float = MIN_DURATION,
    start_s: Optional[float] = START,
    end_s: Optional[float] = END,
    max_jobs: Optional[int] = MAX_JOBS,
    max_gpus: Optional[int] = MAX_GPUS_OPTION,
    max_gpus_action: str = MAX_GPUS_ACTION,
    unmeasured: str = UNMEASURED,
    reference_type: Optional[str] = REFERENCE,
    skip_bad_rows: bool = SKIP_BAD,
    as_json: bool = AS_JSON,
):
    """Import a SenseTime Helios trace (cluster_log.csv); job types are drawn from the table.

    Example: rota trace import helios Venus/cluster_log.csv --table data/gavel/simulation_throughputs.csv
    --status COMPLETED --max-jobs 5000 --max-gpus 8 --out venus.csv
    """
    choice(entity_from, helios.ENTITY_FROM, "--entity-from")
    options = _options(**locals(), known_statuses=helios.STATUSES)
    summary = ImportSummary("helios", [str(log)], details={"entity_from": entity_from})
    _run(
        summary,
        lambda bad: helios.read_helios(log, bad, entity_from=entity_from),
        table=table,
        out_path=out_path,
        summary_path=summary_path,
        options=options,
        draws=True,
        as_json=as_json,
    )


@import_app.command("alibaba-pai")
@user_errors
def alibaba_pai_command(
    job_table: Path = typer.Argument(..., help="pai_job_table.csv (headerless)."),
    task_table: Path = typer.Argument(..., help="pai_task_table.csv (headerless)."),
    table: Path = TABLE,
    out_path: Path = OUT,
    summary_path: Optional[Path] = SUMMARY,
    duration: str = typer.Option(
        "run", "--duration", help="Run time: run (first task start to last task end) or wall (submission to end)."
    ),
    fractional_gpus: str = typer.Option(
        "per-instance",
        "--fractional-gpus",
        help="A share below whole GPUs: per-instance (each instance's share rounded up), total (the job's sum "
        "rounded up) or drop.",
    ),
    entity_from: str = typer.Option("user", "--entity-from", help="A job's entity: user or none."),
    seed: int = SEED,
    job_types: Optional[str] = JOB_TYPES,
    status: Optional[str] = STATUS,
    entities: Optional[str] = ENTITIES,
    min_duration_s: float = MIN_DURATION,
    start_s: Optional[float] = START,
    end_s: Optional[float] = END,
    max_jobs: Optional[int] = MAX_JOBS,
    max_gpus: Optional[int] = MAX_GPUS_OPTION,
    max_gpus_action: str = MAX_GPUS_ACTION,
    unmeasured: str = UNMEASURED,
    reference_type: Optional[str] = REFERENCE,
    skip_bad_rows: bool = SKIP_BAD,
    as_json: bool = AS_JSON,
):
    """Import Alibaba PAI's GPU trace (cluster-trace-gpu-v2020); job types are drawn from the table.

    Example: rota trace import alibaba-pai pai_job_table.csv pai_task_table.csv
    --table data/gavel/simulation_throughputs.csv --status Terminated --max-jobs 5000 --out pai.csv
    """
    choice(duration, alibaba_pai.DURATIONS, "--duration")
    choice(fractional_gpus, alibaba_pai.FRACTIONS, "--fractional-gpus")
    choice(entity_from, alibaba_pai.ENTITY_FROM, "--entity-from")
    options = _options(**locals(), known_statuses=alibaba_pai.STATUSES)
    details = {"duration": duration, "fractional_gpus": fractional_gpus, "entity_from": entity_from}
    summary = ImportSummary("alibaba-pai", [str(job_table), str(task_table)], details=details)
    counts: dict[str, int] = {}
    _run(
        summary,
        lambda bad: alibaba_pai.read_pai(
            job_table,
            task_table,
            bad,
            duration=duration,
            fractions=fractional_gpus,
            entity_from=entity_from,
            counts=counts,
        ),
        table=table,
        out_path=out_path,
        summary_path=summary_path,
        options=options,
        draws=True,
        as_json=as_json,
        counts=counts,
    )
