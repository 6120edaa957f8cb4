"""`rota profile`: measure throughputs on this host into the throughput table.

Registered by the main app as `app.command("profile")(profile_command)`.
Imports no torch; the measuring processes do.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from models.registry import GPT_SIZES
from models.spec import SCALES, WorkloadSpec
from planner.errors import InputError
from planner.estimate.completion import estimate_table
from planner.formats.quality import is_noisy
from planner.formats.table import read_table, write_table
from profiler import devices as devices_mod
from profiler.command import is_command, parse_command
from profiler.plan import (
    DEFAULT_SCALE_FACTORS,
    PairSample,
    Selection,
    build_plan,
    parse_ints,
    parse_pairs,
    split_list,
)
from profiler.ray_nodes import ray_nodes
from profiler.report import ProfileProgress, device_table, model_table, noisy_note, print_plan
from profiler.session import RunOptions, read_statuses, run_plan
from profiler.slurm_nodes import LAUNCHERS, allocation_nodes
from profiler.timing import TimingConfig
from profiler.workloads import check_entry_points, is_user, parse_workload


def _pick_devices(
    requested: Optional[str], cpu_cores: int, cpu_workers: Optional[int] = None, across_nodes: Optional[str] = None
) -> list[devices_mod.DeviceType]:
    """The devices named by --device-types: 'h200,cpu', or 'NAME=DEVICE' to record DEVICE's rows
    under the worker type NAME (a cluster's 'v100' measured on the local 'v100-16gb'); with
    --across-nodes, each spans the allocation's nodes."""
    picked = _local_devices(requested, cpu_cores, cpu_workers)
    if across_nodes is None:
        return picked
    if across_nodes not in LAUNCHERS:
        raise InputError(f"must be one of {', '.join(LAUNCHERS)}, got {across_nodes!r}", field="--across-nodes")
    nodes = allocation_nodes() if across_nodes == "slurm" else ray_nodes()
    return [replace(d, nodes=nodes) for d in picked] if len(nodes) > 1 else picked


def _local_devices(
    requested: Optional[str], cpu_cores: int, cpu_workers: Optional[int]
) -> list[devices_mod.DeviceType]:
    wanted = _device_names(requested)
    cpu_only = bool(wanted) and set(wanted.values()) == {"cpu"}
    try:
        found = devices_mod.discover(include_cuda=not cpu_only, cores_per_worker=cpu_cores, cpu_workers=cpu_workers)
    except ValueError as exc:
        raise InputError(str(exc), field="--cpu-workers" if "workers" in str(exc) else "--cpu-cores") from None
    if not wanted:
        return found
    by_name = {d.worker_type: d for d in found}
    unknown = [n for n in dict.fromkeys(wanted.values()) if n not in by_name]
    if unknown:
        raise InputError(
            f"no device of type {', '.join(unknown)} on this host (found: {', '.join(by_name)})", field="--device-types"
        )
    return [replace(by_name[device], worker_type=name) for name, device in wanted.items()]


def _device_names(requested: Optional[str]) -> dict[str, str]:
    """--device-types as {worker type to record: local device type}."""
    wanted: dict[str, str] = {}
    for item in split_list(requested):
        name, sep, device = (part.strip() for part in item.partition("="))
        device = device.lower() if sep else name.lower()
        name = name if sep else device
        if not name or not device or "=" in device:
            raise InputError(f"expected DEVICE or NAME=DEVICE, got {item!r}", field="--device-types")
        if wanted.get(name, device) != device:
            raise InputError(f"worker type {name!r} is given two devices", field="--device-types")
        wanted[name] = device
    return wanted


# Upper bounds on the timing options: NaN, infinity or 1e400 passed the parser and crashed the
# estimate; a day per measurement is beyond any real use.
MAX_MEASUREMENT_S = 86400.0


def _check_seconds(a: ProfileArgs) -> None:
    for option, value in (("--budget", a.budget), ("--window-s", a.window), ("--timeout", a.timeout)):
        if value is not None and not (0 < value <= MAX_MEASUREMENT_S):
            raise InputError(f"expected seconds in (0, {MAX_MEASUREMENT_S:g}], got {value!r}", field=option)
    if not (0 < a.target_spread < 1e6):
        raise InputError(f"expected a positive finite number, got {a.target_spread!r}", field="--target-spread")


def _timing(budget: float, warmup_steps: int, window: float, target_spread: float) -> TimingConfig:
    try:
        return TimingConfig(warmup_steps=warmup_steps, window_s=window, target_spread=target_spread, budget_s=budget)
    except ValueError as exc:
        raise InputError(str(exc), field="--budget/--warmup-steps/--window") from None


def profile_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Throughput table to append to (.csv or .parquet).")] = Path(
        "throughputs.csv"
    ),
    device_types: Annotated[
        Optional[str],
        typer.Option(
            help="Comma-separated worker types to profile, e.g. 'h200,cpu' (default: every device found); "
            "'NAME=DEVICE' records DEVICE's rows under the worker type NAME, e.g. 'v100=v100-16gb'."
        ),
    ] = None,
    models: Annotated[
        Optional[str],
        typer.Option(help="Comma-separated model names, e.g. 'ResNet-18,LM' (default: all reference models)."),
    ] = None,
    batch_sizes: Annotated[
        Optional[str],
        typer.Option(help="Comma-separated batch sizes to keep, e.g. '16,32' (A3C and CycleGAN have none and stay)."),
    ] = None,
    pairs: Annotated[
        str,
        typer.Option(
            help="Co-located pairs at scale factor 1: 'all', 'none', a list like 'ResNet-18@16+LM@5,A3C+CycleGAN', "
            "'reference:K' (every job type against K reference types) or 'budget:SECONDS' (as many references "
            "as fit); the last two then estimate the other pairs into <out>-estimated."
        ),
    ] = "all",
    scale_factors: Annotated[
        Optional[str],
        typer.Option(
            help="Data-parallel scale factors to measure, capped by the devices of each type (default: 1,2,4,8 "
            "for reference models, 1 for --workload/--command jobs: a script that does not form a gang would "
            "look like k times itself)."
        ),
    ] = None,
    scale: Annotated[str, typer.Option(help="'full' (real shapes) or 'tiny' (shrunk, for CPUs and tests).")] = "full",
    budget: Annotated[float, typer.Option(help="Timed seconds per measurement (warm-up excluded).")] = 10.0,
    warmup_steps: Annotated[int, typer.Option(help="Untimed steps before timing starts (>= 1).")] = 3,
    window: Annotated[
        float,
        typer.Option("--window-s", "--window", help="Target seconds per timed window of steps (--window: old name)."),
    ] = 0.25,
    target_spread: Annotated[
        float, typer.Option(help="Stop a measurement early once IQR/median of window step times is at most this.")
    ] = 0.02,
    timeout: Annotated[
        Optional[float],
        typer.Option(help="Hard limit in seconds for one measurement, start-up included (default: 300 + 3 x budget)."),
    ] = None,
    cpu_cores: Annotated[
        int,
        typer.Option(
            help="Cores per CPU worker: a job gets that many cores (one thread each), a pair shares them, "
            "a data-parallel job of scale factor k gets k such workers."
        ),
    ] = 1,
    cpu_workers: Annotated[
        Optional[int],
        typer.Option(
            help="CPU workers (default: as many as --cpu-cores allows). More than the cores allow share the "
            "cores, so a 4-process job can be tried on a 2-core laptop; its rows' device_name says so."
        ),
    ] = None,
    across_nodes: Annotated[
        Optional[str],
        typer.Option(
            help="'slurm': inside a multi-node Slurm allocation (sbatch --nodes=N, salloc -N N), measure "
            "--command jobs on gangs of whole nodes too (--scale-factors beyond one node's devices; the other "
            "nodes' ranks start through srun); 'ray': the same in a job of rota profile-jobs ray (Ray tasks). "
            "Every node is taken to hold this one's devices.",
        ),
    ] = None,
    gpt_size: Annotated[
        str, typer.Option(help="GPT preset: small (table name 'GPT'), medium, large or xl ('GPT-<size>').")
    ] = "small",
    workload: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Your own model: '[NAME=]package.module:factory', a factory taking a models.spec.BuildContext "
            "and returning a models.spec.Built or a step callable (repeatable; see docs/profiling.md)."
        ),
    ] = None,
    command: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Your own script: '[NAME=]python train.py ...', printing 'ROTA_STEP <n>' after each step "
            "(repeatable; measured alone; see docs/profiling.md)."
        ),
    ] = None,
    restart_cost: Annotated[
        bool, typer.Option(help="Time a checkpoint save and load after each solo measurement.")
    ] = True,
    resume: Annotated[bool, typer.Option(help="Skip measurements whose rows are already in --out.")] = False,
    dry_run: Annotated[bool, typer.Option(help="Print the plan and a time estimate; measure nothing.")] = False,
    list_devices: Annotated[bool, typer.Option(help="Show the devices found on this host and exit.")] = False,
    list_models: Annotated[
        bool, typer.Option(help="Show the reference models and the given --workload/--command jobs, and exit.")
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Machine-readable output for --list-devices and --dry-run.")
    ] = False,
) -> None:
    """Measure solo, co-located and data-parallel training throughput into the throughput table.

    Example:

        rota profile --device-types cpu --scale tiny --out data/throughputs_cpu_tiny.csv
    """
    try:
        _profile(ProfileArgs(**locals()))  # exactly the parameters: nothing else is bound yet
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@dataclass(frozen=True)
class ProfileArgs:
    """The command's options, as given."""

    out: Path
    device_types: Optional[str]
    models: Optional[str]
    batch_sizes: Optional[str]
    pairs: str
    scale_factors: Optional[str]
    scale: str
    budget: float
    warmup_steps: int
    window: float
    target_spread: float
    timeout: Optional[float]
    cpu_cores: int
    cpu_workers: Optional[int]
    across_nodes: Optional[str]
    gpt_size: str
    workload: Optional[list[str]]
    command: Optional[list[str]]
    restart_cost: bool
    resume: bool
    dry_run: bool
    list_devices: bool
    list_models: bool
    json_output: bool


