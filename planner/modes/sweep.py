"""Load sweeps: policies x input rates (or static job counts) x seeds, in parallel.

Each finished point is appended as one JSON line to `results.jsonl` in the
output folder (sweep_results.py), and its per-job results go to
`jobs/<point>.csv`; a rerun skips every point already in `results.jsonl`
(resumable). Points run here, in worker processes (sweep_workers.py) or as
Ray tasks (sweep_ray.py); the records are the same. Points are run in
order of increasing load; once a (policy, seed) saturates, its heavier points
are recorded as saturated without running them. Points whose offered load
alone exceeds the cluster (spec: "rates it cannot serve") are never run.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from planner.errors import InputError
from planner.estimate.scaling import DEFAULT_MAX_FACTOR, ScaleOptions, read_trace_scaled
from planner.formats.atomic import write_text_atomic, write_with
from planner.formats.files import read_csv_records, read_text
from planner.formats.inputs import load_cluster, load_table
from planner.formats.trace import read_trace
from planner.modes.generator import MAX_JOBS, MAX_SEED, GeneratorConfig, JobGenerator, check_rate
from planner.modes.metrics import distribution, rho
from planner.modes.simulate import JOB_COLUMNS, SimulationConfig, Workload, run_simulation
from planner.modes.sweep_ray import cluster_cpus, connected, import_ray, run_on_ray
from planner.modes.sweep_results import RESULTS, append_result, cut_torn_line, read_results
from planner.modes.sweep_workers import run_in_processes, stop_on_signals
from planner.policies import REUSE_POLICIES, check_reuse
from planner.policies.lp import DEFAULT_METHOD
from planner.rounds.engine import DEFAULT_ROUND_S

SWEEP_FORMAT = "rota.sweep/v1"
SUMMARY = "summary.csv"
MAX_GRID_VALUES = 1000  # values in one grid list: --policies, --seeds, --rates (K of LO:HI:K), --static-jobs
MAX_POINTS = 10_000  # points in a sweep (policies x seeds x loads)
MAX_WORKERS = 1024  # --workers; processes are also capped at this machine's CPUs and the points to run
OnPoint = Callable[[dict, int, int], None]  # (record, points finished, points in the grid)


@dataclass(frozen=True)
class Point:
    policy: str
    seed: int
    rate: float = 0.0  # jobs/hour; 0 with num_jobs: static trace
    num_jobs: int | None = None  # static traces: how many jobs (all at t = 0)
    trace: bool = False  # the sweep's trace file instead of generated jobs

    @property
    def key(self) -> str:
        if self.trace:
            return f"{self.policy}__trace__seed={self.seed}"
        load = f"rate={self.rate:g}" if self.num_jobs is None else f"jobs={self.num_jobs}"
        return f"{self.policy}__{load}__seed={self.seed}"

    @property
    def load(self) -> float:
        return self.rate if self.num_jobs is None else float(self.num_jobs)


@dataclass
class SweepSpec:
    table: str
    cluster: str
    policies: list[str]
    seeds: list[int]
    rates: list[float] = field(default_factory=list)
    static_jobs: list[int] = field(default_factory=list)
    window: tuple[int, int] | None = None
    multi_gpu: bool = False
    multi_priority: bool = False
    gavel_compat: bool = False
    round_s: float = DEFAULT_ROUND_S
    solver_method: str = DEFAULT_METHOD
    max_active_jobs: int | None = None
    trace: str | None = None  # a job list or Gavel .trace replayed at every point instead of generated jobs
    restart_cost_s: float | None = None  # --restart-cost (None: the table's, the cluster's, else none)
    migration_aware: bool = False
    max_scale_extrapolation: float = DEFAULT_MAX_FACTOR  # a trace's missing scale factors (estimate/scaling.py)
    scale_efficiency: float | None = None
    reuse_solves: int = 0  # --reuse-solves, for the grid's LAS policies (REUSE_POLICIES); the others solve

    def check_grid(self) -> None:
        """Every grid list is non-empty where it is used, within its bounds and without repeats
        (a repeated value would run the same point twice, or hide one)."""
        _check_list(self.policies, "--policies")
        _check_list(self.seeds, "--seeds")
        bad_seed = next((s for s in self.seeds if not 0 <= s <= MAX_SEED), None)
        if bad_seed is not None:
            raise InputError(f"seeds must be 0 to {MAX_SEED}, got {bad_seed}", field="--seeds")
        if self.rates:
            _check_list(self.rates, "--rates")
            for rate in self.rates:
                check_rate(rate, field="--rates", zero=False)
        if self.static_jobs:
            _check_list(self.static_jobs, "--static-jobs")
            bad = next((n for n in self.static_jobs if not 1 <= n <= MAX_JOBS), None)
            if bad is not None:
                raise InputError(f"static job counts must be 1 to {MAX_JOBS}, got {bad}", field="--static-jobs")
        if self.reuse_solves and not any(name in REUSE_POLICIES for name in self.policies):
            check_reuse(self.policies[0], self.reuse_solves, field="--reuse-solves")  # no policy here reuses
        loads = 1 if self.trace is not None else max(1, len(self.rates) + len(self.static_jobs))
        total = len(self.policies) * len(self.seeds) * loads
        if total > MAX_POINTS:
            raise InputError(
                f"the grid has {total} points (policies x seeds x loads); at most {MAX_POINTS}: split the sweep",
                field="--policies",
            )

    def points(self) -> list[Point]:
        self.check_grid()
        if self.trace is not None:
            if self.rates or self.static_jobs:
                raise InputError("a sweep over a --trace takes no --rates or --static-jobs", field="--trace")
            return [Point(p, s, trace=True) for p in self.policies for s in self.seeds]
        if bool(self.rates) == bool(self.static_jobs):
            raise InputError("give either input rates or static job counts", field="--rates")
        if self.rates and self.window is None:
            raise InputError("a continuous sweep needs a measurement window (--window START:END)", field="--window")
        loads = [(r, None) for r in self.rates] if self.rates else [(0.0, n) for n in self.static_jobs]
        pts = [Point(p, s, r, n) for p in self.policies for s in self.seeds for r, n in loads]
        return sorted(pts, key=lambda p: (p.load, p.policy, p.seed))  # light loads first


def _check_list(values: list, field: str) -> None:
    if not values:
        raise InputError("the list is empty: give at least one value", field=field)
    if len(values) > MAX_GRID_VALUES:
        raise InputError(f"{len(values)} values; at most {MAX_GRID_VALUES}", field=field)
    seen: set = set()
    for v in values:
        if v in seen:
            raise InputError(f"{v!r} is given twice", field=field)
        seen.add(v)


def rate_grid(text: str) -> list[float]:
    """'0.4,0.8,1.2' or Gavel's 'LO:HI:K' (K evenly spaced rates in [LO, HI], a leading 0 dropped);
    at most MAX_GRID_VALUES rates, each a valid input rate (generator.check_rate), none twice."""
    text = text.strip()
    try:
        if ":" in text:
            lo_text, hi_text, k_text = text.split(":")
            lo, hi, k = float(lo_text), float(hi_text), int(k_text)
            if k < 1 or not hi >= lo:
                raise ValueError
            if k > MAX_GRID_VALUES + 1:  # + 1: a leading 0 is dropped
                raise InputError(f"K = {k} rates; at most {MAX_GRID_VALUES}", field="--rates")
            values = [lo + (hi - lo) * i / (k - 1) for i in range(k)] if k > 1 else [lo]
            values = [v for v in values if v > 0] if values and values[0] == 0 else values
        else:
            values = [float(v) for v in text.split(",") if v.strip()]
    except InputError:
        raise
    except ValueError:
        raise InputError(f"expected rates like '0.4,0.8' or LO:HI:K, got {text!r}", field="--rates") from None
    if not values or any(not (v > 0 and math.isfinite(v)) for v in values):
        raise InputError(f"input rates must be positive jobs per hour, got {text!r}", field="--rates")
    for v in values:
        check_rate(v, field="--rates", zero=False)
    rates = [round(v, 9) for v in values]
    _check_list(rates, "--rates")  # 'LO:LO:3', or rates equal once rounded to 9 decimals
    return rates


# --------------------------------------------------------------------------- one point (worker process)

_CACHE: dict[tuple, tuple] = {}


def _inputs(spec: SweepSpec):
    """The table (with rows estimated for a trace's missing scale factors) and the cluster."""
    key = (spec.table, spec.cluster, spec.trace, spec.max_scale_extrapolation, spec.scale_efficiency)
    if key not in _CACHE:
        table, cluster = load_table(Path(spec.table)), load_cluster(spec.cluster)
        if spec.trace is not None:
            options = ScaleOptions(spec.max_scale_extrapolation, spec.scale_efficiency)
            table = read_trace_scaled(Path(spec.trace), table, cluster, options).table
        _CACHE[key] = (table, cluster)
    return _CACHE[key]


def _workload(spec: SweepSpec, point: Point, table, cluster, trace_jobs: list | None = None) -> Workload:
    if spec.trace is not None:
        jobs = trace_jobs if trace_jobs is not None else read_trace(Path(spec.trace), table, cluster)
        return Workload(jobs=jobs, description={"trace": spec.trace})
    gen = JobGenerator(
        table,
        GeneratorConfig(
            seed=point.seed, rate_per_hour=point.rate, multi_gpu=spec.multi_gpu, multi_priority=spec.multi_priority
        ),
    )
    return Workload(
        generator=gen,
        num_jobs=point.num_jobs,
        description={"generator": asdict(gen.config), "num_jobs": point.num_jobs},
    )


def simulate_point(spec: SweepSpec, point: Point, table, cluster, trace_jobs: list | None = None) -> tuple[dict, list]:
    """Simulate one point: its results line and its per-job rows."""
    config = SimulationConfig(
        policy=point.policy,
        round_s=spec.round_s,
        gavel_compat=spec.gavel_compat,
        seed=point.seed,
        window=spec.window if point.num_jobs is None else None,
        solver_method=spec.solver_method,
        max_active_jobs=spec.max_active_jobs,
        restart_cost_s=spec.restart_cost_s,
        migration_aware=spec.migration_aware,
        reuse_solves=spec.reuse_solves if point.policy in REUSE_POLICIES else 0,
    )
    result = run_simulation(table, cluster, _workload(spec, point, table, cluster, trace_jobs), config)
    metrics = result.metrics if "jct_s" in result.metrics else None  # None: saturated before running
    record = {
        "key": point.key,
        **asdict(point),
        "offered_load": result.metrics.get("offered_load"),
        "status": result.status,
        "reason": result.reason,
        "metrics": metrics,
    }
    return record, result.jobs


def run_point(spec: SweepSpec, point: Point, out_dir: str) -> dict:
    """Simulate one point; write its per-job CSV; return its results line."""
    table, cluster = _inputs(spec)
    record, rows = simulate_point(spec, point, table, cluster)
    write_job_csv(rows, job_csv_path(Path(out_dir), point))
    return record


def ray_point(spec: SweepSpec, point: Point, inputs: tuple) -> tuple[dict, list]:
    """A Ray task: `inputs` is (table, cluster, trace jobs or None), read once by the sweep."""
    table, cluster, trace_jobs = inputs
    return simulate_point(spec, point, table, cluster, trace_jobs)


def job_csv_path(out_dir: Path, point: Point) -> Path:
    return out_dir / "jobs" / f"{point.key}.csv"


def write_job_csv(rows: list[dict], path: Path) -> None:
    def writer(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=JOB_COLUMNS, lineterminator="\n")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r[k]) for k in JOB_COLUMNS})

    write_with(path, writer)


