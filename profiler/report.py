"""What the user sees: device lists, the dry-run plan, the live progress bar.

Everything here is printed with rich markup on, so text from elsewhere (a worker type given
as NAME=DEVICE, a device name, a user's command, an error message) goes through `escape`:
'[...]' in it is shown as written, never eaten as a style or refused as a bad closing tag.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from models.spec import WorkloadSpec
from planner.formats.quality import NOISY_SPREAD, is_noisy, relative_spread, remeasure_hint
from profiler.devices import DeviceType
from profiler.plan import Task
from profiler.session import TaskOutcome

PLAN_LINES = 40  # list tasks one by one up to this many


def duration(seconds: float) -> str:
    return str(dt.timedelta(seconds=round(seconds)))


def device_table(devices: Sequence[DeviceType]) -> Table:
    table = Table(title="Devices on this host")
    for column in ("worker type", "backend", "count", "max scale factor", "memory", "device name"):
        table.add_column(column)
    for d in devices:
        memory = f"{d.memory_bytes / 2**30:.1f} GiB" if d.memory_bytes else "-"
        table.add_row(
            escape(d.worker_type), d.backend, str(d.count), str(d.max_processes), memory, escape(d.device_name)
        )
    return table


def model_table(specs: Sequence[WorkloadSpec], kinds: Sequence[str]) -> Table:
    table = Table(title="Models")
    for column in ("model", "kind", "batch sizes", "scale factors", "runs"):
        table.add_column(column)
    for spec, kind in zip(specs, kinds):
        table.add_row(
            escape(spec.model),
            kind,
            " ".join(str(b) for b in spec.batch_sizes) or "-",
            " ".join(str(k) for k in spec.scale_factors),
            escape(spec.options.get("command") or spec.builder),
        )
    return table


def plan_summary(tasks: Sequence[Task], skipped: set[int], budget_s: float) -> Table:
    table = Table(title="Profiling plan")
    for column in ("worker type", "solo", "data-parallel", "pairs", "already in table", "estimate"):
        table.add_column(column, justify="right")
    by_device: dict[str, list[tuple[int, Task]]] = {}
    for i, t in enumerate(tasks):
        by_device.setdefault(t.device.worker_type, []).append((i, t))
    for worker_type, items in by_device.items():
        kinds = Counter(t.mode for _, t in items)
        todo = [t for i, t in items if i not in skipped]
        table.add_row(
            escape(worker_type),
            str(kinds["solo"]),
            str(kinds["data_parallel"]),
            str(kinds["pair"]),
            str(len(items) - len(todo)),
            duration(sum(t.estimate_s(budget_s) for t in todo)),
        )
    return table


def print_plan(console: Console, tasks: Sequence[Task], skipped: set[int], budget_s: float) -> None:
    console.print(plan_summary(tasks, skipped, budget_s))
    for i, task in enumerate(tasks[:PLAN_LINES]):
        mark = "skip" if i in skipped else f"{i + 1:4d}"
        console.print(f"  {mark}  {task.mode:13s} {escape(task.label)}", highlight=False)
    if len(tasks) > PLAN_LINES:
        console.print(f"  ... and {len(tasks) - PLAN_LINES} more", highlight=False)
    todo = [t for i, t in enumerate(tasks) if i not in skipped]
    total = sum(t.estimate_s(budget_s) for t in todo)
    console.print(
        f"{len(todo)} measurements to run, estimated at most {duration(total)} "
        f"(start-up + a {budget_s:g} s budget each; most stop earlier once stable)",
        highlight=False,
    )


def outcome_line(outcome: TaskOutcome) -> str:
    label = escape(outcome.task.label)
    if outcome.status == "skipped":
        return f"[dim]skip[/dim]  {label} (already in table)"
    if outcome.status != "ok":
        why = f": {escape(outcome.message)}" if outcome.message else ""
        return f"[red]{outcome.status}[/red]  {label}{why}"
    parts = []
    for row in outcome.rows:
        spread = relative_spread(row) or 0.0
        mark = " [yellow]noisy[/yellow]" if is_noisy(row) else ""
        parts.append(f"{row['throughput']:.2f} steps/s (IQR {100 * spread:.1f} %{mark})")
    return f"[green]ok[/green]    {label}: " + ", ".join(parts) + f" [{outcome.seconds:.0f} s]"


def noisy_note(noisy: Sequence[str], user: Sequence[str] = ()) -> str | None:
    """One line after a run that measured rows with a wide spread, naming them and what to do.

    `user`: those of `noisy` that measured a --workload or --command job, which `--models` cannot
    select; the hint then says to give their options again.
    """
    if not noisy:
        return None
    shown = ", ".join(noisy[:5]) + (f" and {len(noisy) - 5} more" if len(noisy) > 5 else "")
    users = set(user) & set(noisy)
    hint = remeasure_hint(reference=users != set(noisy), user=bool(users))
    return (
        f"[yellow]warning:[/yellow] {len(noisy)} measurement(s) spread more than "
        f"{100 * NOISY_SPREAD:.0f} % (IQR / median of step times): {escape(shown)}; {hint}"
    )


class ProfileProgress:
    """A rich progress bar (done/total, elapsed, time left) with one line per result."""

    def __init__(self, console: Console, total: int):
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=console,
        )
        self.bar = self.progress.add_task("profiling", total=total)

    def __enter__(self) -> ProfileProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def started(self, task: Task) -> None:
        self.progress.update(self.bar, description=escape(task.label[:60]))

    def finished(self, outcome: TaskOutcome) -> None:
        self.progress.console.print(outcome_line(outcome), highlight=False)
        self.progress.advance(self.bar)
