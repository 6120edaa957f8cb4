"""Simulation metrics (spec §6.4): JCT statistics, utilisation, lease extensions, rho.

Pure functions over plain numbers so they can be checked by hand; the
simulator feeds them from the engine's state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from planner.rounds.compiled import CompiledBooks
from planner.rounds.engine import JobOutcome, RoundBatch, RoundRecord
from planner.rounds.mechanism import Placement

PERCENTILES = (50, 90, 99)


def distribution(values: Iterable[float], prefix: str = "") -> dict[str, float | int | None]:
    """Count, mean, p50/p90/p99 (linear interpolation), min and max; None when empty."""
    data = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    keys = ["n", "mean"] + [f"p{p}" for p in PERCENTILES] + ["min", "max"]
    if data.size == 0:
        return {f"{prefix}{k}": (0 if k == "n" else None) for k in keys}
    stats = {"n": int(data.size), "mean": float(data.mean())}
    for p, v in zip(PERCENTILES, np.percentile(data, PERCENTILES)):
        stats[f"p{p}"] = float(v)
    stats["min"], stats["max"] = float(data.min()), float(data.max())
    return {f"{prefix}{k}": v for k, v in stats.items()}


def utilisation(busy_gpu_s: Mapping[str, float], capacity: Mapping[str, int], elapsed_s: float) -> dict[str, float]:
    """Busy GPU-seconds over available GPU-seconds since t = 0, per worker type and 'all'.

    Gavel divides by the time since the GPUs joined (t = 0), so warm-up and
    tail count too (spec §6.4).
    """
    out: dict[str, float] = {}
    if elapsed_s <= 0:
        return {w: 0.0 for w in capacity} | {"all": 0.0}
    for w, n in capacity.items():
        out[w] = busy_gpu_s.get(w, 0.0) / (n * elapsed_s)
    total = sum(capacity.values())
    out["all"] = sum(busy_gpu_s.get(w, 0.0) for w in capacity) / (total * elapsed_s)
    return out


def _same_gpus(before: Placement | None, now: Placement) -> bool:
    """Same type and GPU set (in any order); the mechanism re-uses the object on an extension."""
    return before is not None and (
        before is now or (before.worker_type == now.worker_type and frozenset(before.gpus) == frozenset(now.gpus))
    )


@dataclass
class LeaseCounter:
    """Gavel's lease-extension statistic (spec §5.5).

    At every scheduling pass, each entry of the previous round that still has
    an active member is an opportunity; it is an extension when the entry is
    placed on exactly the same GPUs again. Feed rounds in order, right after
    each is executed (completions of that round are then known).
    """

    opportunities: int = 0
    extensions: int = 0
    _previous: RoundRecord | RoundBatch | None = None

    def add(self, record: RoundRecord, outcomes: Mapping[str, JobOutcome]) -> None:
        prev = self._previous
        if isinstance(prev, RoundBatch):  # after compiled rounds: their last round
            prev = prev.last
        if prev is not None:
            # Plain loops: this runs once per simulated round. An opportunity: an entry with a
            # member still active when the previous round ended.
            limit = prev.end_s + 1e-9
            active = 0
            for p in prev.placements:
                for j in p.jobs:
                    finish = outcomes[j].finish_s
                    if finish is None or finish > limit:
                        active += 1
                        break
            self.opportunities += active
            # A jump (nothing ran in between) empties the previous assignment: no extension.
            if abs(record.start_s - prev.end_s) <= 1e-9:
                before = {p.jobs: p for p in prev.placements}
                same = 0
                for now in record.placements:
                    was = before.get(now.jobs)
                    if was is now or (was is not None and _same_gpus(was, now)):
                        same += 1
                self.extensions += same
        self._previous = record

    def add_batch(self, batch: RoundBatch, outcomes: Mapping[str, JobOutcome]) -> None:
        """`add` for each round of a compiled batch, in order: no job finished before its last
        round, so every placement of an earlier round is an opportunity; the batch counts the
        placements that kept last round's GPUs (`n_same`)."""
        prev = self._previous
        if isinstance(prev, RoundBatch):
            self.opportunities += int(prev.n_placed[-1]) - prev.last_finished
            if abs(float(batch.starts[0]) - float(prev.ends[-1])) <= 1e-9:
                self.extensions += int(batch.n_same[0])
        elif prev is not None:
            limit = prev.end_s + 1e-9
            for p in prev.placements:
                for j in p.jobs:
                    finish = outcomes[j].finish_s
                    if finish is None or finish > limit:
                        self.opportunities += 1
                        break
            if abs(float(batch.starts[0]) - prev.end_s) <= 1e-9:
                self.extensions += int(batch.n_same[0])
        if len(batch) > 1:  # a few rounds: plain lists cost less than numpy's calls
            starts, ends, same = batch.starts.tolist(), batch.ends.tolist(), batch.n_same.tolist()
            self.opportunities += sum(batch.n_placed[:-1].tolist())
            self.extensions += sum(n for n, s, e in zip(same[1:], starts[1:], ends) if abs(s - e) <= 1e-9)
        self._previous = batch

    @property
    def rate(self) -> float | None:
        return None if self.opportunities == 0 else self.extensions / self.opportunities


