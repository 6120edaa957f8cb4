"""What every export needs: the schedule, its cluster, each job's command, and
the launch wrapper that holds the checkpoint/resume contract.

Contract (docs/launchers.md): a job runs for one round at most. `grace_s`
before the round ends it receives SIGTERM and must write a checkpoint and
exit; at the round's end whatever still runs is killed. The next round that
lists the job starts its command again, and the job resumes from its latest
checkpoint. Each process sees ROTA_* variables saying what the round expects.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shlex
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.formats.atomic import atomic_path
from planner.formats.cluster import Cluster, read_cluster
from planner.formats.fields import Where, is_blank, parse_int, required_text
from planner.formats.files import read_csv_records, read_json, recorded_input_path
from planner.formats.schedule import SCHEDULE_FORMAT, Assignment, JobEntry, Round, Schedule, read_schedule
from planner.formats.schedule_check import Violation, check_schedule
from planner.formats.table import JobType, ThroughputTable, read_table

DEFAULT_GRACE_S = 60


@dataclass
class ExportContext:
    schedule: dict[str, Any]  # the schedule file as read (what the validator checks)
    schedule_path: Path
    cluster: Cluster
    commands: dict[str, str]  # job id -> command line
    table: ThroughputTable | None = None
    job_types: dict[str, JobType] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # checks the validator could not run
    notes: list[str] = field(default_factory=list)  # warnings an exporter has for the user
    images: dict[str, str] = field(default_factory=dict)  # job id -> container image (job list's `image` column)

    @property
    def round_s(self) -> float:
        return float(self.schedule["round_s"])

    @cached_property
    def document(self) -> Schedule:
        """The schedule as a typed document (InputError naming the field if it is malformed;
        exporters read it after `require_valid`, which reports every problem)."""
        return Schedule.from_json(self.schedule, self.schedule_path)

    def violations(self) -> list[Violation]:
        return check_schedule(
            self.schedule, self.cluster, table=self.table, job_types=self.job_types if self.table is not None else None
        )


# --------------------------------------------------------------------------- loading


def input_path(schedule: Mapping[str, Any], name: str, schedule_path: Path, override: Path | None) -> Path | None:
    """The input file `name` the schedule was made from: as written, else next to the schedule."""
    if override is not None:
        if not Path(override).exists():
            raise InputError("file not found", path=override)
        return Path(override)
    inputs = schedule.get("inputs")
    entry = inputs.get(name) if isinstance(inputs, dict) else None
    raw = entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(raw, str):
        return None
    # as recorded (from where rota ran, or from the schedule's folder; never through '..'), else
    # the file of that name next to the schedule
    return (
        recorded_input_path(raw, Path.cwd())
        or recorded_input_path(raw, schedule_path.parent)
        or recorded_input_path(Path(raw).name, schedule_path.parent)
    )


def _job_list_rows(path: Path) -> list[dict[str, Any]]:
    """The job list's rows, read through the input layer (regular files only, a size cap,
    strict CSV quoting, no key or column twice)."""
    if path.suffix.lower() == ".json":
        data = read_json(path, "jobs")
        if isinstance(data, dict):
            data = data.get("jobs")
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            raise InputError("expected a list of job objects", path=path)
        return data
    _, records = read_csv_records(path, "jobs")
    return [{str(k).strip(): v for k, v in rec.items()} for rec in records]


def read_job_records(path: Path) -> dict[str, dict[str, Any]]:
    """The job list as raw rows by job id (works with or without a `command` column)."""
    out = {}
    for row, rec in enumerate(_job_list_rows(path), start=1):
        jid = required_text(rec.get("job_id", ""), Where(path, row), "job_id")
        out[jid] = {**rec, "_row": row}
    return out


def _job_type(info: Mapping[str, Any]) -> JobType | None:
    """The job type a schedule entry or job-list row names; None when it names none that can be read."""
    model = info.get("model")
    if is_blank(model, nan=True):
        return None
    at, batch = Where(), info.get("batch_size")
    try:
        bs = None if is_blank(batch, nan=True) else parse_int(batch, at, "batch_size")
        scale = parse_int(info.get("scale_factor") or 1, at, "scale_factor")
    except InputError:
        return None
    return JobType(str(model).strip(), bs, scale)


def _items(value: Any, key: str) -> list[Any]:
    """`value[key]` where value is an object and that is a list, else [] (the validator reports the shape)."""
    items = value.get(key) if isinstance(value, dict) else None
    return items if isinstance(items, list) else []


def scheduled_jobs(schedule: Mapping[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for r in _items(schedule, "rounds"):
        for a in _items(r, "assignments"):
            seen.update(dict.fromkeys(j for j in _items(a, "jobs") if isinstance(j, str)))
    return list(seen)


def _read_table(
    schedule: Mapping[str, Any], schedule_path: Path, override: Path | None, need_table: bool
) -> tuple[ThroughputTable | None, list[str]]:
    """The throughput table the schedule names (or `override`), and the checks skipped without one."""
    table_path = input_path(schedule, "table", schedule_path, override)
    if table_path is not None:
        return read_table(table_path), []
    if need_table:
        raise InputError(
            "the throughput table it names is not found; give it with --table", path=schedule_path, field="inputs.table"
        )
    return None, ["throughput and pair checks (no table)"]


def _job_facts(
    entries: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, JobType], dict[str, str]]:
    """Each job's type and command: from its schedule entry, else from its job-list row."""
    types: dict[str, JobType] = {}
    commands: dict[str, str] = {}
    for jid, entry in entries.items():
        info = entry if isinstance(entry, dict) else {}
        rec = records.get(jid, {})
        jt = _job_type(info) or _job_type(rec)
        if jt is not None:
            types[jid] = jt
        command = info.get("command")
        if is_blank(command, nan=True):
            command = rec.get("command")
        if not is_blank(command, nan=True):
            commands[jid] = str(command).strip()
    return types, commands


