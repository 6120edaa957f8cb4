"""What a person watches while `rota run` works: a live panel on a terminal (rich), plain event
lines otherwise (a log file, a CI job). The JSONL event log is the record; this is the view."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from planner.launch.loop import RunLoop

# The events a person wants to see as lines (the others only move the panel).
SHOWN = {
    "run_start",
    "resume",
    "plan",
    "round_start",
    "round_end",
    "job_failed",
    "job_given_up",
    "node_lost",
    "node_back",
    "warning",
    "run_stop",
    "run_end",
}


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def event_line(record: dict[str, Any]) -> str:
    """One event as a short line of text (user strings printed literally, never as markup)."""
    kind = record["event"]
    fields = {k: v for k, v in record.items() if k not in ("time", "event")}
    clock = time.strftime("%H:%M:%S", time.localtime(record["time"]))
    if kind in ("warning", "note"):
        return f"{clock} {kind}: {fields.get('text', '')}"
    if kind == "job_end":
        return (
            f"{clock} {fields['job_id']}: {fields['state']} (exit {fields['exit_code']}), steps {fields['steps_done']}"
        )
    text = " ".join(f"{k}={v}" for k, v in fields.items() if v not in (None, [], {}))
    return f"{clock} {kind} {text}".rstrip()


class RunView:
    def __init__(self, console: Console, live: bool) -> None:
        self.console = console
        self.live = Live(console=console, auto_refresh=False, transient=True) if live else None
        self.loop: RunLoop | None = None

    def __enter__(self) -> RunView:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def event(self, record: dict[str, Any]) -> None:
        if record["event"] in SHOWN or (record["event"] == "job_end" and record.get("state") != "completed"):
            line = Text(event_line(record))
            if self.live is not None:
                self.live.console.print(line, soft_wrap=True)
            else:
                self.console.print(line, soft_wrap=True, highlight=False)
        self.refresh()

    def refresh(self, loop: RunLoop | None = None) -> None:
        self.loop = loop or self.loop
        if self.live is None or self.loop is None:
            return
        self.live.update(self.panel(self.loop), refresh=True)

    def panel(self, loop: RunLoop) -> Group:
        rows: list[Any] = []
        running = loop.running
        if running:
            end = running["started"] + running["round_s"]
            left = end - time.time()
            rows.append(Text(f"round {running['index']}: {len(running['jobs'])} job(s), {max(0.0, left):.0f} s left"))
            grace = running.get("grace_s")
            upcoming = [] if grace is None else [("SIGTERM (checkpoint)", end - grace)]
            upcoming.append(("round ends", end))
            rows.append(
                Text("next: " + ", ".join(f"{what} at {_clock(at)}" for what, at in upcoming if at >= time.time()))
            )
        doc = loop.document
        if doc is not None:
            counts: dict[str, int] = {}
            for e in doc.jobs:
                counts[str(e.status)] = counts.get(str(e.status), 0) + 1
            jobs = Table(title="jobs", show_edge=False)
            for name in ("active", "pending", "finished", "failed", "cancelled"):
                jobs.add_column(name, justify="right")
            jobs.add_row(*(str(counts.get(n, 0)) for n in ("active", "pending", "finished", "failed", "cancelled")))
            rows.append(jobs)
        plan = loop.last_plan
        if plan is not None and plan.schedule.utilisation:
            use = Table(title="planned utilisation", show_edge=False)
            for w in plan.schedule.utilisation:
                use.add_column(w, justify="right")
            use.add_row(*(f"{u * 100:.0f} %" for u in plan.schedule.utilisation.values()))
            rows.append(use)
        if loop.round_tenants:
            tenants = Table(title="GPUs by tenant, this round", show_edge=False)
            for name in loop.round_tenants:
                tenants.add_column(name, justify="right")
            tenants.add_row(*(f"{sum(by_type.values()):g}" for by_type in loop.round_tenants.values()))
            rows.append(tenants)
        if loop.entry.unusable:
            rows.append(Text("unusable nodes: " + ", ".join(f"{n} ({w})" for n, w in loop.entry.unusable.items())))
        return Group(*rows)
