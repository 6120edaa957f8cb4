"""AlloX (spec §4.5): minimise the sum of completion times by matching jobs to GPUs.

Each free GPU w serves its jobs one after another; a job placed k-th from
last on w adds k · p_iw to the sum of completion times (p_iw = R_i / T_iw).
The min-cost matching of jobs to (position, GPU) slots is a transportation
LP whose optimum is integral (totally unimodular), solved with HiGHS. The
job first in line on each GPU runs (x = 1 on that GPU's type) until it
finishes; the rest wait for the next re-solve. Single-GPU jobs only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.errors import InputError
from planner.policies.base import Allocation, Status
from planner.policies.lp.highs import solve_matrix
from planner.policies.lp.matrix import INF, MatrixLP
from planner.policies.no_jobs import unless_no_jobs
from planner.policies.problem import Problem


@dataclass
class AlloX:
    alpha: float = 1.0
    name: str = "allox"
    perf_aware: bool = True
    fifo: bool = False
    running: dict[str, int] = field(default_factory=dict)  # job id -> worker type index

    def get_state(self) -> dict:
        return {"running": dict(self.running)}

    def set_state(self, state: dict) -> None:
        self.running = {k: int(v) for k, v in state.get("running", {}).items()}

    @unless_no_jobs
    def allocate(self, problem: Problem) -> Allocation:
        too_big = [jid for jid, s in zip(problem.job_ids, problem.scale) if s != 1]
        if too_big:
            raise InputError(
                f"allox schedules single-GPU jobs only; job {too_big[0]!r} needs "
                f"{int(problem.scale[problem.job_ids.index(too_big[0])])} GPUs",
                field="scale_factor",
            )
        n, m = problem.throughput.shape
        x = np.zeros((n, m))
        free = problem.capacity.astype(int).copy()
        index = {jid: i for i, jid in enumerate(problem.job_ids)}
        kept = {}
        for jid, j in self.running.items():
            if jid in index and free[j] > 0:
                x[index[jid], j] = 1.0
                free[j] -= 1
                kept[jid] = j
        workers = [j for j in range(m) for _ in range(free[j])]
        candidates = sorted(
            (i for i in range(n) if problem.job_ids[i] not in kept), key=lambda i: -problem.time_since_start[i]
        )
        candidates = candidates[: max(int(self.alpha * len(candidates)), len(workers))]
        solve_s = 0.0
        if candidates and workers:
            first, solve_s = _first_in_line(problem, candidates, workers)
            for i, j in first.items():
                x[i, j] = 1.0
                kept[problem.job_ids[i]] = j
        self.running = kept
        return Allocation(x, status=Status.OPTIMAL, solver="highs-assignment", solve_s=solve_s)


def _first_in_line(problem: Problem, candidates: list[int], workers: list[int]) -> tuple[dict[int, int], float]:
    tput = problem.throughput
    # a job with no free GPU it can run on waits for the next re-solve
    candidates = [i for i in candidates if any(tput[i, w] > 0 for w in workers)]
    if not candidates:
        return {}, 0.0
    # a GPU never needs more positions than there are jobs competing for it
    positions = len(candidates)
    # arcs (candidate a, position k from last, GPU g), job by job: the columns, in this order
    ok = tput[np.ix_(candidates, workers)] > 0
    job, gpu = np.nonzero(ok)
    arc_job = np.repeat(job, positions)
    arc_gpu = np.repeat(gpu, positions)
    arc_k = np.tile(np.arange(1, positions + 1), len(job))
    cand, work = np.array(candidates), np.array(workers)
    time_scale = max(float(np.max([problem.remaining[i] / tput[i].max() for i in candidates])), 1e-9)
    cost = arc_k * problem.remaining[cand[arc_job]] / tput[cand[arc_job], work[arc_gpu]] / time_scale
    # rows as the Pyomo model had them: one slot per job (= 1), then one job per slot (<= 1),
    # slots in order of first appearance (the order fixes HiGHS's vertex among tied optima)
    n = len(arc_job)
    slot = arc_k * len(workers) + arc_gpu
    _, first = np.unique(slot, return_index=True)
    slots_in_order = slot[np.sort(first)]
    slot_row = np.empty(int(slot.max()) + 1, dtype=np.int64)
    slot_row[slots_in_order] = np.arange(len(slots_in_order))
    by_slot = np.argsort(slot_row[slot], kind="stable")  # arcs grouped by slot, arc order within
    per_job = np.bincount(arc_job, minlength=len(candidates))
    per_slot = np.bincount(slot_row[slot], minlength=len(slots_in_order))
    lengths = np.concatenate((per_job, per_slot))
    start = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=start[1:])
    rows = len(candidates) + len(slots_in_order)
    lp = MatrixLP(
        cost=cost.astype(float),
        lower=np.zeros(n),
        upper=np.ones(n),
        row_start=start,
        row_index=np.concatenate((np.arange(n), by_slot)).astype(np.int32),
        row_value=np.ones(2 * n),
        row_lower=np.concatenate((np.ones(len(candidates)), np.full(len(slots_in_order), -INF))),
        row_upper=np.ones(rows),
        maximize=False,
    )
    y, _, elapsed = solve_matrix(lp, method="simplex", policy="allox", options={"solver": "simplex"})
    best: dict[int, tuple[int, int]] = {}  # GPU -> (position from last, candidate)
    for a, k, g, value in zip(arc_job.tolist(), arc_k.tolist(), arc_gpu.tolist(), y.tolist()):
        if value > 0.5 and (g not in best or k > best[g][0]):
            best[g] = (k, a)
    return {candidates[a]: workers[g] for g, (k, a) in best.items()}, elapsed