def _fill_commands(
    commands: dict[str, str],
    scheduled: list[str],
    default_command: str | None,
    records: Mapping[str, Mapping[str, Any]],
    where: Path,
    listed: Collection[str],
) -> None:
    """Every scheduled job gets a command: its own, else `default_command`, else InputError.
    `listed`: the jobs the schedule's entries or the job list know (a job neither knows is
    a broken schedule, not a missing command)."""
    for jid in scheduled:
        if jid in commands:
            continue
        if default_command is None and jid not in listed:
            raise InputError(
                f"the schedule runs job {jid!r}, which is not in the job list; "
                "check the schedule with 'rota schedule validate'",
                path=where,
                field="job_id",
            )
        if default_command is None:
            raise InputError(
                f"no command for job {jid!r}: add a 'command' column to the job list, or give --default-command",
                path=where,
                row=records.get(jid, {}).get("_row"),
                field="command",
            )
        commands[jid] = default_command


def control_character(text: str) -> str | None:
    """The first control character of `text` other than a tab (NUL, a line break, ESC, DEL,
    the C1 range), or None."""
    for ch in text:
        if ch != "\t" and unicodedata.category(ch) == "Cc":
            return ch
    return None


def _check_command(
    command: str | None, job: str | None = None, *, where: Path, row: int | None = None, field: str = "command"
) -> None:
    """A command is one line of shell: a NUL (which no launcher can pass on) or another control
    character (a line break that hides a second command in a one-line view, an escape sequence)
    is refused, naming the job."""
    if command is None:
        return
    bad = control_character(command)
    if bad is not None:
        whose = f"job {job!r}: " if job is not None else ""
        raise InputError(
            f"{whose}the command holds the control character {ascii(bad)}; a command is one line of "
            "printable text (tabs allowed)",
            path=where,
            row=row,
            field=field,
        )


def load_context(
    schedule_path: str | os.PathLike,
    *,
    cluster: Path | None = None,
    jobs: Path | None = None,
    table: Path | None = None,
    default_command: str | None = None,
    need_commands: bool = True,
    need_table: bool = False,
) -> ExportContext:
    """Read a schedule plus the inputs it names (overridable), and each job's command:
    from the schedule's job entries, else the job list's `command` column, else
    `default_command`."""
    schedule_path = Path(schedule_path)
    schedule = read_schedule(schedule_path)
    cluster_path = input_path(schedule, "cluster", schedule_path, cluster)
    if cluster_path is None:
        raise InputError(
            "the cluster spec it names is not found; give it with --cluster", path=schedule_path, field="inputs.cluster"
        )
    spec = read_cluster(cluster_path)
    thr, skipped = _read_table(schedule, schedule_path, table, need_table)
    jobs_path = input_path(schedule, "jobs", schedule_path, jobs)
    records = read_job_records(jobs_path) if jobs_path is not None else {}
    entries = schedule.get("jobs")
    types, commands = _job_facts(entries if isinstance(entries, dict) else {}, records)
    scheduled = scheduled_jobs(schedule)
    if thr is not None and any(j not in types for j in scheduled):
        skipped.append("throughput checks of jobs whose model is unknown (no job list)")
    if need_commands:
        listed = set(records) | set(entries if isinstance(entries, dict) else ())
        where = jobs_path or schedule_path
        _check_command(default_command, where=schedule_path, field="--default-command")
        _fill_commands(commands, scheduled, default_command, records, where, listed)
        for jid in scheduled:
            _check_command(commands[jid], jid, where=where, row=records.get(jid, {}).get("_row"))
    images = {j: str(r["image"]).strip() for j, r in records.items() if not is_blank(r.get("image"), nan=True)}
    return ExportContext(schedule, schedule_path, spec, commands, thr, types, skipped, images=images)


