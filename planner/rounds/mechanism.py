"""Gavel's round-based mechanism (spec §5): time fractions -> concrete GPUs per round.

Each round, an entry (a job, or a co-located pair: a tuple of job ids) gets
priority  A[k, j] / (share of type j it received since the last reset),
so jobs behind their allocation go first; deficits break ties and decide who
fills leftover GPUs. Types are filled greedily in a visiting order derived from
the data (fastest first), then entries are placed onto GPUs of concrete nodes:
largest gangs first, a job keeps last round's GPUs when they are still free
(lease extension), a new gang goes to the fullest node that still fits it.

Whole gangs (rota's placement; Gavel's, with `whole_gangs=False`, spills a gang
over the nodes with most GPUs free when no node fits it). The fill counts GPUs
per type, not per node, so a chosen gang may find no node with room:
- a gang that fits one node (scale factor <= GPUs per node) is never split;
- a bigger gang takes the fewest nodes, ceil(size / per node), inside one
  domain: an NVLink domain first, else a switch (a type that names no switch is
  one flat network);
- when no node (domain) has room, the gang takes the GPUs of lower-priority,
  smaller entries placed before it (their leases; they are placed again after
  it, elsewhere, or wait); failing that it waits this round (`Unplaced`, with
  the reason), and `backfill` gives the GPUs it leaves idle to entries the fill
  left out, in priority order, on whole nodes too;
- a gang bigger than a node may spread over domains (or more nodes) only when
  the table states its spread throughput: Gavel's `<type>_unconsolidated` rows
  (the throughput of a gang whose GPUs are on different servers), which the
  engine then uses for it; without one it waits.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.formats.cluster import Cluster, WorkerType
from planner.formats.schedule import UnplacedEntry

Key = tuple[str, ...]
Gpu = tuple[str, int]  # (node name, GPU index on that node)

UNSERVED_PRIORITY = 1e9  # stands in for A / 0 (an entry that never ran since the reset)

DEFAULT_ROUND_S = 360.0  # Gavel's round length (6 minutes)


@dataclass(frozen=True)
class Placement:
    jobs: Key
    worker_type: str
    gpus: tuple[Gpu, ...]


@dataclass(frozen=True)
class Unplaced:
    """An entry the fill chose on a worker type that got no GPUs this round: it does not run
    (its books see a round without service), and `reason` says why, in one line."""

    jobs: Key
    worker_type: str
    gpus: int
    reason: str

    def to_json(self) -> UnplacedEntry:
        return {"jobs": list(self.jobs), "worker_type": self.worker_type, "gpus": self.gpus, "reason": self.reason}


# (entry, type index) -> whether the table states the entry's throughput as a spread gang there
SpreadOk = Callable[[Key, int], bool]


class Topology:
    """The node groups of one worker type that a gang bigger than a node may use whole:
    each NVLink domain of two or more nodes, then each switch (all nodes, when the type
    names no switch: one flat network). Pure data, built once per type."""

    def __init__(self, spec: WorkerType):
        self.per_node = spec.gpus_per_node
        nvlink: dict[str, list[str]] = {}
        switch: dict[str, list[str]] = {}
        for node in spec.nodes:
            where = spec.domains.get(node)
            if where is not None and where.nvlink_domain is not None:
                nvlink.setdefault(where.nvlink_domain, []).append(node)
            if where is not None and where.switch is not None:
                switch.setdefault(where.switch, []).append(node)
        switches = list(switch.values()) if spec.has_switches else [list(spec.nodes)]
        self.flat = not spec.has_switches
        # NVLink domains first: the faster fabric, tried before a switch.
        self.groups: list[list[str]] = [g for g in nvlink.values() if len(g) > 1] + switches
        self._sets = [frozenset(g) for g in self.groups]
        self.widest = max((len(g) for g in self.groups), default=0)  # nodes in the largest group

    def nodes_needed(self, size: int) -> int:
        return math.ceil(size / self.per_node)

    def can_consolidate(self, size: int) -> bool:
        """Whether a gang of `size` fits, on an empty type, one node or one group."""
        return size <= self.per_node or self.nodes_needed(size) <= self.widest

    def consolidated(self, gpus: Sequence[Gpu]) -> bool:
        """One node, or the fewest nodes inside one group: what the table's throughput means."""
        nodes = {node for node, _ in gpus}
        if len(nodes) == 1:
            return True
        if len(nodes) > self.nodes_needed(len(gpus)):
            return False
        return any(nodes <= group for group in self._sets)


@dataclass
class MechanismSnapshot:
    """The mechanism's books between two rounds, as values (arrays are copies).

    Entry order matters: it is arrival order, the tie-break of the greedy fill.
    """

    round_s: float
    last_reset: float | None  # when shares were last folded into deficits (None: never)
    worker_time: np.ndarray  # per type: time handed out since the last reset
    job_time: dict[Key, np.ndarray] = field(default_factory=dict)  # per entry, per type: time received
    deficit: dict[Key, np.ndarray] = field(default_factory=dict)
    alloc: dict[Key, np.ndarray] = field(default_factory=dict)  # the policy's time fractions
    previous: dict[Key, Placement] = field(default_factory=dict)  # last round's GPUs (lease extension)


def visiting_order(throughput: np.ndarray) -> list[int]:
    """Worker types, fastest first: by mean normalised throughput over the jobs.

    `throughput` is (jobs, types). Ties keep the cluster-spec order.
    """
    m = throughput.shape[1]
    if throughput.size == 0:
        return list(range(m))
    best = throughput.max(axis=1, keepdims=True)
    speed = np.divide(throughput, best, out=np.zeros_like(throughput), where=best > 0).mean(axis=0)
    return sorted(range(m), key=lambda j: (-speed[j], j))


