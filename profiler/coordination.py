"""Coordinators for measurements shared by several processes.

Pair (co-location): both processes warm up, meet at a barrier, then time
windows. Whoever stops first stamps `stop_at` (the end of its last window); the
other keeps only windows that ended by then, so each side's numbers cover only
time when both were running. A side that has converged keeps running (to keep
the load on) until its partner converges too, or the budget runs out.

Data-parallel: rank 0 decides window size and when to stop and broadcasts it,
so every rank runs the same number of collective steps.
"""

from __future__ import annotations

import math

from profiler.timing import Verdict, WindowState

# Layout of the shared array: [stop_at, converged_0, converged_1, windows_0, windows_1]
PAIR_SLOTS = 5
HARD_STOP_FACTOR = 3.0  # a budget-expired side waits for its partner's first window at most this long


def new_pair_state(ctx):
    """The shared array for one pair, from a multiprocessing context."""
    state = ctx.Array("d", PAIR_SLOTS)
    state[0] = math.inf
    return state


class PairCoordinator:
    def __init__(self, rank: int, barrier, state, budget_s: float, barrier_timeout_s: float):
        if rank not in (0, 1):
            raise ValueError("a pair has ranks 0 and 1")
        self.rank, self.barrier, self.state = rank, barrier, state
        self.budget_s, self.barrier_timeout_s = budget_s, barrier_timeout_s

    def agree_steps(self, n: int) -> int:
        return n  # each side sizes its own windows; only wall-clock overlap matters

    def start(self) -> None:
        # Both warmed up: measure from here. A broken/timed-out barrier raises.
        self.barrier.wait(self.barrier_timeout_s)

    def after_window(self, s: WindowState) -> Verdict:
        me, other = self.rank, 1 - self.rank
        with self.state.get_lock():
            stop_at = self.state[0]
            if stop_at < math.inf:  # partner already stopped
                return Verdict(keep=s.ended_at <= stop_at, stop=True, reason="partner")
            self.state[3 + me] += 1
            if s.converged:
                self.state[1 + me] = 1.0
            both_converged = self.state[1 + me] > 0 and self.state[1 + other] > 0
            partner_has_data = self.state[3 + other] >= 1
            stop = (
                both_converged
                or (s.out_of_time and partner_has_data)
                or s.elapsed_s >= HARD_STOP_FACTOR * self.budget_s
            )
            if stop:
                self.state[0] = s.ended_at
        return Verdict(keep=True, stop=stop, reason="converged" if both_converged else None)


class DistributedCoordinator:
    """Rank 0's window size and stop decision, broadcast over torch.distributed."""

    def __init__(self, device):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.device = torch, dist, device

    def _from_rank0(self, value: int) -> int:
        t = self.torch.tensor([value], dtype=self.torch.int64, device=self.device)
        self.dist.broadcast(t, src=0)
        return int(t.item())

    def agree_steps(self, n: int) -> int:
        return max(1, self._from_rank0(n))

    def start(self) -> None:
        self._from_rank0(0)  # a collective is a barrier that works on NCCL and gloo alike

    def after_window(self, s: WindowState) -> Verdict:
        stop = bool(self._from_rank0(int(s.converged or s.out_of_time)))
        return Verdict(keep=True, stop=stop)