def _profile(a: ProfileArgs) -> None:
    console = Console(highlight=False)
    if a.list_devices:
        _show_devices(console, _pick_devices(a.device_types, a.cpu_cores, a.cpu_workers, a.across_nodes), a.json_output)
        return
    if a.scale not in SCALES:
        raise InputError(f"must be one of {', '.join(SCALES)}, got {a.scale!r}", field="--scale")
    if a.gpt_size not in GPT_SIZES:
        raise InputError(f"must be one of {', '.join(GPT_SIZES)}, got {a.gpt_size!r}", field="--gpt-size")
    if a.out.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise InputError("the table must be .csv or .parquet", path=a.out, field="--out")
    _check_seconds(a)
    timing = _timing(a.budget, a.warmup_steps, a.window, a.target_spread)
    batch_sizes = parse_ints(a.batch_sizes, "--batch-sizes")
    given_scales = parse_ints(a.scale_factors, "--scale-factors")
    user = _user_specs(a, batch_sizes or (), given_scales or (1,))
    if a.list_models:
        _show_models(console, Selection(gpt_size=a.gpt_size, user=user), a.json_output)
        return
    selection = Selection(
        models=tuple(split_list(a.models)) or None,
        batch_sizes=batch_sizes,
        user=user,
        pairs=parse_pairs(a.pairs),
        scale_factors=given_scales or DEFAULT_SCALE_FACTORS,
        gpt_size=a.gpt_size,
        budget_s=a.budget,
    )
    tasks = build_plan(_pick_devices(a.device_types, a.cpu_cores, a.cpu_workers, a.across_nodes), selection)
    if not tasks:
        raise InputError("nothing to measure with this selection", field="--models")
    try:
        present = read_statuses(a.out) if a.resume else {}
    except Exception as exc:  # unreadable table: say which file
        raise InputError(f"cannot read: {str(exc).splitlines()[0]}", path=a.out) from None
    skipped = {i for i, t in enumerate(tasks) if present and all(k in present for k in t.row_keys())}
    if a.dry_run:
        _show_plan(console, tasks, skipped, a.budget, a.json_output)
        return
    if not devices_mod.torch_available():
        raise InputError("torch is not installed; install the profiler extra: pip install 'rota[profiler]'")
    options = RunOptions(
        out=a.out, timing=timing, scale=a.scale, resume=a.resume, timeout_s=a.timeout, restart_cost=a.restart_cost
    )
    _run(console, tasks, options)
    if isinstance(selection.pairs, PairSample):
        _estimate_rest(console, a.out)