class GrowingRows:
    """An (n, m) array that grows by whole rows at amortised O(1) per row: a plan admits 10^5
    jobs, and packing adds every candidate pair, one at a time (stacking per row is quadratic)."""

    def __init__(self, m: int, dtype: type = float):
        self._buffer: np.ndarray = np.zeros((0, m), dtype=dtype)
        self.n = 0

    @property
    def array(self) -> np.ndarray:
        """The rows, as a view (writes go to the rows; valid until the next append or delete)."""
        return self._buffer[: self.n]

    def replace(self, rows: np.ndarray) -> None:
        self._buffer = np.array(rows, dtype=self._buffer.dtype, order="C").reshape(len(rows), self._buffer.shape[1])
        self.n = len(rows)

    def append(self, row: np.ndarray) -> None:
        if self.n == len(self._buffer):
            grown = np.zeros((max(16, 2 * self.n), self._buffer.shape[1]), dtype=self._buffer.dtype)
            grown[: self.n] = self._buffer[: self.n]
            self._buffer = grown
        self._buffer[self.n] = row
        self.n += 1

    def extend(self, rows: np.ndarray) -> None:
        self._reserve(len(rows))
        self._buffer[self.n : self.n + len(rows)] = rows
        self.n += len(rows)

    def extend_with(self, count: int, value: float) -> None:
        """`extend` by `count` rows of `value` each (no rows to build first)."""
        self._reserve(count)
        self._buffer[self.n : self.n + count] = value
        self.n += count

    def _reserve(self, count: int) -> None:
        while self.n + count > len(self._buffer):
            grown = np.zeros((max(16, 2 * len(self._buffer)), self._buffer.shape[1]), dtype=self._buffer.dtype)
            grown[: self.n] = self._buffer[: self.n]
            self._buffer = grown

    def delete(self, row: int) -> None:
        self._buffer[row : self.n - 1] = self._buffer[row + 1 : self.n]
        self.n -= 1


class EntryRows(Mapping[Key, np.ndarray]):
    """Entry -> its row of one of the mechanism's (entries, types) books, in arrival order.

    A row is a view: writing into it writes the books (until the next add or remove)."""

    def __init__(self, mech: RoundMechanism, book: str):
        self._mech, self._book = mech, book

    def __getitem__(self, key: Key) -> np.ndarray:
        return getattr(self._mech, self._book)[self._mech.rows[key]]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._mech.rows)

    def __len__(self) -> int:
        return len(self._mech.rows)

    def __contains__(self, key: object) -> bool:
        return key in self._mech.rows


