"""Schedule files (DESIGN.md §3): `rota.schedule/v1` JSON and its flat CSV view.

A launcher acts on a schedule with no other input: every round lists which
jobs run on which GPUs of which node, from when to when, for how many steps.

`Schedule` is the document; its rounds, assignments and job entries stay the
JSON objects themselves (TypedDicts: a plan has thousands of them, and
`to_json` must write them back exactly as they were). The shape rules below are
shared with the validator (planner.formats.schedule_check), which reports every
problem instead of stopping at the first.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from planner.errors import InputError
from planner.formats.atomic import write_text_atomic
from planner.formats.fields import is_number, short
from planner.formats.files import read_json
from planner.formats.json_text import dumps_readable

SCHEDULE_FORMAT = "rota.schedule/v1"
CSV_COLUMNS = ["round", "start_s", "end_s", "job_id", "worker_type", "node", "gpu", "planned_steps", "co_located_with"]


# --------------------------------------------------------------------------- the JSON objects


class Gpu(TypedDict):
    node: str
    gpu: int  # index on its node


class Assignment(TypedDict):
    """One or two co-located jobs on a gang of GPUs of one worker type, for one round."""

    jobs: list[str]
    worker_type: str
    node: NotRequired[str]  # the gang's node(s), '+'-joined in placement order
    gpus: list[Gpu]
    planned_steps: dict[str, int | float]  # job id -> steps this round
    # A gang over several nodes: the leaf switch / NVLink domain all of them share (cluster spec),
    # so a launcher can ask for it (Slurm --switches=1, Kubernetes topology hints) without the spec.
    switch: NotRequired[str]
    nvlink_domain: NotRequired[str]


class UnplacedEntry(TypedDict):
    """A job (or co-located pair) the round chose on a worker type that got no GPUs: no node
    (or domain) had room for its whole gang. It does not run this round."""

    jobs: list[str]
    worker_type: str
    gpus: int  # the gang's size
    reason: str


class Round(TypedDict):
    index: int
    start_s: float
    end_s: float
    assignments: list[Assignment]
    unplaced: NotRequired[list[UnplacedEntry]]  # only where some chosen job could not be placed


class JobEntry(TypedDict, total=False):
    """What the schedule knows of a job (rota writes every key but the last two only where they apply)."""

    model: str
    batch_size: int | None
    command: str | None
    arrival_s: float
    total_steps: float
    steps_done_at_start: float
    expected_finish_s: float | None
    scale_factor: int
    finish_estimated: bool  # true: expected_finish_s comes from the job's rate, not from planned rounds
    steps_done_after: float  # next-round schedules: steps done at the end of the window


class InputRecord(TypedDict):
    path: str
    digest: str | None


class PolicyRecord(TypedDict):
    name: str
    options: dict[str, Any]


class Resolve(TypedDict):
    time_s: float
    n_jobs: int
    status: str
    objective: float | None
    solve_s: float


class SolverRecord(TypedDict):
    status: str
    solver: str | None
    objective: float | None
    build_s: float
    solve_s: float
    n_classes: int | None
    resolves: list[Resolve]


class AllocationRecord(TypedDict):
    worker_types: list[str]
    jobs: list[str]
    x: list[list[float]]  # time fraction of each job (row) on each worker type (column)


class NextRoundRecord(TypedDict, total=False):
    state_format: str
    first_round: int
    rounds_done: int
    time_s: float | None
    active_jobs: int
    waiting_jobs: int
    done: bool
    state_version: int  # the version of the state written with this file
    plan_id: str  # also the state's last_plan.id: the pair belongs together


# --------------------------------------------------------------------------- shape rules


def document_problems(data: Any) -> list[tuple[str | None, str]]:
    """(field, message) for each top-level problem; empty when the rounds and jobs can be read."""
    if not isinstance(data, dict):
        return [(None, "the schedule is not a JSON object")]
    out: list[tuple[str | None, str]] = []
    if data.get("format") != SCHEDULE_FORMAT:
        out.append(("format", f"format is {data.get('format')!r}, expected {SCHEDULE_FORMAT!r}"))
    if not isinstance(data.get("rounds"), list):
        out.append(("rounds", "'rounds' must be a list"))
    if not isinstance(data.get("jobs"), dict):
        out.append(("jobs", "'jobs' must map job ids to their totals"))
    if not is_number(data.get("round_s")) or data.get("round_s", 0) <= 0:
        out.append(("round_s", "'round_s' must be a positive number"))
    return out


# Job-entry fields that are a number or null when present.
_OPTIONAL_NUMBERS = ("arrival_s", "steps_done_at_start", "expected_finish_s", "steps_done_after")


def job_entry_problem(info: Any) -> str | None:
    if not isinstance(info, dict) or not is_number(info.get("total_steps")):
        return "'total_steps' must be a number"
    for key in _OPTIONAL_NUMBERS:
        value = info.get(key)
        if value is not None and not is_number(value, finite=key == "steps_done_at_start"):
            return f"'{key}' must be a number"
    return None


def round_problem(rnd: Any) -> str | None:
    if (
        not isinstance(rnd, dict)
        or not isinstance(rnd.get("index"), int)
        or not is_number(rnd.get("start_s"))
        or not is_number(rnd.get("end_s"))
        or not isinstance(rnd.get("assignments"), list)
    ):
        return "needs index, start_s, end_s, assignments"
    unplaced = rnd.get("unplaced", [])
    if not isinstance(unplaced, list) or not all(_is_unplaced(u) for u in unplaced):
        return "'unplaced' must be a list of {jobs, worker_type, gpus, reason}"
    return None


def _is_unplaced(u: Any) -> bool:
    if not isinstance(u, dict):
        return False
    jobs, gpus = u.get("jobs"), u.get("gpus")
    return (
        isinstance(jobs, list)
        and bool(jobs)
        and all(isinstance(j, str) for j in jobs)
        and isinstance(u.get("worker_type"), str)
        and isinstance(gpus, int)
        and not isinstance(gpus, bool)
        and gpus > 0
        and isinstance(u.get("reason"), str)
    )


def _is_gpu(g: Any) -> bool:
    return (
        isinstance(g, dict)
        and isinstance(g.get("node"), str)
        and isinstance(g.get("gpu"), int)
        and not isinstance(g.get("gpu"), bool)
    )


def assignment_problem(a: Any) -> str | None:
    if not isinstance(a, dict):
        return "an assignment is not an object"
    jobs = a.get("jobs")
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, str) for j in jobs):
        return "'jobs' must be a non-empty list of job ids"
    label = ", ".join(jobs)
    if not isinstance(a.get("worker_type"), str):
        return f"assignment of {label}: 'worker_type' must be a string"
    gpus = a.get("gpus")
    if not isinstance(gpus, list) or not gpus or not all(_is_gpu(g) for g in gpus):
        return f"assignment of {label}: 'gpus' must be a non-empty list of {{node, gpu}}"
    steps = a.get("planned_steps")
    if not isinstance(steps, dict) or set(steps) != set(jobs):
        return f"assignment of {label}: 'planned_steps' must give steps for exactly its jobs"
    if "node" in a:
        nodes = "+".join(dict.fromkeys(g["node"] for g in gpus))
        if a["node"] != nodes:
            return f"assignment of {label}: 'node' is {short(a['node'])} but its GPUs are on {nodes}"
    for key in ("switch", "nvlink_domain"):
        if key in a and not (isinstance(a[key], str) and a[key]):
            return f"assignment of {label}: '{key}' must be a non-empty string"
    return None


# Optional top-level sections: the JSON type each must have when present and not null.
_SECTIONS: dict[str, tuple[str, Any]] = {
    "created_at": ("a string", str),
    "rota_version": ("a string", str),
    "inputs": ("an object", dict),
    "policy": ("an object", dict),
    "solver": ("an object", dict),
    "allocation": ("an object", dict),
    "rounds_total": ("an integer", int),
    "makespan_s": ("a number", (int, float)),
    "utilisation": ("an object", dict),
    "next_round": ("an object", dict),
}
_KEYS = ("format", "round_s", "rounds", "jobs", *_SECTIONS)


def _first_problem(data: Any) -> tuple[str | None, str] | None:
    """The first shape problem of a document, as (field, message)."""
    problems = document_problems(data)
    if problems:
        return problems[0]
    for jid, info in data["jobs"].items():
        if (problem := job_entry_problem(info)) is not None:
            return f"jobs.{jid}", problem
    for k, rnd in enumerate(data["rounds"]):
        if (problem := round_problem(rnd)) is not None:
            return f"rounds[{k}]", problem
        for n, a in enumerate(rnd["assignments"]):
            if (problem := assignment_problem(a)) is not None:
                return f"rounds[{k}].assignments[{n}]", problem
    for key, (what, kind) in _SECTIONS.items():
        value = data.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            return key, f"expected {what}, got {short(value)}"
    return None


# --------------------------------------------------------------------------- the document


@dataclass
class Schedule:
    """A `rota.schedule/v1` document. `to_json` writes every key of the format
    (null where unknown) in the order rota has always written them."""

    round_s: float
    rounds: list[Round]
    jobs: dict[str, JobEntry]
    created_at: str | None = None
    rota_version: str | None = None
    inputs: dict[str, InputRecord] | None = None  # name (table, jobs, cluster) -> file
    policy: PolicyRecord | None = None
    solver: SolverRecord | None = None
    allocation: AllocationRecord | None = None  # the first solve; None when there was none
    rounds_total: int | None = None  # rounds planned (the file may hold fewer)
    makespan_s: float | None = None
    utilisation: dict[str, float] | None = None
    next_round: NextRoundRecord | None = None  # only in schedules of 'rota plan-next'
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept

    @classmethod
    def from_json(cls, data: Any, path: object = "<schedule>") -> Schedule:
        """The document in parsed JSON; InputError naming the first field at fault.
        The round and job objects are taken as they are (not copied)."""
        problem = _first_problem(data)
        if problem is not None:
            raise InputError(problem[1], path=path, field=problem[0])
        return cls(
            round_s=data["round_s"],
            rounds=data["rounds"],
            jobs=data["jobs"],
            created_at=data.get("created_at"),
            rota_version=data.get("rota_version"),
            inputs=data.get("inputs"),
            policy=data.get("policy"),
            solver=data.get("solver"),
            allocation=data.get("allocation"),
            rounds_total=data.get("rounds_total"),
            makespan_s=data.get("makespan_s"),
            utilisation=data.get("utilisation"),
            next_round=data.get("next_round"),
            extra={key: value for key, value in data.items() if key not in _KEYS},
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": SCHEDULE_FORMAT,
            "created_at": self.created_at,
            "rota_version": self.rota_version,
            "inputs": self.inputs,
            "policy": self.policy,
            "round_s": self.round_s,
            "solver": self.solver,
            "allocation": self.allocation,
            "rounds": self.rounds,
            "rounds_total": self.rounds_total,
            "jobs": self.jobs,
            "makespan_s": self.makespan_s,
            "utilisation": self.utilisation,
        }
        if self.next_round is not None:
            out["next_round"] = self.next_round
        out.update(self.extra)
        return out


def read_schedule(path: str | os.PathLike) -> dict[str, Any]:
    """A schedule file as parsed JSON, checked for its format and main keys only:
    the validator (or `Schedule.from_json`) checks the rest."""
    path = Path(path)
    data = read_json(path, "schedule")
    if not isinstance(data, dict) or data.get("format") != SCHEDULE_FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise InputError(f"unsupported format {short(found)} (expected {SCHEDULE_FORMAT})", path=path, field="format")
    for key in ("rounds", "jobs", "round_s"):
        if key not in data:
            raise InputError("is required", path=path, field=key)
    return data


def load_schedule(path: str | os.PathLike) -> Schedule:
    """A schedule file as a checked `Schedule`."""
    return Schedule.from_json(read_schedule(path), path)


def _as_json(schedule: Schedule | Mapping[str, Any]) -> Mapping[str, Any]:
    return schedule.to_json() if isinstance(schedule, Schedule) else schedule


# --------------------------------------------------------------------------- moved elsewhere


# --------------------------------------------------------------------------- CSV view and writing


# Spreadsheets run a cell starting with one of these as a formula (CSV injection); the user's
# strings (job ids, worker types, nodes, partners) get a single quote in front (OWASP).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
TEXT_COLUMNS = ("job_id", "worker_type", "node", "co_located_with")


def spreadsheet_safe(cell: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, with a single quote in front (OWASP)."""
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS):
        return "'" + cell
    return cell