def require_valid(context: ExportContext) -> None:
    problems = context.violations()
    if problems:
        shown = "; ".join(str(v) for v in problems[:3])
        more = f" (and {len(problems) - 3} more; see 'rota schedule validate')" if len(problems) > 3 else ""
        raise InputError(f"invalid schedule: {shown}{more}", path=context.schedule_path)


# --------------------------------------------------------------------------- per-job facts


def round_dir(index: int) -> str:
    return f"round-{index:04d}"


def gpus_by_node(assignment: Assignment) -> list[tuple[str, list[int]]]:
    """[(node, [gpu indices])] in placement order."""
    out: dict[str, list[int]] = {}
    for g in assignment["gpus"]:
        out.setdefault(g["node"], []).append(int(g["gpu"]))
    return list(out.items())


# The gang contract, the same under every launcher: a job's command runs once per node of its
# gang, and every process sees these four (also a one-node job: 1, 0, its own host).
NUM_NODES = "ROTA_NUM_NODES"  # nodes in the gang
NODE_RANK = "ROTA_NODE_RANK"  # this node's rank, 0 .. ROTA_NUM_NODES - 1
MASTER_ADDR = "ROTA_MASTER_ADDR"  # host name of rank 0's node
MASTER_PORT = "ROTA_MASTER_PORT"  # a port for the gang's rendezvous, fixed per job id
GANG_VARIABLES = (NUM_NODES, NODE_RANK, MASTER_ADDR, MASTER_PORT)
MASTER_PORT_BASE = 29500  # torch.distributed's default port, and the 999 above it


def master_port(job_id: str) -> int:
    """The job's rendezvous port: 29500 + (a hash of its id) mod 1000, the same on every node and
    launcher; co-located jobs get different ports unless their hashes collide (1 in 1000)."""
    digest = hashlib.sha256(job_id.encode()).digest()
    return MASTER_PORT_BASE + int.from_bytes(digest[:4], "big") % 1000


def job_env(
    schedule: Schedule,
    rnd: Round,
    assignment: Assignment,
    jid: str,
    *,
    grace_s: float,
    progress_dir: str | None = None,
) -> dict[str, str]:
    """What a job's process is told about its round (all strings)."""
    others = [o for o in assignment["jobs"] if o != jid]
    info = schedule.jobs.get(jid, JobEntry())
    planned_gpus = ",".join(f"{g['node']}:{g['gpu']}" for g in assignment["gpus"])
    env = {
        "ROTA_JOB_ID": jid,
        "ROTA_ROUND": str(rnd["index"]),
        "ROTA_ROUND_S": whole(schedule.round_s),
        "ROTA_GRACE_S": whole(grace_s),
        "ROTA_PLANNED_STEPS": whole(assignment["planned_steps"][jid], up=False),
        "ROTA_TOTAL_STEPS": whole(info.get("total_steps", 0)),
        "ROTA_WORKER_TYPE": assignment["worker_type"],
        "ROTA_NODES": ",".join(n for n, _ in gpus_by_node(assignment)),
        "ROTA_NUM_GPUS": str(len(assignment["gpus"])),
        "ROTA_GPUS": planned_gpus,  # a launcher that knows the GPUs a job really got replaces it
        "ROTA_PLANNED_GPUS": planned_gpus,
        "ROTA_CO_LOCATED_WITH": ",".join(others),
        NUM_NODES: str(len(gpus_by_node(assignment))),
        MASTER_PORT: str(master_port(jid)),
    }
    if progress_dir:
        env["ROTA_PROGRESS_FILE"] = f"{progress_dir.rstrip('/')}/{progress_file_name(jid)}"
    return env