def _user_specs(
    a: ProfileArgs, batch_sizes: tuple[int, ...], scale_factors: tuple[int, ...]
) -> tuple[WorkloadSpec, ...]:
    """--workload and --command jobs, at every --scale-factors; entry points are imported (in a child)
    now, so a bad one fails first."""
    workloads = [parse_workload(text, batch_sizes, scale_factors) for text in a.workload or ()]
    check_entry_points([w.builder for w in workloads])
    return (*workloads, *(parse_command(text, batch_sizes, scale_factors) for text in a.command or ()))


def _show_models(console: Console, selection: Selection, as_json: bool) -> None:
    specs = selection.workloads()
    kinds = ["command" if is_command(s) else "workload" if is_user(s) else "reference" for s in specs]
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "model": s.model,
                        "kind": kind,
                        "batch_sizes": list(s.batch_sizes),
                        "scale_factors": list(s.scale_factors),
                        "runs": s.options.get("command") or s.builder,
                    }
                    for s, kind in zip(specs, kinds)
                ],
                indent=2,
            )
        )
        return
    console.print(model_table(specs, kinds))


def _estimate_rest(console: Console, measured: Path) -> Path:
    """Fill the pairs that were not measured; the measured table stays as it is."""
    target = measured.with_name(f"{measured.stem}-estimated{measured.suffix}")
    full, report = estimate_table(read_table(measured), partial=True)
    write_table(full, target)
    added = sum(1 for r in full.rows if r["status"] == "estimated")
    console.print(f"estimated {added} co-location rows from the measured pairs → {target}", markup=False)
    return target