def released_at(jobs: tuple[str, ...], start: float, end: float, outcomes: Mapping[str, JobOutcome]) -> float:
    """When a placement's GPUs fall idle in a round [start, end]: its last member's finish, or the
    round's end while a member runs on."""
    last = start
    for j in jobs:
        finish = outcomes[j].finish_s
        last = end if finish is None or finish > end else max(last, finish)
        if last == end:
            break
    return last


@dataclass
class GpuUsage:
    """GPU-seconds each job held, and GPU-seconds that idled after a job finished mid-round.

    A placement holds its GPUs until its last member finishes, or to the round's end when a
    member runs on; its time is shared equally by its members. A placement whose members all
    finish before the round ends leaves its GPUs idle for the rest of the round (the mechanism
    starts no job mid-round): `idle_after_finish_gpu_s` counts that.
    """

    job_gpu_s: dict[str, dict[str, float]] = field(default_factory=dict)  # job -> worker type -> GPU-s
    idle_after_finish_gpu_s: float = 0.0

    def add(self, record: RoundRecord, outcomes: Mapping[str, JobOutcome]) -> None:
        start, end = record.start_s, record.end_s
        held = self.job_gpu_s
        for p in record.placements:
            last = released_at(p.jobs, start, end, outcomes)
            gpus, w = len(p.gpus), p.worker_type
            share = (last - start) * gpus / len(p.jobs)
            for j in p.jobs:
                per_type = held.setdefault(j, {})
                per_type[w] = per_type.get(w, 0.0) + share
            self.idle_after_finish_gpu_s += (end - last) * gpus


class BooksUsage:
    """`GpuUsage` for runs with compiled rounds: the compiled call adds each round's GPU-seconds
    itself (`planner.rounds.compiled.CompiledBooks`, the same additions in the same order);
    Python rounds add theirs here, into the same books."""

    def __init__(self, books: CompiledBooks, worker_types: list[str]):
        self.books = books
        self.types = list(worker_types)
        self._type = {w: j for j, w in enumerate(self.types)}

    def add(self, record: RoundRecord, outcomes: Mapping[str, JobOutcome]) -> None:
        start, end = record.start_s, record.end_s
        books = self.books
        for p in record.placements:
            last = released_at(p.jobs, start, end, outcomes)
            gpus, w = len(p.gpus), self._type[p.worker_type]
            share = (last - start) * gpus / len(p.jobs)
            for r in books.numbers(list(p.jobs)).tolist():
                books.gpu_s[r, w] += share
                books.held[r, w] = True
            books.idle[0] += (end - last) * gpus

    @property
    def idle_after_finish_gpu_s(self) -> float:
        return float(self.books.idle[0])

    @property
    def job_gpu_s(self) -> dict[str, dict[str, float]]:
        """GPU-seconds per job and worker type (only types the job was placed on), as GpuUsage's."""
        books, out = self.books, {}
        for jid, r in books.number.items():
            row = {w: float(books.gpu_s[r, j]) for j, w in enumerate(self.types) if books.held[r, j]}
            if row:
                out[jid] = row
        return out


def restart_metrics(
    starts: int, lost_gpu_s: Mapping[str, float], busy_gpu_s: Mapping[str, float], across_types: int | None = None
) -> dict:
    """Restart accounting: starts charged (and those on another worker type than the job last ran
    on, when counted), GPU-seconds they took (all types) and the goodput, useful GPU-seconds over
    allocated (busy) GPU-seconds; None when nothing ran."""
    lost, busy = sum(lost_gpu_s.values()), sum(busy_gpu_s.values())
    return {
        "restarts": starts,
        **({} if across_types is None else {"restarts_across_types": across_types}),
        "restart_gpu_s": lost,
        "goodput": None if busy <= 0 else (busy - lost) / busy,
    }


def rho(jct: Mapping[str, float], reference_jct: Mapping[str, float]) -> dict[str, float]:
    """Finish-time fairness rho_i = JCT_i / JCT_i under the reference (isolated) run.

    Jobs are matched by id: both runs replay the same trace. (Gavel's plots
    matched them by sorting on job duration.)
    """
    return {
        j: jct[j] / reference_jct[j] for j in jct if j in reference_jct and reference_jct[j] and reference_jct[j] > 0
    }