class RoundMechanism:
    def __init__(self, cluster: Cluster, round_s: float = DEFAULT_ROUND_S):
        self.cluster = cluster
        self.types = cluster.names
        self.m = len(self.types)
        self.round_s = round_s
        self.alloc: dict[Key, np.ndarray] = {}
        # The books, one row per entry: rows in insertion order = arrival order (the tie-break).
        # Kept as (entries, types) arrays so a round reads them without stacking per-entry rows.
        self.rows: dict[Key, int] = {}  # entry -> its row
        self.keys: list[Key] = []  # the entries, row by row
        self._pairs = 0  # how many entries are co-located pairs
        self._spent_rows = GrowingRows(self.m)  # per entry, per type: time received since the last reset
        self._deficit_rows = GrowingRows(self.m)
        self._alloc_rows: np.ndarray | None = None  # `alloc` as rows (None: to be rebuilt)
        # Per entry: the numbers of its first and last job (`_job_number`), so that the fill can
        # drop at once every pair of a job already chosen (with packing, most entries are pairs).
        self._member_rows = GrowingRows(2, dtype=np.int64)
        self._job_number: dict[str, int] = {}
        self.version = 0  # changes whenever the set of entries does
        self.worker_time = np.zeros(self.m)
        self.last_reset: float | None = None
        # last round's GPUs; a compiled round loop may defer building them (`defer_previous`)
        self._previous_source: Callable[[], dict[Key, Placement]] | None = None
        self._previous: dict[Key, Placement] = {}
        # Last placement pass (whole gangs): entries chosen but not placed, and placed entries
        # spread over domains (they run at the table's spread throughput).
        self.unplaced: list[Unplaced] = []
        self.spread: set[Key] = set()
        # The last fill's ranking: (priority, deficit, allocation, runnable, entries version).
        self._ranking: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int] | None = None
        self._left: dict[int, FreeGpus] = {}  # per type index: GPUs the last placement left free
        self._leases: dict[Key, Placement] = {}  # the leases the last placement started from
        self._topologies: dict[str, Topology] = {}
        # Tenant quotas (docs/tenants.md): entry -> its tenant's row in `allowance` (tenant x type:
        # GPUs the tenant may still take this round); None: no quotas. Set by the engine each round.
        self.tenant_of: dict[Key, int] | None = None
        self.allowance: np.ndarray | None = None

    @property
    def previous(self) -> dict[Key, Placement]:
        """Last round's placements by entry (lease extension)."""
        if self._previous_source is not None:
            source, self._previous_source = self._previous_source, None
            self._previous = source()
        return self._previous

    @previous.setter
    def previous(self, value: dict[Key, Placement]) -> None:
        self._previous_source = None
        self._previous = value

    def defer_previous(self, source: Callable[[], dict[Key, Placement]]) -> None:
        """`previous` becomes `source()` when next read (it must leave out removed entries)."""
        self._previous_source = source

    @property
    def _spent(self) -> np.ndarray:
        return self._spent_rows.array

    @property
    def _deficit(self) -> np.ndarray:
        return self._deficit_rows.array

    @property
    def job_time(self) -> EntryRows:
        """Per entry, per type: time received since the last reset."""
        return EntryRows(self, "_spent")

    @property
    def deficit(self) -> EntryRows:
        return EntryRows(self, "_deficit")

    # snapshot ------------------------------------------------------------
    def snapshot(self) -> MechanismSnapshot:
        return MechanismSnapshot(
            round_s=self.round_s,
            last_reset=self.last_reset,
            worker_time=self.worker_time.copy(),
            job_time={k: self._spent[i].copy() for k, i in self.rows.items()},
            deficit={k: self._deficit[i].copy() for k, i in self.rows.items()},
            alloc={k: v.copy() for k, v in self.alloc.items()},
            previous=dict(self.previous),
        )

    def restore(self, snapshot: MechanismSnapshot) -> None:
        """Continue from `snapshot`. A lease on a node that left the cluster spec is
        dropped: that only costs the lease extension."""
        nodes = {w: set(spec.nodes) for w, spec in self.cluster.worker_types.items()}
        self.round_s = snapshot.round_s
        self.last_reset = snapshot.last_reset
        self.worker_time = np.array(snapshot.worker_time, dtype=float)
        keys = list(snapshot.job_time)
        self._set_rows(
            keys,
            np.array([snapshot.job_time[k] for k in keys], dtype=float).reshape(len(keys), self.m),
            np.array([snapshot.deficit[k] for k in keys], dtype=float).reshape(len(keys), self.m),
        )
        self.alloc = {k: v.copy() for k, v in snapshot.alloc.items()}
        self.previous = {
            key: placement
            for key, placement in snapshot.previous.items()
            if placement.worker_type in nodes
            and all(node in nodes[placement.worker_type] for node, _ in placement.gpus)
        }

    def _set_rows(self, keys: list[Key], spent: np.ndarray, deficit: np.ndarray) -> None:
        self.keys = keys
        self.rows = {k: i for i, k in enumerate(keys)}
        self._pairs = sum(len(k) > 1 for k in keys)
        self._spent_rows.replace(spent)
        self._deficit_rows.replace(deficit)
        self._member_rows.replace(self._members(keys))
        self._alloc_rows = None
        self.version += 1

    # bookkeeping ---------------------------------------------------------
    def add(self, key: Key) -> None:
        # New entries look as if they had already had half a round (spec §5.1).
        self._add(key, np.full(self.m, self.round_s / 2))

    def add_jobs(self, keys: Sequence[Key]) -> None:
        """`add` for each of `keys`, in order, at once (a plan admits thousands of jobs together)."""
        self._add_many(keys, self.round_s / 2, self.add)

    def add_pair(self, key: Key) -> None:
        # A new pair starts with no received time (Gavel): it is preferred once.
        self._add(key, np.zeros(self.m))

    def add_pairs(self, keys: Sequence[Key]) -> None:
        """`add_pair` for each of `keys`, in order, at once (a packed re-solve brings hundreds)."""
        self._add_many(keys, 0.0, self.add_pair)

    def _add_many(self, keys: Sequence[Key], received: float, add_one: Callable[[Key], None]) -> None:
        """New entries, each with `received` seconds on every type, appended to the books in one
        step; a key already present (or given twice) takes `add_one`'s path, key by key."""
        if not keys:
            return
        new = [k for k in dict.fromkeys(keys) if k not in self.rows]
        if len(new) != len(keys):
            for key in keys:
                add_one(key)
            return
        rows, first = self.rows, len(self.keys)
        for i, key in enumerate(new):
            rows[key] = first + i
        self._pairs += sum(len(key) > 1 for key in new)
        self.keys.extend(new)
        self._spent_rows.extend_with(len(new), received)
        self._deficit_rows.extend_with(len(new), 0.0)
        self._member_rows.extend(self._members(new))
        if self._alloc_rows is not None:  # the new rows (zeros for entries without an allocation)
            zero, alloc = np.zeros(self.m), self.alloc
            added = np.array([alloc.get(k, zero) for k in new], dtype=float).reshape(len(new), self.m)
            self._alloc_rows = np.concatenate([self._alloc_rows, added])
        self.version += 1

    def _add(self, key: Key, spent: np.ndarray) -> None:
        row = self.rows.get(key)
        if row is not None:  # an entry added again keeps its place (as a dict key would)
            self._spent[row] = spent
            self._deficit[row] = 0.0
            return
        self.rows[key] = len(self.keys)
        self.keys.append(key)
        if len(key) > 1:
            self._pairs += 1
        self._spent_rows.append(spent)
        self._deficit_rows.append(np.zeros(self.m))
        self._member_rows.append(self._members([key])[0])
        self._alloc_rows = None  # rebuilt once when next read, not once per entry added
        self.version += 1

    def remove_many(self, keys: Collection[Key]) -> None:
        """Drop these entries (unknown ones are ignored); the others keep their order.

        One pass over the books for all of them: a finished job leaves every pair it was in
        (hundreds, with packing), and removing them one at a time shifted the books each time."""
        deferred = self._previous_source is not None  # the source leaves removed entries out
        for key in keys:
            self.alloc.pop(key, None)
            if not deferred:
                self._previous.pop(key, None)
        gone = [self.rows[key] for key in dict.fromkeys(keys) if key in self.rows]
        if not gone:
            return
        self._pairs -= sum(len(self.keys[row]) > 1 for row in gone)
        if len(gone) == 1:  # the common case: one job alone
            row = gone[0]
            del self.rows[self.keys[row]], self.keys[row]
            for i in range(row, len(self.keys)):  # the entries after it move up one row
                self.rows[self.keys[i]] = i
            self._spent_rows.delete(row)
            self._deficit_rows.delete(row)
            self._member_rows.delete(row)
            if self._alloc_rows is not None:  # (np.delete takes three times as long)
                self._alloc_rows = np.concatenate((self._alloc_rows[:row], self._alloc_rows[row + 1 :]))
        else:
            keep = np.ones(len(self.keys), dtype=bool)
            keep[gone] = False
            self.keys = [k for k, kept in zip(self.keys, keep.tolist()) if kept]
            self.rows = {k: i for i, k in enumerate(self.keys)}
            self._spent_rows.replace(self._spent[keep])
            self._deficit_rows.replace(self._deficit[keep])
            self._member_rows.replace(self._member_rows.array[keep])
            if self._alloc_rows is not None:
                self._alloc_rows = self._alloc_rows[keep]
        self.version += 1

    def _members(self, keys: Sequence[Key]) -> np.ndarray:
        """(first job, last job) of each entry as numbers, numbering jobs not seen before."""
        number = self._job_number
        rows = [(number.setdefault(key[0], len(number)), number.setdefault(key[-1], len(number))) for key in keys]
        return np.array(rows, dtype=np.int64).reshape(len(keys), 2)

    def entries_of(self, *job_ids: str) -> list[Key]:
        """The entries any of `job_ids` belongs to (alone, and in pairs); without pairs, in
        the order given (no scan of the books), else in entry order."""
        if not self._pairs:
            return [(jid,) for jid in job_ids if (jid,) in self.rows]
        ids = set(job_ids)
        return [k for k in self.keys if not ids.isdisjoint(k)]

    def _alloc_matrix(self) -> np.ndarray:
        """`alloc` as (entries, types) rows in entry order; zeros for an entry without one."""
        if self._alloc_rows is None:
            n, zero, alloc = len(self.keys), np.zeros(self.m), self.alloc
            self._alloc_rows = np.array([alloc.get(k, zero) for k in self.keys], dtype=float).reshape(n, self.m)
        return self._alloc_rows

    def reset(self, now: float) -> None:
        """Fold the share each entry received into its deficit, then restart counting (§5.3)."""
        elapsed = 0.0 if self.last_reset is None else now - self.last_reset
        half = self.round_s / 2
        if self.keys:
            should = self._alloc_matrix() * elapsed
            deficit = self._deficit  # a view: the addition lands in the books
            deficit += should - (self._spent - half)
            self._spent[:] = half
        total = 0.0
        for _ in self.keys:  # half per entry, added one at a time (the same sums as ever)
            total += half
        self.worker_time[:] = total
        self.last_reset = now

    def force_reset(self) -> None:
        """Make the next re-solve check see a reset at t = 0 (Gavel's `last_reset := 0`)."""
        self.last_reset = 0.0

    def move_lease(self, job_id: str, placement: Placement) -> None:
        """The GPUs a job actually held replace what the plan gave it (and any pair it was
        planned in), so next round's lease extension keeps what really ran."""
        for key in [k for k in self.previous if job_id in k]:
            del self.previous[key]
        self.previous[placement.jobs] = placement

    def set_allocation(self, alloc: Mapping[Key, np.ndarray], rows: np.ndarray | None = None) -> None:
        """`rows`, if given: `alloc` as `_alloc_matrix` would build it (every entry's row, in entry
        order), from a caller that has them stacked already."""
        self.alloc = {k: np.asarray(v, dtype=float) for k, v in alloc.items()}
        self._alloc_rows = None if rows is None else np.array(rows, dtype=float, order="C")

    def record(self, key: Key, j: int, elapsed: float) -> None:
        self._spent[self.rows[key], j] += elapsed
        self.worker_time[j] += elapsed

    def record_round(self, placed: Sequence[tuple[Key, int]], elapsed: Sequence[float]) -> None:
        """`record` for every (entry, type) of one round, in order; an entry appears at most once."""
        if len(placed) < 16:  # a few entries: plain updates cost less than building index arrays
            for (key, j), spent in zip(placed, elapsed):
                self.record(key, j, spent)
            return
        rows, m = self.rows, self.m
        cells = np.fromiter((rows[key] * m + j for key, j in placed), dtype=np.intp, count=len(placed))
        flat = self._spent.view()
        flat.shape = (-1,)  # a view of the books (they are contiguous; numpy refuses otherwise)
        flat[cells] += elapsed
        worker_time = self.worker_time.tolist()
        for (_, j), spent in zip(placed, elapsed):  # one addition at a time, as `record` does
            worker_time[j] += spent
        self.worker_time[:] = worker_time

    # selection -----------------------------------------------------------
    def _matrices(self, runnable: Mapping[Key, np.ndarray], ok: np.ndarray | None = None):
        """(priority, deficit, allocation, runnable) as (entries, types) arrays, rows in entry order.
        `ok`, if given, is `runnable` already stacked in entry order."""
        n, m = len(self.keys), self.m
        spent, deficit, alloc = self._spent, self._deficit, self._alloc_matrix()
        if ok is None:
            ok = np.array([runnable[k] for k in self.keys], dtype=bool).reshape(n, m)
        wt = self.worker_time
        share = np.divide(spent, wt, out=np.zeros((n, m)), where=wt > 0)
        served = share > 0
        prio = np.divide(alloc, share, out=alloc * UNSERVED_PRIORITY, where=served)
        return np.where(ok, prio, 0.0), deficit, alloc, ok

    def priorities(self, runnable: Mapping[Key, np.ndarray]) -> dict[Key, np.ndarray]:
        prio = self._matrices(runnable)[0]
        return {k: prio[i] for i, k in enumerate(self.keys)}

    def select(
        self,
        order: Sequence[int],
        scale: Mapping[Key, int],
        runnable: Mapping[Key, np.ndarray],
        *,
        fifo: bool = False,
        pinned: Mapping[Key, int] | None = None,
        ok: np.ndarray | None = None,
    ) -> list[tuple[Key, int]]:
        """Greedy fill (§5.4): per type in `order`, entries by (priority, deficit, allocation).

        `pinned` entries (entry -> type) are chosen on that type before the fill (migration-aware mode).
        `ok`, if given, is `runnable` stacked in entry order (callers that keep it between rounds)."""
        keys = self.keys
        prio, deficit, alloc, ok = self._matrices(runnable, ok)
        self._ranking = (prio, deficit, alloc, ok, self.version)  # placement and backfill rank by it
        free = self.cluster_capacity()
        taken: set[str] = set()
        chosen: list[tuple[Key, int]] = []
        picked = np.zeros(len(keys), dtype=bool)
        row = {key: i for i, key in enumerate(keys)} if pinned else {}
        for key, j in (pinned or {}).items():
            if key in row and scale[key] <= free[j] and taken.isdisjoint(key):
                chosen.append((key, j))
                picked[row[key]] = True
                free[j] -= scale[key]
                taken.update(key)
        # Negated once for every type: sorted ascending, they rank descending.
        neg_prio, neg_deficit, neg_alloc = -prio, -deficit, -alloc
        pairs = self._pairs > 0  # without pairs an entry is one job: `picked` alone keeps jobs apart
        members = self._member_rows.array if pairs else None
        for j in order:
            # Drop up front the entries the greedy pass would skip whatever it chose so far
            # (cannot run here, already picked, FIFO's unallocated, a pair with a job already
            # chosen); same choices, fewer visits.
            visit = ok[:, j] & ~picked
            if fifo:
                visit &= prio[:, j] > 0
            if members is not None and taken:
                gone = np.zeros(len(self._job_number), dtype=bool)
                gone[[self._job_number[jid] for jid in taken]] = True
                visit &= ~(gone[members[:, 0]] | gone[members[:, 1]])
            # Descending by (priority, deficit, allocation); the stable sort keeps insertion
            # (arrival) order among ties, as Gavel's sorted(reverse=True) does (sorting only the
            # entries to visit, in entry order, keeps that order).
            visiting = np.flatnonzero(visit)
            ranked = visiting[np.lexsort((neg_alloc[visiting, j], neg_deficit[visiting, j], neg_prio[visiting, j]))]
            left, newly = free[j], []
            capped = self.tenant_of
            for i in ranked.tolist():
                if left == 0:
                    break  # every later entry of this type would be skipped too
                key = keys[i]
                if pairs and not taken.isdisjoint(key):
                    continue  # a pair sharing a job with a chosen entry
                size = scale[key]
                if size > left:
                    continue  # smaller entries behind it may still backfill
                if capped is not None and not self._within_quota(key, j, size):
                    continue
                chosen.append((key, j))
                newly.append(i)
                left -= size
                if pairs:
                    taken.update(key)
            free[j] = left
            picked[newly] = True
        return chosen

    def _within_quota(self, key: Key, j: int, size: int) -> bool:
        """Whether the entry's tenant may take `size` more GPUs of type j this round (and if so,
        book them)."""
        g = self.tenant_of.get(key, -1) if self.tenant_of is not None else -1
        if g < 0 or self.allowance is None:
            return True
        if self.allowance[g, j] < size - 1e-9:
            return False
        self.allowance[g, j] -= size
        return True

    def lag(self, now: float) -> dict[Key, np.ndarray]:
        """Per entry and type: seconds it is behind its allocation (negative: ahead), counting the
        deficit carried over from earlier resets plus the time owed since the last one (§5.3)."""
        since = 0.0 if self.last_reset is None else now - self.last_reset
        half, zero = self.round_s / 2, np.zeros(self.m)
        return {
            key: self._deficit[i] + self.alloc.get(key, zero) * since - (self._spent[i] - half)
            for key, i in self.rows.items()
        }

    def select_migration_aware(
        self,
        order: Sequence[int],
        scale: Mapping[Key, int],
        runnable: Mapping[Key, np.ndarray],
        cost: Mapping[Key, np.ndarray],
        now: float,
        *,
        fifo: bool = False,
    ) -> list[tuple[Key, int]]:
        """The greedy fill, except that an entry the fill would move off the worker type it held
        last round stays there when the move does not pay (`migration_pins`). Entries are pinned
        one fill at a time until the fill moves no entry it should not; with no positive
        restart cost nothing is pinned and this is `select` exactly."""
        held = {key: self.types.index(p.worker_type) for key, p in self.previous.items() if key in self.rows}
        lag = self.lag(now) if held else {}
        pins: dict[Key, int] = {}
        while True:
            chosen = self.select(order, scale, runnable, fifo=fifo, pinned=pins)
            new = {k: j for k, j in migration_pins(chosen, held, lag, cost).items() if k not in pins}
            if not new:
                return chosen
            pins.update(new)

    def cluster_capacity(self) -> list[int]:
        return [self.cluster.worker_types[w].gpus for w in self.types]

    # placement -----------------------------------------------------------
    def place(
        self,
        chosen: Sequence[tuple[Key, int]],
        scale: Mapping[Key, int],
        *,
        allocated_only: bool = False,
        protected: Collection[Key] = (),
        whole_gangs: bool = True,
        spread_ok: SpreadOk | None = None,
    ) -> list[Placement]:
        """GPUs for the chosen entries; `allocated_only` (Gavel) never newly places one
        that is missing from the current allocation. `protected` entries that stay on their
        worker type keep last round's GPUs before any gang is placed (a move would cost them
        a restart). `whole_gangs` (rota; False: Gavel's spill) never splits a gang that fits a
        node and keeps bigger ones on the fewest nodes of one domain; an entry that finds no
        room goes to `unplaced`. `spread_ok(entry, type)`: the table states its spread throughput."""
        placements: list[Placement] = []
        by_type: dict[int, list[Key]] = {}
        for key, j in chosen:
            by_type.setdefault(j, []).append(key)
        self.unplaced, self.spread, self._left = [], set(), {}
        self._leases = self.previous  # last round's, for `backfill` (previous becomes this round's)
        for j, name in enumerate(self.types):
            here = by_type.get(j)
            if not here:
                continue
            if whole_gangs:
                self._place_whole(j, here, scale, allocated_only, protected, spread_ok, placements)
            else:
                self._place_on(name, here, scale, allocated_only, protected, placements)
        self.previous = {p.jobs: p for p in placements}
        return placements

    def _place_on(
        self,
        name: str,
        here: list[Key],
        scale: Mapping[Key, int],
        allocated_only: bool,
        protected: Collection[Key],
        placements: list[Placement],
    ) -> None:
        """Gavel's placement of the entries chosen on worker type `name` (in priority order),
        appending to `placements`: a gang no node fits spills over the nodes with most free."""
        previous, alloc = self.previous, self.alloc
        spec = self.cluster.worker_types[name]
        free = FreeGpus(spec.nodes, spec.gpus_per_node)
        lists = free.free
        if protected:
            here = self._keep_protected(here, name, free, protected, placements)
        sizes = {scale[k] for k in here}
        for size in sorted(sizes, reverse=True):  # big gangs first, each in priority order
            group = here if len(sizes) == 1 else [k for k in here if scale[k] == size]
            fresh = []
            for key in group:
                before = previous.get(key)
                if before is not None and before.worker_type == name:
                    gpus = before.gpus
                    if len(gpus) == 1:  # one GPU: FreeGpus.all_free and claim, inlined
                        node, g = gpus[0]
                        on_node = lists.get(node)
                        if on_node is not None and g in on_node:
                            on_node.remove(g)
                            placements.append(before)
                            continue
                    elif free.all_free(gpus):
                        free.claim(gpus)
                        placements.append(before)
                        continue
                fresh.append(key)
            for key in fresh:
                if allocated_only and key not in alloc:
                    continue
                gpus = free.take_one() if size == 1 else free.gang(size)
                if size != 1:
                    free.claim(gpus)
                placements.append(Placement(key, name, gpus))

    def _keep_protected(
        self, here: list[Key], name: str, free: FreeGpus, protected: Collection[Key], placements: list[Placement]
    ) -> list[Key]:
        """Claim last round's GPUs of the protected entries in `here`; the entries left to place."""
        rest = []
        for key in here:
            before = self.previous.get(key)
            if key in protected and before and before.worker_type == name and free.all_free(before.gpus):
                free.claim(before.gpus)
                placements.append(before)
            else:
                rest.append(key)
        return rest

    def topology(self, name: str) -> Topology:
        topology = self._topologies.get(name)
        if topology is None:
            topology = self._topologies[name] = Topology(self.cluster.worker_types[name])
        return topology

    def _place_whole(
        self,
        j: int,
        here: list[Key],
        scale: Mapping[Key, int],
        allocated_only: bool,
        protected: Collection[Key],
        spread_ok: SpreadOk | None,
        placements: list[Placement],
    ) -> None:
        """Whole-gang placement of the entries chosen on type j (in priority order), appending
        to `placements`; the order is the spill placement's (protected leases, then by size:
        leases, then new gangs) wherever no gang needs room."""
        name = self.types[j]
        spec = self.cluster.worker_types[name]
        step = _WholePass(self, j, FreeGpus(spec.nodes, spec.gpus_per_node), scale, spread_ok, here)
        self._left[j] = step.free
        held = step.held
        pending: dict[int, list[Key]] = {}
        for key in here:
            if not (protected and key in protected and step.keep_lease(key)):
                pending.setdefault(scale[key], []).append(key)
        reordered: set[int] = set()  # sizes that got moved entries back: to sort into priority order
        while pending:
            size = max(pending)  # big gangs first, each in priority order
            if size == 1:
                fresh = step.keep_single_leases(pending.pop(size))
            else:
                fresh = [key for key in pending.pop(size) if not step.keep_lease(key)]
            if size in reordered:
                fresh.sort(key=step.position.__getitem__)
            for key in fresh:
                if allocated_only and key not in self.alloc:
                    continue
                if size == 1:  # the fill's counts leave a GPU for every chosen single-GPU entry
                    held[key] = Placement(key, name, step.free.take_one())
                    continue
                for victim in step.place(key):  # entries moved to make room: placed again later
                    pending.setdefault(scale[victim], []).append(victim)
                    reordered.add(scale[victim])
        placements.extend(held.values())

    @staticmethod
    def _why(name: str, size: int, topology: Topology, key: Key, evicted: Mapping[Key, Key]) -> str:
        taker = evicted.get(key)
        lost = f"its GPUs went to higher-priority {'+'.join(taker)}; " if taker else ""
        if size <= topology.per_node:
            return (
                f"{lost}no {name} node had {size} GPUs free, nor could lower-priority smaller jobs move "
                "(a gang that fits one node is not split)"
            )
        where = "" if topology.flat else " switch or NVLink domain"
        return (
            f"{lost}no {name}{where} had {topology.nodes_needed(size)} nodes with {size} GPUs free, nor could "
            f"lower-priority smaller jobs move, and the table states no spread throughput ({name}_unconsolidated)"
        )

    def _rank(self, key: Key, j: int, position: Mapping[Key, int]) -> tuple:
        """Sort key of an entry on type j, first = highest: the last fill's (priority, deficit,
        allocation) descending, arrival order among ties; the chosen order without a fill."""
        ranking = self._ranking
        if ranking is None or ranking[4] != self.version:
            return (position[key],)
        i = self.rows[key]
        return (-ranking[0][i, j], -ranking[1][i, j], -ranking[2][i, j], i)

    def _room(
        self,
        key: Key,
        j: int,
        size: int,
        free: FreeGpus,
        topology: Topology,
        held: Mapping[Key, Placement],
        scale: Mapping[Key, int],
        position: Mapping[Key, int],
    ) -> list[Key]:
        """The entries to move so the gang `key` gets whole nodes: only smaller entries it
        outranks, the lowest-ranked first, on the node (or the fewest nodes of one group) where
        that moves the fewest GPUs; [] when no such set makes room."""
        mine = self._rank(key, j, position)
        victims = [v for v in held if scale[v] < size and self._rank(v, j, position) > mine]
        if not victims:
            return []
        victims.sort(key=lambda v: self._rank(v, j, position), reverse=True)  # lowest-ranked first
        movable: dict[str, int] = {}  # node -> GPUs the victims hold there
        for v in victims:
            for node, _ in held[v].gpus:
                movable[node] = movable.get(node, 0) + 1
        if size <= topology.per_node:
            targets = [[node] for node in free.nodes if len(free.free[node]) + movable.get(node, 0) >= size]
        else:
            need, targets = topology.nodes_needed(size), []
            for group in topology.groups:
                room = sorted(group, key=lambda n: -(len(free.free[n]) + movable.get(n, 0)))[:need]
                if len(room) == need and sum(len(free.free[n]) + movable.get(n, 0) for n in room) >= size:
                    targets.append(room)
        best: tuple[int, int] | None = None
        chosen: list[Key] = []
        for nodes in targets:
            inside = set(nodes)
            have = sum(len(free.free[n]) for n in nodes)
            moved: list[Key] = []
            gpus_moved = 0
            for v in victims:
                if have >= size:
                    break
                gained = sum(1 for node, _ in held[v].gpus if node in inside)
                if gained:
                    moved.append(v)
                    have += gained
                    gpus_moved += len(held[v].gpus)
            if have >= size and (best is None or (gpus_moved, len(moved)) < best):
                best, chosen = (gpus_moved, len(moved)), moved
        return chosen

    def backfill(
        self,
        order: Sequence[int],
        scale: Mapping[Key, int],
        *,
        fifo: bool = False,
        spread_ok: SpreadOk | None = None,
    ) -> list[Placement]:
        """After a whole-gang `place` left chosen entries unplaced: the GPUs they would have had,
        to entries the fill left out, by the fill's own ranking (per type in `order`), each on
        whole nodes (its last round's GPUs when still free). Returns the new placements, which
        become leases as `place`'s do."""
        ranking, left = self._ranking, self._left
        if ranking is None or ranking[4] != self.version or not self.unplaced:
            return []
        prio, deficit, alloc, ok = ranking[0], ranking[1], ranking[2], ranking[3]
        taken = {jid for p in self.previous.values() for jid in p.jobs}
        taken.update(jid for u in self.unplaced for jid in u.jobs)
        keys, added = self.keys, []
        for j in order:
            free = left.get(j)
            room = free.total() if free is not None else 0
            if free is None or not room:
                continue
            name = self.types[j]
            topology = self.topology(name)
            ranked = np.lexsort((-alloc[:, j], -deficit[:, j], -prio[:, j]))
            visit = ok[:, j] & (prio[:, j] > 0) if fifo else ok[:, j]
            for i in ranked[visit[ranked]].tolist():
                key = keys[i]
                size = scale[key]
                if size > room or not taken.isdisjoint(key):
                    continue
                if self.tenant_of is not None and not self._within_quota(key, j, size):
                    continue
                before = self._leases.get(key)
                gpus: tuple[Gpu, ...] | None
                if (
                    before is not None
                    and before.worker_type == name
                    and free.all_free(before.gpus)
                    and (size == 1 or topology.consolidated(before.gpus))
                ):
                    gpus = before.gpus  # a lease extension: no restart
                else:
                    gpus = free.fit(size, topology.groups)
                if gpus is None and size > topology.per_node and spread_ok is not None and spread_ok(key, j):
                    gpus = free.spread(size)
                    if gpus is not None and not topology.consolidated(gpus):
                        self.spread.add(key)
                if gpus is None:
                    continue
                free.claim(gpus)
                room -= size
                taken.update(key)
                added.append(Placement(key, name, gpus))
                if not room:
                    break
        self.previous.update((p.jobs, p) for p in added)
        return added