def read_job_csv(path: Path) -> list[dict]:
    return read_csv_records(path)[1]  # the input layer: a regular file, strict CSV


# --------------------------------------------------------------------------- the sweep


def load_results(out_dir: Path) -> dict[str, dict]:
    """Finished points by key (a torn last line is not read); InputError for a damaged line."""
    return read_results(Path(out_dir) / RESULTS).records


def _setup(spec: SweepSpec) -> dict:
    """What must not change between runs into one folder (the grid itself may grow)."""
    fixed = {k: v for k, v in asdict(spec).items() if k not in ("policies", "seeds", "rates", "static_jobs")}
    fixed["window"] = list(spec.window) if spec.window else None
    return fixed


def read_sweep_json(path: Path) -> dict:
    """An earlier run's sweep.json; InputError naming the file when it is not one."""
    try:
        data = json.loads(read_text(path))  # the input layer: a regular file, size cap, UTF-8
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(
            f"not a sweep description ({str(exc).splitlines()[0]}); delete it to start over, or use another --out",
            path=path,
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("setup"), dict):
        raise InputError(
            "not a sweep description (no 'setup' object); delete it to start over, or use another --out", path=path
        )
    return data


def _check_spec(out_dir: Path, spec: SweepSpec) -> None:
    """Results from a different sweep setup must not be mixed in."""
    path = out_dir / "sweep.json"
    fixed = _setup(spec)
    if path.exists():
        old = read_sweep_json(path)["setup"]
        # A setting an older sweep.json lacks was at its default then (e.g. the restart options).
        defaults = {f.name: f.default for f in fields(SweepSpec)}
        changed = [k for k in fixed if old.get(k, defaults.get(k)) != fixed[k]]
        if changed:
            raise InputError(
                f"this folder holds a sweep with a different {changed[0]} "
                f"({old.get(changed[0])!r}, now {fixed[changed[0]]!r}); use another --out",
                path=path,
                field=changed[0],
            )
    out_dir.mkdir(parents=True, exist_ok=True)


