"""A compiled round loop for one narrow case of the engine (Gavel-compat, single-GPU jobs).

Between two events (a job finishing, the next arrival being reached, a re-solve falling
due), consecutive rounds depend only on array state. `run_rounds` runs such rounds in one
compiled call, with the arithmetic of the Python path in the same order (`RoundMechanism.
select` / `_place_on` / `record_round`, `Engine._execute`), so its results are meant to be
bit-identical. The caller (`Engine.step_many`) checks the case, packs the state into arrays,
and unpacks it again; everything per event (admission, re-solve, completion) stays in Python.

Case: `EngineConfig.gavel_compat`, no co-located pairs, every entry needs 1 GPU, no tenant
quotas, no restart costs, not migration-aware, a fixed worker-type visiting order.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import numpy as np

UNSERVED_PRIORITY = 1e9  # planner.rounds.mechanism.UNSERVED_PRIORITY

# why a call stopped
STOP_FULL = 0  # the output buffers are full (call again)
STOP_FINISHED = 1  # a job finished in the last round
STOP_ARRIVAL = 2  # the clock reached the next arrival: admission first
STOP_RESOLVE = 3  # a re-solve is due
STOP_MAX_ROUNDS = 4
STOP_UNTIL = 5  # the last round ended after `until_s`
STOP_IDLE = 6  # the next round would place nothing (the Python path jumps)


def _run_rounds(  # noqa: C901  # one function: the kernel's loop stays in compiled code
    t,
    round_origin,
    tau,
    last_reset,  # nan: never
    resolve_interval,
    need_update,
    next_arrival,  # inf: none pending
    until_s,
    max_rounds,
    fifo,
    spent,  # (n, m) in/out: the mechanism's books
    deficit,  # (n, m)
    alloc,  # (n, m)
    has_alloc,  # (n,) entry in the allocation (Gavel places nothing else)
    ok,  # (n, m) runnable
    rates,  # (n, m) steps/s
    worker_time,  # (m,) in/out
    busy,  # (m,) in/out: GPU-seconds per type
    steps_done,  # (n,) in/out
    total_steps,  # (n,)
    order,  # (m,) visiting order
    cap,  # (m,) GPUs per type
    nodes,  # (m,) nodes per type
    per_node,  # (m,) GPUs per node
    jn,  # (n,) each entry's job number (rows of `lease`, `gpu_s`, `held`)
    lease,  # (J, 3) in/out: per job, last round's (type, node, GPU); -1: none
    gpu_s,  # (J, m) in/out: GPU-seconds each job held, per type (the simulation's GpuUsage)
    held,  # (J, m) in/out: whether the job was ever placed on the type
    idle,  # (1,) in/out: GPU-seconds idle after a job finished mid-round
    starts,  # (K,) out, per round
    ends,
    n_placed,
    n_same,
    offsets,  # (K + 1,) out: round r's placements are [offsets[r], offsets[r + 1])
    pl_entry,  # (K * G,) out, per placement
    pl_type,
    pl_node,
    pl_gpu,
    last_steps,  # (G,) out: the last round's planned steps, per placement
    last_is_int,  # (G,) out: whether they came from floor(r * tau) (an int in Python)
    last_finish,  # (G,) out
    finished,  # (n,) out: finished in the last round
):
    n, m = spent.shape
    K = starts.shape[0]
    max_nodes = 0
    for j in range(m):
        if nodes[j] > max_nodes:
            max_nodes = nodes[j]
    max_per = 0
    for j in range(m):
        if per_node[j] > max_per:
            max_per = per_node[j]
    free = np.zeros((max_nodes, max_per), dtype=np.bool_)
    count = np.zeros(max_nodes, dtype=np.int64)
    prio = np.zeros((n, m))
    picked = np.zeros(n, dtype=np.bool_)
    all_chosen = np.empty(n, dtype=np.int64)  # per type, the chosen entries in priority order
    type_start = np.zeros(m, dtype=np.int64)
    type_count = np.zeros(m, dtype=np.int64)
    best = np.empty(n, dtype=np.int64)
    cur_type = np.empty(n, dtype=np.int64)
    cur_node = np.empty(n, dtype=np.int64)
    cur_gpu = np.empty(n, dtype=np.int64)
    fresh = np.empty(n, dtype=np.int64)
    prev_type = np.empty(n, dtype=np.int64)
    prev_node = np.empty(n, dtype=np.int64)
    prev_gpu = np.empty(n, dtype=np.int64)
    for i in range(n):
        prev_type[i] = lease[jn[i], 0]
        prev_node[i] = lease[jn[i], 1]
        prev_gpu[i] = lease[jn[i], 2]
    rounds = 0
    offsets[0] = 0
    stop = STOP_FULL
    while rounds < K:
        if rounds >= max_rounds:
            stop = STOP_MAX_ROUNDS
            break
        if t >= next_arrival:
            stop = STOP_ARRIVAL
            break
        if need_update and (math.isnan(last_reset) or last_reset == 0.0 or t - last_reset >= resolve_interval):
            stop = STOP_RESOLVE
            break
        # -- select: priorities (RoundMechanism._matrices) --------------------------------
        for i in range(n):
            for j in range(m):
                wt = worker_time[j]
                share = spent[i, j] / wt if wt > 0 else 0.0
                if share > 0:
                    p = alloc[i, j] / share
                else:
                    p = alloc[i, j] * UNSERVED_PRIORITY
                prio[i, j] = p if ok[i, j] else 0.0
        for i in range(n):
            picked[i] = False
            cur_type[i] = -1
        base = offsets[rounds]
        placed = 0
        # -- the greedy fill, per type in the visiting order; then placement per type in
        # cluster order: the fill of one type does not depend on another's placement, so the
        # two passes are kept apart as in Python (chosen lists per type).
        n_all = 0
        for oj in range(m):
            j = order[oj]
            k = cap[j]
            nb = 0  # best[0:nb]: the top entries so far, best first
            if k > 0:
                for i in range(n):
                    if not ok[i, j] or picked[i]:
                        continue
                    if fifo and not prio[i, j] > 0:
                        continue
                    # insert i if it beats the worst kept (ties: lower index first, so a later
                    # entry never beats an equal earlier one)
                    if nb == k:
                        w = best[nb - 1]
                        if not (
                            prio[i, j] > prio[w, j]
                            or (
                                prio[i, j] == prio[w, j]
                                and (
                                    deficit[i, j] > deficit[w, j]
                                    or (deficit[i, j] == deficit[w, j] and alloc[i, j] > alloc[w, j])
                                )
                            )
                        ):
                            continue
                        pos = nb - 1
                    else:
                        pos = nb
                        nb += 1
                    while pos > 0:
                        w = best[pos - 1]
                        if prio[i, j] > prio[w, j] or (
                            prio[i, j] == prio[w, j]
                            and (
                                deficit[i, j] > deficit[w, j]
                                or (deficit[i, j] == deficit[w, j] and alloc[i, j] > alloc[w, j])
                            )
                        ):
                            best[pos] = w
                            pos -= 1
                        else:
                            break
                    best[pos] = i
            type_start[j] = n_all
            type_count[j] = nb
            for q in range(nb):
                all_chosen[n_all] = best[q]
                n_all += 1
                picked[best[q]] = True
        # -- placement (RoundMechanism._place_on, spill mode; single GPUs), per type in cluster order
        for j in range(m):
            c = type_count[j]
            if c == 0:
                continue
            for a in range(nodes[j]):
                count[a] = per_node[j]
                for g in range(per_node[j]):
                    free[a, g] = True
            nf = 0
            s0 = type_start[j]
            for q in range(c):
                i = all_chosen[s0 + q]
                if prev_type[i] == j and free[prev_node[i], prev_gpu[i]]:
                    a = prev_node[i]
                    g = prev_gpu[i]
                    free[a, g] = False
                    count[a] -= 1
                    pl_entry[base + placed] = i
                    pl_type[base + placed] = j
                    pl_node[base + placed] = a
                    pl_gpu[base + placed] = g
                    placed += 1
                    continue
                fresh[nf] = i
                nf += 1
            for q in range(nf):
                i = fresh[q]
                if not has_alloc[i]:
                    continue
                # FreeGpus.take_one: the fullest node with a GPU free (first on ties), its first GPU
                ba = -1
                for a in range(nodes[j]):
                    if count[a] >= 1 and (ba < 0 or count[a] < count[ba]):
                        ba = a
                g = 0
                while not free[ba, g]:
                    g += 1
                free[ba, g] = False
                count[ba] -= 1
                pl_entry[base + placed] = i
                pl_type[base + placed] = j
                pl_node[base + placed] = ba
                pl_gpu[base + placed] = g
                placed += 1
        if placed == 0:
            stop = STOP_IDLE
            break
        # -- execute (Engine._execute, compat, single jobs, no restart costs) ---------------
        same = 0
        end = -math.inf
        any_finished = False
        for q in range(placed):
            p = base + q
            i = pl_entry[p]
            j = pl_type[p]
            if prev_type[i] == j and prev_node[i] == pl_node[p] and prev_gpu[i] == pl_gpu[p]:
                same += 1
            r = rates[i, j]
            left = total_steps[i] - steps_done[i]
            fl = math.floor(r * tau)
            whole = max(1.0, fl)
            if whole <= left:  # Python's min(int, float) keeps the first when not greater
                steps = whole
                is_int = True
            else:
                steps = left
                is_int = False
            done = t + 0.0 + steps / r
            steps_done[i] += steps
            fin = steps_done[i] >= total_steps[i] - 1e-9
            finished[i] = fin
            if fin:
                any_finished = True
            last_steps[q] = steps
            last_is_int[q] = is_int
            last_finish[q] = done
            if done > end:
                end = done
            elapsed = done - round_origin
            busy[j] += elapsed * 1
            # RoundMechanism.record_round: spent, then worker time, in placement order
            spent[i, j] += elapsed
            worker_time[j] += elapsed
        # GpuUsage.add: a placement holds its GPU to the round's end, or to its job's finish
        for q in range(placed):
            p = base + q
            i = pl_entry[p]
            j = pl_type[p]
            last = end
            if finished[i]:
                last = max(t, last_finish[q])
            share = (last - t) * 1 / 1
            gpu_s[jn[i], j] += share
            held[jn[i], j] = True
            idle[0] += (end - last) * 1
        # the leases of this round (RoundMechanism.place: previous = this round's placements)
        for q in range(placed):
            p = base + q
            i = pl_entry[p]
            cur_type[i] = pl_type[p]
            cur_node[i] = pl_node[p]
            cur_gpu[i] = pl_gpu[p]
        for i in range(n):
            prev_type[i] = cur_type[i]
            prev_node[i] = cur_node[i] if cur_type[i] >= 0 else -1
            prev_gpu[i] = cur_gpu[i] if cur_type[i] >= 0 else -1
        starts[rounds] = t
        ends[rounds] = end
        n_placed[rounds] = placed
        n_same[rounds] = same
        offsets[rounds + 1] = base + placed
        rounds += 1
        round_origin = end
        t = end
        if any_finished:
            stop = STOP_FINISHED
            break
        if end > until_s:
            stop = STOP_UNTIL
            break
    for i in range(n):
        lease[jn[i], 0] = prev_type[i]
        lease[jn[i], 1] = prev_node[i]
        lease[jn[i], 2] = prev_gpu[i]
    return rounds, stop


class CompiledBooks:
    """What the compiled loop keeps per job between calls, by a job number given on first sight:
    last round's GPU (the lease; valid while `Engine` has not handed the leases back to the
    mechanism's Placement dict), and the GPU-seconds it held per type (the simulation's
    GpuUsage, kept here so that the compiled call adds them round by round)."""

    def __init__(self, m: int, number: dict[str, int] | None = None):
        """`number`: job id -> number, shared with whoever else numbers jobs (the mechanism's
        `_job_number`, so that its per-entry member rows give the entries' job numbers); numbers
        are handed out in insertion order, 0, 1, 2, ..., and never taken back."""
        self.m = m
        self.number: dict[str, int] = {} if number is None else number
        self.lease = np.full((0, 3), -1, dtype=np.int64)
        self.gpu_s = np.zeros((0, m))
        self.held = np.zeros((0, m), dtype=bool)
        self.idle = np.zeros(1)
        # per job, filled by the engine on first sight (`known`): total steps, job-type number,
        # GPUs it needs, whether `alloc_seen` (the allocation last looked at) has it, its JobOutcome
        self.known = np.zeros(0, dtype=bool)
        self.total = np.zeros(0)
        self.type_number = np.zeros(0, dtype=np.int64)
        self.scale = np.zeros(0, dtype=np.int64)
        self.in_alloc = np.zeros(0, dtype=bool)
        self.multi_gpu = False  # whether some job noted so far needs more than one GPU
        self.alloc_seen: object = None
        self.outcome = np.empty(0, dtype=object)

    def numbers(self, job_ids: list[str]) -> np.ndarray:
        """The jobs' numbers, numbering those not seen before (their rows start empty)."""
        number = self.number
        for jid in job_ids:
            if jid not in number:
                number[jid] = len(number)
        self.grow()
        return np.fromiter((number[jid] for jid in job_ids), dtype=np.int64, count=len(job_ids))

    def grow(self) -> None:
        """Rows for every job numbered so far (also those numbered by the sharer of `number`)."""
        if len(self.number) > len(self.lease):
            size = max(len(self.number), 2 * len(self.lease), 64)
            grow = size - len(self.lease)
            self.lease = np.concatenate([self.lease, np.full((grow, 3), -1, dtype=np.int64)])
            self.gpu_s = np.concatenate([self.gpu_s, np.zeros((grow, self.m))])
            self.held = np.concatenate([self.held, np.zeros((grow, self.m), dtype=bool)])
            self.known = np.concatenate([self.known, np.zeros(grow, dtype=bool)])
            self.total = np.concatenate([self.total, np.zeros(grow)])
            self.type_number = np.concatenate([self.type_number, np.zeros(grow, dtype=np.int64)])
            self.scale = np.concatenate([self.scale, np.zeros(grow, dtype=np.int64)])
            self.in_alloc = np.concatenate([self.in_alloc, np.zeros(grow, dtype=bool)])
            self.outcome = np.concatenate([self.outcome, np.empty(grow, dtype=object)])


@functools.cache
def have_numba() -> bool:
    """Whether numba (the `fast` extra) imports here. Asked only when a simulation could use the
    compiled loop: importing numba takes a quarter of a second, which no other command should pay."""
    try:
        import numba  # noqa: F401
    except Exception:  # absent, or built for another numpy: the Python round loop is the reference
        return False
    return True


@functools.cache
def _kernel() -> Any:
    """`_run_rounds` compiled: once per machine (about 3 s), then loaded from numba's cache
    (NUMBA_CACHE_DIR, else next to this file, else the user's cache folder)."""
    import numba

    try:
        return numba.njit(cache=True, nogil=True)(_run_rounds)
    except RuntimeError:  # no writable cache location at all: compile in every process instead
        return numba.njit(nogil=True)(_run_rounds)


_READY: list[Any] = []  # the kernel, once compiled or loaded for the engine's argument types
_OFF: list[str] = []  # why the compiled loop is off in this process (numba failed to compile it)


def available() -> bool:
    """Whether the compiled loop can run here: numba imports, and compiling did not fail."""
    return not _OFF and have_numba()


def run_rounds(*args) -> tuple[int, int] | None:
    """`_run_rounds`, compiled; None when numba cannot compile it (the caller runs the Python
    step, with the same results). The first call compiles, or loads from the cache, for these
    argument types before running anything, so that a failure there (a numba release that
    rejects the code, a cache that cannot be written) has changed no state."""
    if _OFF:
        return None
    kernel = _READY[0] if _READY else None
    if kernel is not None:
        return kernel(*args)
    try:
        kernel = _kernel()
        if not kernel.signatures:  # asked once: the property costs ~80 us, a tenth of a call
            import numba

            kernel.compile(tuple(numba.typeof(a) for a in args))
    except Exception as exc:  # numba's own errors vary by release: any failure turns the loop off
        _OFF.append(f"{type(exc).__name__}: {exc}".splitlines()[0])
        warnings.warn(
            f"rota: the compiled round loop is off ({_OFF[0]}); the Python loop runs instead, with the same results",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    _READY.append(kernel)
    return kernel(*args)