def csv_rows(rounds: Iterable[Round]) -> Iterator[list[Any]]:
    """One row (the values of CSV_COLUMNS, in order) per round, job and GPU."""
    for r in rounds:
        start, end = f"{r['start_s']:.3f}", f"{r['end_s']:.3f}"
        for a in r["assignments"]:
            for jid in a["jobs"]:
                partners = ";".join(other for other in a["jobs"] if other != jid)
                steps = a["planned_steps"][jid]
                for gpu in a["gpus"]:
                    yield [r["index"], start, end, jid, a["worker_type"], gpu["node"], gpu["gpu"], steps, partners]


def csv_text(columns: list[str], rows: Iterable[Iterable[Any]]) -> str:
    """CSV with '\\n' line ends. The csv module quotes only fields holding the line
    terminator's characters, so rows are written with '\\r\\n' (a field holding a
    carriage return is quoted too) and their ends turned into '\\n'."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    out = []
    for row in (columns, *rows):
        writer.writerow(row)
        out.append(buffer.getvalue()[:-2] + "\n")
        buffer.seek(0)
        buffer.truncate()
    return "".join(out)


def schedule_csv(schedule: Schedule | Mapping[str, Any]) -> str:
    text = [CSV_COLUMNS.index(c) for c in TEXT_COLUMNS]
    rows = csv_rows(_as_json(schedule)["rounds"])
    return csv_text(CSV_COLUMNS, ([spreadsheet_safe(v) if k in text else v for k, v in enumerate(r)] for r in rows))


def write_schedule(
    schedule: Schedule | Mapping[str, Any], path: str | os.PathLike, csv_path: str | os.PathLike | None = None
) -> None:
    """Write the JSON document (and its CSV view) atomically; a plain dict is written as it is."""
    data = _as_json(schedule)
    write_text_atomic(path, dumps_readable(data) + "\n")
    if csv_path is not None:
        write_text_atomic(csv_path, schedule_csv(data))