class _WholePass:
    """One worker type's whole-gang placement pass (`RoundMechanism._place_whole`)."""

    def __init__(
        self,
        mech: RoundMechanism,
        j: int,
        free: FreeGpus,
        scale: Mapping[Key, int],
        spread_ok: SpreadOk | None,
        here: Sequence[Key],
    ):
        self.mech, self.j, self.free, self.scale, self.spread_ok = mech, j, free, scale, spread_ok
        self.name = mech.types[j]
        self.topology = mech.topology(self.name)
        self._here = here
        self._position: dict[Key, int] | None = None
        self.held: dict[Key, Placement] = {}  # placed so far on this type, in placement order
        self.evicted: dict[Key, Key] = {}  # entry -> the gang that took its GPUs

    @property
    def position(self) -> dict[Key, int]:
        """Entry -> its place in the chosen order (built only when a gang needs room)."""
        if self._position is None:
            self._position = {key: i for i, key in enumerate(self._here)}
        return self._position

    def may_spread(self, key: Key) -> bool:
        return self.scale[key] > self.topology.per_node and self.spread_ok is not None and self.spread_ok(key, self.j)

    def keep_lease(self, key: Key) -> bool:
        """Claim last round's GPUs if they are free and still a placement allowed here."""
        before = self.mech.previous.get(key)
        if before is None or before.worker_type != self.name or key in self.evicted:
            return False
        gpus = before.gpus
        if not self.free.all_free(gpus):
            return False
        first = gpus[0][0]
        if any(node != first for node, _ in gpus) and not self.topology.consolidated(gpus):
            if not self.may_spread(key):
                return False  # e.g. a split gang from a state planned before whole gangs
            self.mech.spread.add(key)
        self.free.claim(gpus)
        self.held[key] = before
        return True

    def keep_single_leases(self, keys: Sequence[Key]) -> list[Key]:
        """`keep_lease` for single-GPU entries (most entries, every round), inlined; the rest."""
        previous, name, lists, held, evicted = self.mech.previous, self.name, self.free.free, self.held, self.evicted
        fresh = []
        for key in keys:
            before = previous.get(key)
            if before is not None and before.worker_type == name and key not in evicted:
                node, g = before.gpus[0]
                on_node = lists.get(node)
                if on_node is not None and g in on_node:
                    on_node.remove(g)
                    held[key] = before
                    continue
            fresh.append(key)
        return fresh

    def place(self, key: Key) -> list[Key]:
        """Place a new gang (or record it unplaced); returns the entries it moved."""
        size, free, topology, mech = self.scale[key], self.free, self.topology, self.mech
        gpus = free.fit(size, topology.groups)
        moved: list[Key] = []
        if gpus is None:
            moved = mech._room(key, self.j, size, free, topology, self.held, self.scale, self.position)
            for victim in moved:
                free.release(self.held.pop(victim).gpus)
                mech.spread.discard(victim)
                self.evicted[victim] = key
            gpus = free.fit(size, topology.groups)
        if gpus is None and self.may_spread(key):
            gpus = free.spread(size)
            if gpus is not None and not topology.consolidated(gpus):
                mech.spread.add(key)
        if gpus is None:
            mech.unplaced.append(
                Unplaced(key, self.name, size, mech._why(self.name, size, topology, key, self.evicted))
            )
            return moved
        free.claim(gpus)
        self.held[key] = Placement(key, self.name, gpus)
        return moved