def _mark(out_dir: Path, spec: SweepSpec, status: str, finished: int, total: int) -> None:
    """sweep.json: the setup, and whether the last run is complete ('complete'), still running
    or killed ('running'), stopped by a signal ('interrupted') or by an error ('failed'), with
    the points finished so far out of the grid's."""
    document = {"format": SWEEP_FORMAT, "setup": _setup(spec), "status": status, "points": total, "finished": finished}
    # updated in place: a resumed sweep read it first
    write_text_atomic(out_dir / "sweep.json", json.dumps(document, indent=1) + "\n", replaces_input=True)


def worker_limit(jobs: int | None, points: int) -> int:
    """Worker processes for `points` points: `jobs` (default 1), at most MAX_WORKERS, and never
    more than the points to run or this machine's CPUs."""
    if jobs is not None and not 1 <= jobs <= MAX_WORKERS:
        raise InputError(f"must be 1 to {MAX_WORKERS}, got {jobs}", field="--workers")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(jobs or 1, points, cpus))


class _Recorder:
    """The sweep's bookkeeping: finished records (appended to results.jsonl as they come),
    the lightest saturated load per (policy, seed), progress callbacks."""

    def __init__(self, path: Path, done: dict[str, dict], total: int, on_point: OnPoint | None):
        self.path, self.done, self.total, self.on_point = path, done, total, on_point
        self.saturated: dict[tuple[str, int], float] = {}
        for r in done.values():
            self._note(r)

    def _note(self, rec: dict) -> None:
        if rec["status"] == "saturated":
            group = (rec["policy"], rec["seed"])
            self.saturated[group] = min(self.saturated.get(group, math.inf), _load(rec))

    def record(self, rec: dict) -> None:
        self.done[rec["key"]] = rec
        append_result(self.path, rec)
        self._note(rec)
        if self.on_point:
            self.on_point(rec, len(self.done), self.total)

    def skip_if_heavier(self, p: Point) -> bool:
        """Record `p` as saturated, without running it, when a lighter load of its policy and seed saturated."""
        limit = self.saturated.get((p.policy, p.seed))
        if limit is None or p.load < limit:
            return False
        self.record(
            {
                "key": p.key,
                **asdict(p),
                "status": "saturated",
                "offered_load": None,
                "reason": f"saturated already at {limit:g}",
                "metrics": None,
            }
        )
        return True