def whole(value: Any, *, up: bool = True) -> str:
    """A count or a number of seconds as a plain integer (never '1.01127e+06', which `int()` refuses
    in every trainer): rounded up (a total, a round length), or down (`up=False`: steps planned)."""
    number = float(value)
    return str(math.ceil(number - 1e-9) if up else math.floor(number + 1e-9))


def gang_env(
    job_id: str, *, num_nodes: int, node_rank: int | None = None, master_addr: str | None = None
) -> dict[str, str]:
    """The gang variables known when the files are written: ROTA_NUM_NODES and ROTA_MASTER_PORT
    always, ROTA_NODE_RANK and ROTA_MASTER_ADDR where given (a launcher that learns them at run
    time, like the Slurm driver, sets them itself). Only rank 0 writes the progress report."""
    env = {NUM_NODES: str(num_nodes), MASTER_PORT: str(master_port(job_id))}
    if node_rank is not None:
        env[NODE_RANK] = str(node_rank)
    if master_addr is not None:
        env[MASTER_ADDR] = master_addr
    return env


def launch_script(commands: list[tuple[str, dict[str, str]]], logs: Sequence[str] | None = None) -> str:
    """POSIX sh that starts each (command, env) in the background and waits for all; with
    `logs`, each command's output is appended to its own file (one per job, across rounds).

    SIGTERM, SIGUSR1 (Slurm's warning) or SIGINT to the wrapper become SIGTERM to its
    whole process group, so the training processes themselves get it: once, and not
    inside a Slurm step (SLURM_STEP_ID set), where Slurm signals every process of the step
    itself. A second SIGTERM there could reach a trainer that had already checkpointed
    and was exiting, with Python's handlers reset, and turn its clean stop into exit 143.
    Each command runs under an `sh -c` that outlives it (`trap : TERM`), so the wrapper
    keeps waiting while the jobs write their checkpoints; it exits with the first failure.
    """
    lines = [
        'pids="" stopping="" signalled=""',
        'stop() { signalled=1; [ -n "$stopping" ] && return; stopping=1;'
        ' [ -n "${SLURM_STEP_ID:-}" ] || kill -TERM 0 2>/dev/null || true; }',
        "trap stop TERM USR1 INT",
    ]
    for folder in dict.fromkeys(os.path.dirname(log) for log in logs or () if os.path.dirname(log)):
        lines.append(f"mkdir -p {shlex.quote(folder)} 2>/dev/null || true")
    for k, (command, env) in enumerate(commands):
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        into = f" >>{shlex.quote(logs[k])} 2>&1" if logs else ""
        lines.append(f"( export {exports}; exec /bin/sh -c {shlex.quote('trap : TERM; ' + command)} ){into} &")
        lines.append('pids="$pids $!"')
    lines += [
        "status=0",
        "for p in $pids; do",
        '  rc=""',
        "  while :; do",
        # a trapped signal makes wait return early: wait again for the job's own status
        '    signalled=""; wait "$p"; r=$?',
        '    if [ "$r" -eq 127 ] && [ -n "$rc" ]; then break; fi',
        "    rc=$r",
        '    [ -n "$signalled" ] || break',
        "  done",
        '  [ "$status" -ne 0 ] || status=$rc',
        "done",
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


def commands_of(
    context: ExportContext,
    rnd: Round,
    assignment: Assignment,
    *,
    grace_s: float,
    progress_dir: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> list[tuple[str, dict[str, str]]]:
    """(command, environment) of each job of an assignment."""
    return [
        (
            context.commands[jid],
            {
                **job_env(context.document, rnd, assignment, jid, grace_s=grace_s, progress_dir=progress_dir),
                **(extra_env or {}),
            },
        )
        for jid in assignment["jobs"]
    ]


def grace_for(context: ExportContext, grace_s: float) -> int:
    """Whole seconds of grace: positive, and at most half the round (the signal must come
    inside it); a longer one is cut, with a note for the user."""
    if not (grace_s > 0 and math.isfinite(grace_s)):
        raise InputError(f"expected a positive number of seconds, got {grace_s!r}", field="--grace")
    half = context.round_s // 2
    used = int(max(1, min(grace_s, half)))
    if grace_s > half:
        context.notes.append(f"--grace {grace_s:g} s is more than half the {context.round_s:g} s round: {used} s used")
    return used


def parse_map(pairs: list[str] | dict[str, str] | None, what: str) -> dict[str, str]:
    """WORKER_TYPE=VALUE options (repeatable) as a dict."""
    if isinstance(pairs, dict):
        return dict(pairs)
    out = {}
    for item in pairs or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InputError(f"expected WORKER_TYPE=VALUE, got {item!r}", field=what)
        out[key.strip()] = value.strip()
    return out


# --------------------------------------------------------------------------- names and files

# Job ids, node names, worker types and policy names come from many users and
# the launcher files run under the operator's account, so every user string is
# data: quoted in shell (shlex.quote), emitted by a real YAML / JSON writer, and
# escaped on comment lines. Where one becomes a name (a Slurm node list, GRES
# type, partition), it must consist of NAME_CHARS, else InputError; job ids that
# become Slurm job names, file names and Kubernetes names are mapped to safe ones.
NAME_CHARS = "letters, digits, '.', '_' and '-' (at most 253, starting with a letter or digit)"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_FILE_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
_DNS_UNSAFE = re.compile(r"[^a-z0-9-]+")
_PATH_UNSAFE = re.compile(r"[/\\]")


def checked_name(value: str, *, field: str, path: object = None) -> str:
    """`value` where it becomes a name in a launcher file: NAME_CHARS only, else InputError."""
    if not _NAME.fullmatch(value):
        raise InputError(f"{value!r} is not a valid name here: use {NAME_CHARS}", path=path, field=field)
    return value


def comment_text(text: str) -> str:
    """User text for one comment line: characters that are not printable (line
    breaks of any kind, tabs, escapes) are written as Python escapes."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def job_log_name(job_id: str) -> str:
    """The file a job's output is appended to, round after round (a safe name: ids come from users)."""
    return f"{file_name(job_id)}.log"


def progress_file_name(job_id: str) -> str:
    """`<job_id>.json`; an id that is not one plain file name (a '/', a leading '.',
    a character that is not printable, over 200 bytes) gets a safe name, so the file
    stays in its folder (the job's report names its job_id, ROTA_JOB_ID, inside)."""
    plain = job_id.isprintable() and not job_id.startswith(".") and not _PATH_UNSAFE.search(job_id)
    if plain and len(job_id.encode()) <= 200:
        return f"{job_id}.json"
    return f"{file_name(job_id)}.json"


def file_name(label: str, limit: int = 120) -> str:
    """`label` as one file name ([A-Za-z0-9._+-], not hidden, not too long), unique for distinct labels."""
    safe = _FILE_UNSAFE.sub("_", label).strip("._") or "job"
    if safe == label and len(safe) <= limit:
        return safe
    return f"{safe[:limit]}-{_digest(label)}"


def dns_name(text: str, limit: int = 52) -> str:
    """A DNS-1123 label (lowercase, digits, '-'), unique for distinct inputs."""
    safe = _DNS_UNSAFE.sub("-", text.lower()).strip("-")
    safe = re.sub("-{2,}", "-", safe) or "job"
    if safe == text and len(safe) <= limit:
        return safe
    head = safe[: limit - 7].rstrip("-")
    return f"{head}-{_digest(text)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def assignment_label(assignment: Assignment) -> str:
    return "+".join(assignment["jobs"])


def write_files(out_dir: Path, files: dict[str, str], executable: Iterable[str] = ()) -> list[Path]:
    """Write each relative path atomically, with the permissions the umask allows (scripts
    in `executable` also executable); return the paths in the order given."""
    executable = set(executable)
    written = []
    for rel, text in files.items():
        target = out_dir / rel
        with atomic_path(target, mode=0o777 if rel in executable else 0o666) as tmp:
            tmp.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def header(context: ExportContext, what: str, comment: str = "#") -> str:
    record = context.document.policy
    policy = "?" if record is None else record.get("name", "?")
    lines = [
        f"rota export: {what}",
        f"from {context.schedule_path.name} ({SCHEDULE_FORMAT}, policy {policy}, round length {context.round_s:g} s)",
        "Contract: SIGTERM ROTA_GRACE_S seconds before the round ends -> write a checkpoint and exit;",
        "the next round that lists the job restarts its command, which resumes from that checkpoint.",
    ]
    return "\n".join(f"{comment} {comment_text(line)}" for line in lines) + "\n"