def migration_pins(
    chosen: Sequence[tuple[Key, int]],
    held: Mapping[Key, int],
    lag: Mapping[Key, np.ndarray],
    cost: Mapping[Key, np.ndarray],
) -> dict[Key, int]:
    """Entries to keep on the worker type they held, instead of the one the greedy fill chose.

    `held`: entry -> the type it ran on last round; `lag`: entry -> per type, seconds it is
    behind its allocation (`RoundMechanism.lag`); `cost`: entry -> per type, its restart cost
    in seconds there. An entry the fill chose on a type `new` other than the type `old` it
    held would move; the move's gain is the deficit it recovers by moving,
    `max(0, lag[new] - lag[old])`, and it moves only when that gain is at least its restart
    cost on `new`: an entry whose gain is below its cost is pinned to `old`. An entry the
    fill leaves out is preempted (time-sharing), not moved, and is not pinned. With every
    cost 0 no entry is pinned (today's mechanism).
    """
    pins: dict[Key, int] = {}
    for key, new in chosen:
        old = held.get(key)
        if old is None or old == new:
            continue
        gain = max(0.0, float(lag[key][new] - lag[key][old]))
        if gain < float(cost[key][new]):
            pins[key] = old
    return pins


class FreeGpus:
    """The GPUs of one worker type still free during one placement pass; node order and
    GPU order as in the cluster spec, so choices do not depend on claim history."""

    def __init__(self, nodes: Sequence[str], per_node: int):
        self.nodes = nodes
        self.per_node = per_node
        self.free = {node: list(range(per_node)) for node in nodes}

    def total(self) -> int:
        return sum(len(gpus) for gpus in self.free.values())

    def release(self, gpus: Sequence[Gpu]) -> None:
        """Give back claimed GPUs (each list stays in GPU order)."""
        for node, g in gpus:
            bisect.insort(self.free[node], g)

    def all_free(self, gpus: Sequence[Gpu]) -> bool:
        return all(g in self.free.get(node, ()) for node, g in gpus)

    def claim(self, gpus: Sequence[Gpu]) -> None:
        for node, g in gpus:
            self.free[node].remove(g)

    def take_one(self) -> tuple[Gpu]:
        """`gang(1)`, claimed: the first free GPU of the fullest node with one free."""
        free, best, most = self.free, None, 0
        for node in self.nodes:
            n = len(free[node])
            if n >= 1 and (best is None or n < most):
                best, most = node, n
        if best is None:
            return self.gang(1)  # type: ignore[return-value]  # raises: no GPU is free
        return ((best, free[best].pop(0)),)

    def gang(self, size: int) -> tuple[Gpu, ...]:
        """`size` free GPUs: on one node if possible (the fullest that fits), else fewest nodes."""
        free = self.free
        best = None
        for node in self.nodes:  # best fit keeps big holes for big gangs; first node wins ties
            n = len(free[node])
            if n >= size and (best is None or n < len(free[best])):
                best = node
        if best is not None:
            return tuple((best, g) for g in free[best][:size])
        gpus: list[Gpu] = []
        for node in sorted(self.nodes, key=lambda n: -len(free[n])):
            for g in free[node]:
                if len(gpus) == size:
                    break
                gpus.append((node, g))
        if len(gpus) < size:
            raise RuntimeError(f"internal error: {size} GPUs selected but only {len(gpus)} free")
        return tuple(gpus)

    def fit(self, size: int, groups: Sequence[Sequence[str]]) -> tuple[Gpu, ...] | None:
        """`size` free GPUs, not claimed, never split more than needed: on one node when the
        gang fits one (the fullest that has room), else on the fewest nodes of one group
        (`Topology.groups`, the fullest group that has room); None where there is none."""
        free = self.free
        if size <= self.per_node:
            best = None
            for node in self.nodes:  # best fit keeps big holes for big gangs; first node wins ties
                n = len(free[node])
                if n >= size and (best is None or n < len(free[best])):
                    best = node
            return None if best is None else tuple((best, g) for g in free[best][:size])
        need = math.ceil(size / self.per_node)
        chosen: list[str] | None = None
        fullest = 0
        for group in groups:
            nodes = sorted((n for n in group if free.get(n)), key=lambda n: -len(free[n]))
            if len(nodes) < need or sum(len(free[n]) for n in nodes[:need]) < size:
                continue
            spare = sum(len(free[n]) for n in nodes)
            if chosen is None or spare < fullest:
                chosen, fullest = nodes, spare
        if chosen is None:
            return None
        # the emptiest nodes whole, then the fullest node that holds the rest
        gpus = [(n, g) for n in chosen[: need - 1] for g in free[n]]
        rest = size - len(gpus)
        last = min((n for n in chosen[need - 1 :] if len(free[n]) >= rest), key=lambda n: len(free[n]))
        return tuple(gpus + [(last, g) for g in free[last][:rest]])

    def spread(self, size: int) -> tuple[Gpu, ...] | None:
        """`size` free GPUs on as few nodes as the free ones allow, any nodes (emptiest first),
        not claimed; None when fewer are free."""
        gpus: list[Gpu] = []
        for node in sorted(self.nodes, key=lambda n: -len(self.free[n])):
            gpus += [(node, g) for g in self.free[node][: size - len(gpus)]]
            if len(gpus) == size:
                return tuple(gpus)
        return None