def _resume(path: Path, on_warning: Callable[[str], None] | None) -> dict[str, dict]:
    """The finished points of an earlier run; a torn last line is cut away (with a warning)."""
    results = read_results(path)
    if results.torn is not None:
        message = cut_torn_line(path, results.torn)
        if on_warning is not None:
            on_warning(message)
        else:
            warnings.warn(message, stacklevel=3)
    return results.records


def run_sweep(
    spec: SweepSpec,
    out_dir: str | os.PathLike,
    *,
    jobs: int | None = None,
    ray_address: str | None = None,
    on_point: OnPoint | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> list[dict]:
    """Run every missing point; return all points' records in grid order.

    Points run here (`jobs` 1 or None), in `jobs` worker processes, or as Ray tasks on the
    cluster at `ray_address` (`jobs` in flight at once; None: one per cluster CPU).
    SIGTERM/SIGINT raise SweepInterrupted once the workers are ended; what finished is kept.

    results.jsonl is the resumable log of finished points, complete or not; sweep.json says
    whether the last run finished ('status': complete, running, interrupted or failed, with
    'finished' of 'points'), and a summary.csv of an earlier run is removed before any point
    runs (the CLI writes a new one once the grid is complete), so no summary outlives a failed run."""
    out_dir = Path(out_dir)
    points = spec.points()
    if jobs is not None and not 1 <= jobs <= MAX_WORKERS:
        raise InputError(f"must be 1 to {MAX_WORKERS}, got {jobs}", field="--workers")
    if ray_address is not None:
        import_ray()  # a missing Ray is one line before anything is written
    _check_spec(out_dir, spec)
    done = _resume(out_dir / RESULTS, on_warning)
    todo = [p for p in points if p.key not in done]
    rec = _Recorder(out_dir / RESULTS, done, len(points), on_point)
    if todo:
        (out_dir / SUMMARY).unlink(missing_ok=True)
    _mark(out_dir, spec, "running", sum(p.key in done for p in points), len(points))
    try:
        with stop_on_signals():
            workers = worker_limit(jobs, len(todo))
            if ray_address is not None and todo:
                _run_on_ray(spec, todo, out_dir, ray_address, None if jobs is None else min(jobs, len(todo)), rec)
            elif ray_address is None and workers > 1:
                run_in_processes(
                    run_point, lambda p: (spec, p, str(out_dir)), todo, workers, rec.skip_if_heavier, _keep(rec)
                )
            else:
                for p in todo:
                    if not rec.skip_if_heavier(p):
                        rec.record(run_point(spec, p, str(out_dir)))
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        with contextlib.suppress(OSError):
            _mark(out_dir, spec, status, sum(p.key in done for p in points), len(points))
        raise
    _mark(out_dir, spec, "complete", len(points), len(points))
    return [done[p.key] for p in points]


def _keep(rec: _Recorder) -> Callable[[Point, dict], None]:
    return lambda point, record: rec.record(record)


def _run_on_ray(spec: SweepSpec, todo: list[Point], out_dir: Path, address: str, jobs: int | None, rec: _Recorder):
    """The points as Ray tasks; this process writes each point's CSV and record as it ends."""

    def finish(point: Point, result: tuple[dict, list]) -> None:
        record, rows = result
        write_job_csv(rows, job_csv_path(out_dir, point))
        rec.record(record)

    table, cluster = _inputs(spec)
    trace_jobs = read_trace(Path(spec.trace), table, cluster) if spec.trace is not None else None
    with connected(address) as ray:
        limit = jobs or cluster_cpus(ray)
        run_on_ray(
            ray, ray_point, (table, cluster, trace_jobs), lambda p: (spec, p), todo, limit, rec.skip_if_heavier, finish
        )


def _load(rec: dict) -> float:
    return float(rec["num_jobs"]) if rec.get("num_jobs") is not None else float(rec["rate"])


# --------------------------------------------------------------------------- summaries


def attach_rho(records: Iterable[dict], out_dir: Path) -> None:
    """Add rho (JCT / JCT under `isolated`, same load and seed) to every point that has both runs."""
    records = list(records)
    iso = {(r["rate"], r["num_jobs"], r["seed"]): r for r in records if r["policy"] == "isolated"}
    for r in records:
        ref = iso.get((r["rate"], r["num_jobs"], r["seed"]))
        if r["status"] != "ok" or ref is None or ref["status"] != "ok":
            continue
        mine = _jct_by_job(out_dir / "jobs" / f"{r['key']}.csv")
        theirs = _jct_by_job(out_dir / "jobs" / f"{ref['key']}.csv")
        ratios = rho(mine, theirs)
        r["metrics"]["rho"] = distribution(ratios.values())


def _jct_by_job(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    return {
        row["job_id"]: float(row["jct_s"]) for row in read_job_csv(path) if row["in_window"] == "True" and row["jct_s"]
    }


SUMMARY_COLUMNS = [
    "policy",
    "seed",
    "rate",
    "num_jobs",
    "status",
    "avg_jct_h",
    "p50_jct_h",
    "p90_jct_h",
    "p99_jct_h",
    "makespan_h",
    "utilisation",
    "lease_extension_pct",
    "rho_mean",
    "rho_p90",
    "resolves",
    "restarts",
    "goodput",
    "wall_s",
    "jobs_finished",
    "jct_lower_bound_h",  # an incomplete point: a bound, not a result (no avg_jct_h then)
    "reason",
]


def summary_rows(records: Iterable[dict]) -> list[dict]:
    rows = []
    for r in records:
        m = r.get("metrics") or {}
        jct = m.get("jct_s") or {}
        hours = lambda v: None if v is None else v / 3600.0  # noqa: E731
        rate = m.get("lease_extension_rate")
        rows.append(
            {
                "policy": r["policy"],
                "seed": r["seed"],
                "rate": r["rate"],
                "num_jobs": r["num_jobs"],
                "status": r["status"],
                "jobs_finished": m.get("jobs_finished"),
                # an incomplete point: no JCT, only a bound (planner/modes/simulate.py censored_jct)
                "jct_lower_bound_h": hours((m.get("censored_jct") or {}).get("mean_lower_bound_s")),
                "avg_jct_h": hours(jct.get("mean")),
                "p50_jct_h": hours(jct.get("p50")),
                "p90_jct_h": hours(jct.get("p90")),
                "p99_jct_h": hours(jct.get("p99")),
                "makespan_h": hours(m.get("makespan_s")),
                "utilisation": (m.get("utilisation") or {}).get("all"),
                "lease_extension_pct": None if rate is None else 100 * rate,
                "rho_mean": (m.get("rho") or {}).get("mean"),
                "rho_p90": (m.get("rho") or {}).get("p90"),
                "resolves": m.get("resolves"),
                "restarts": m.get("restarts"),  # only when a restart cost is known
                "goodput": m.get("goodput"),
                "wall_s": m.get("wall_s"),
                "reason": r.get("reason"),
            }
        )
    return rows


def write_summary_csv(records: Iterable[dict], path: Path) -> None:
    rows = summary_rows(records)

    def writer(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=SUMMARY_COLUMNS, lineterminator="\n")
            w.writeheader()
            for row in rows:
                w.writerow(
                    {
                        k: "" if row[k] is None else (f"{row[k]:.6g}" if isinstance(row[k], float) else row[k])
                        for k in SUMMARY_COLUMNS
                    }
                )

    write_with(path, writer)