def _show_devices(console: Console, found, as_json: bool) -> None:
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "worker_type": d.worker_type,
                        "backend": d.backend,
                        "indices": list(d.indices),
                        "max_scale_factor": d.max_processes,
                        "memory_bytes": d.memory_bytes,
                        "device_name": d.device_name,
                    }
                    for d in found
                ],
                indent=2,
            )
        )
        return
    console.print(device_table(found))
    if not devices_mod.torch_available():
        console.print("torch is not installed: only the CPU is listed (pip install 'rota[profiler]')", markup=False)


def _show_plan(console: Console, tasks, skipped: set[int], budget: float, as_json: bool) -> None:
    if not as_json:
        print_plan(console, tasks, skipped, budget)
        return
    todo = [t for i, t in enumerate(tasks) if i not in skipped]
    typer.echo(
        json.dumps(
            {
                "measurements": [
                    {
                        "mode": t.mode,
                        "worker_type": t.device.worker_type,
                        "jobs": [j.label for j in t.jobs],
                        "scale_factor": t.scale_factor,
                        "skip": i in skipped,
                    }
                    for i, t in enumerate(tasks)
                ],
                "estimate_s": sum(t.estimate_s(budget) for t in todo),
            },
            indent=2,
        )
    )


def _run(console: Console, tasks, options: RunOptions) -> None:
    counts: Counter = Counter()
    noisy: list[str] = []
    noisy_user: list[str] = []  # those measuring a --workload/--command job: not for --models
    try:
        with ProfileProgress(console, len(tasks)) as progress:

            def done(outcome):
                counts[outcome.status] += 1
                # a pair has two rows, one measurement; failed rows have no statistics
                if outcome.status == "ok" and any(is_noisy(row) for row in outcome.rows):
                    noisy.append(outcome.task.label)
                    if any(is_user(job.spec) for job in outcome.task.jobs):
                        noisy_user.append(outcome.task.label)
                progress.finished(outcome)

            run_plan(tasks, options, on_start=progress.started, on_done=done)
    except KeyboardInterrupt:
        console.print(
            f"interrupted: {options.out} keeps every finished measurement; "
            f"rerun the same command with --resume to continue",
            markup=False,
        )
        raise typer.Exit(130) from None
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    console.print(f"done: {len(tasks)} measurements ({summary}) → {options.out}", markup=False)
    note = noisy_note(noisy, noisy_user)
    if note:
        console.print(note, highlight=False)
