"""Max-min fairness by progressive filling (spec §4.3.4), single- and multi-level.

Plain LAS only pins down the bottleneck jobs; water-filling keeps raising the
others until each is blocked, which gives the unique max-min fair levels.
Each iteration:
  1. LP: raise every active job's normalised throughput n_i = y_i / prop_i
     together (z <= k_i (n_i - L_i), k_i = s_i / w'_i) while frozen jobs keep
     theirs; L_i += z / k_i.
  2. freeze the jobs that cannot grow further: those whose raise row has a
     positive dual (exact, see below), or — with `gavel_compat` — Gavel's MILP
     (HiGHS): which jobs can still exceed σ·L_i while all keep their levels.
     The MILP needed thousands of branch-and-bound nodes at 2048 jobs; the
     dual test is free.
Hierarchical (multi-level) fairness: each entity e has a weight W_e and a
policy inside it — `fairness` splits W_e over its unfrozen jobs by weight,
`fifo` gives all of W_e to its oldest unfrozen job. The weights come from the
cluster's tenants when it declares any (an entity not listed, and the jobs with
no entity together, have the default tenant weight), `entity_weights` overriding
them entity by entity; without tenants, from `entity_weights` alone.
Tenant quotas are rows of the space (space.py), as in every unpacked LP policy.
Identical jobs share a class (same levels by symmetry of the unique answer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from planner.errors import InputError, SolverError
from planner.policies.base import Allocation
from planner.policies.lp.highs import DEFAULT_METHOD, load_matrix, row_duals, run_loaded, solve_matrix
from planner.policies.lp.matrix import INF, MatrixLP
from planner.policies.max_min_fairness import seen_throughput
from planner.policies.no_jobs import unless_no_jobs
from planner.policies.problem import Problem
from planner.policies.space import Space, build_space

SIGMA = 1.0001
MAX_ITERATIONS = 200
DUAL_THRESHOLD = 1e-6  # duals sum to 1; interior-point noise on slack rows is ~1e-9
LEVEL_SLACK = 1e-5  # well below sigma - 1 = 1e-4, the resolution of the freeze test


ENTITY_POLICIES = ("fairness", "fifo")  # what one entity's jobs share by


@dataclass
class Solved:
    """The latest raise LP's answer: the allocation water-filling returns."""

    space: Space
    x: np.ndarray
    z: np.ndarray  # pair cells
    build_s: float


@dataclass
class Filling:
    """Where progressive filling stands."""

    frozen: np.ndarray  # (n,) jobs that cannot rise any more
    level: np.ndarray  # (n,) normalised throughput reached
    iterations: int = 0
    solve_s: float = 0.0
    last: Solved | None = None
    stopped: str | None = None  # why filling ended early (a failed solve)


@dataclass
class WaterFilling:
    perf_aware: bool = True
    packed: bool = False
    aggregate: bool = True
    method: str = DEFAULT_METHOD
    entity_weights: dict[str, float] | None = None  # hierarchical when set
    entity_policies: dict[str, str] = field(default_factory=dict)  # entity -> fairness | fifo
    gavel_compat: bool = False  # freeze test by Gavel's MILP instead of LP duals
    fifo: bool = False

    @property
    def name(self) -> str:
        base = "max_min_fairness_water_filling"
        if self.packed:
            return base + "_packed"
        return base + ("_perf" if self.perf_aware else "")

    def _entity_weights(self, problem: Problem) -> dict[str | None, float] | None:
        """Entity -> weight W_e of every entity among the jobs (None: single-level). From the
        cluster's tenants when it declares any, `entity_weights` (--entity-weights) overriding
        per entity; else `entity_weights` alone, which must then name every job's entity."""
        from_cluster = problem.tenant_weights(self.entity_weights)
        if from_cluster is not None:
            return from_cluster
        if self.entity_weights is None:
            return None
        for i, entity in enumerate(problem.entity):
            if entity is None:
                raise InputError(
                    f"job {problem.job_ids[i]!r} has no entity; hierarchical fairness needs an entity for every job",
                    field="entity",
                )
            if entity not in self.entity_weights:
                raise InputError(
                    f"entity {entity!r} (job {problem.job_ids[i]!r}) has no weight in the entity weights",
                    field="entity",
                )
        given = self.entity_weights
        return {e: given[e] for e in dict.fromkeys(problem.entity) if e is not None}

    def _check_policies(self) -> None:
        for entity, policy in self.entity_policies.items():
            if policy not in ENTITY_POLICIES:
                raise InputError(
                    f"entity {entity!r}: policy must be 'fairness' or 'fifo', got {policy!r}", field="entity_policies"
                )

    def _weights(
        self, problem: Problem, frozen: np.ndarray, entities: dict[str | None, tuple[float, list[int]]] | None
    ) -> np.ndarray:
        """Effective weights w'_i of this iteration (0 for frozen jobs); `entities`: each
        entity's weight W_e and members (None: single-level)."""
        if entities is None:
            return np.where(frozen, 0.0, problem.weight)
        weights = np.zeros(problem.n_jobs)
        for entity, (total, everyone) in entities.items():
            members = [i for i in everyone if not frozen[i]]
            if not members:
                continue
            if entity is not None and self.entity_policies.get(entity, "fairness") == "fifo":
                oldest = max(members, key=lambda i: problem.time_since_start[i])  # ties: input order
                weights[oldest] = total
            else:
                share = sum(problem.weight[i] for i in members)
                for i in members:
                    weights[i] = total * problem.weight[i] / share
        return weights

    def _class_keys(self, problem: Problem, hierarchical: bool) -> tuple[np.ndarray, ...]:
        keys = [problem.weight]
        if hierarchical:
            codes: dict = {}
            per_job = []
            for i, entity in enumerate(problem.entity):
                fifo_entity = entity is not None and self.entity_policies.get(entity, "fairness") == "fifo"
                per_job.append(codes.setdefault((entity, i if fifo_entity else None), len(codes)))
            keys.append(np.array(per_job, dtype=float))
        return tuple(keys)

    @unless_no_jobs
    def allocate(self, problem: Problem) -> Allocation:
        by_entity = self._entity_weights(problem)
        entities = None
        if by_entity is not None:
            self._check_policies()
            entities = {e: (w, [i for i, job in enumerate(problem.entity) if job == e]) for e, w in by_entity.items()}
        seen, prop = seen_throughput(problem, self.perf_aware or self.packed)
        norm = 1.0 / prop  # n_i = y_i / prop_i
        keys = self._class_keys(problem, entities is not None)
        fill = Filling(frozen=np.zeros(problem.n_jobs, dtype=bool), level=np.zeros(problem.n_jobs))
        big_m = None
        while fill.iterations < MAX_ITERATIONS:
            fill.iterations += 1
            weights = self._weights(problem, fill.frozen, entities)
            active = (~fill.frozen) & (weights > 0)
            if not active.any():
                break
            started = time.perf_counter()
            space = build_space(
                problem,
                seen,
                *keys,
                fill.frozen.astype(float),
                packed=self.packed,
                aggregate=self.aggregate,
                keep_barred=True,  # frozen at level 0 by the first raise
            )
            norm_c = norm[space.classes.representative]
            if big_m is None:
                big_m = largest_level(space, norm_c) * 2.0 + 1.0
            floor_c = fill.level[space.classes.representative]  # the levels every class keeps
            duals = self._raise(problem, space, norm_c, floor_c, weights, active, fill, started)
            if duals is None:
                break
            if not self.gavel_compat and freeze_blocked(space, active, duals, fill):
                continue
            if not self._freeze_by_milp(space, norm_c, floor_c, active, big_m, fill):
                break
        return self._allocation(problem, fill)

    def _raise(
        self,
        problem: Problem,
        space: Space,
        norm_c: np.ndarray,
        floor_c: np.ndarray,
        weights: np.ndarray,
        active: np.ndarray,
        fill: Filling,
        started: float,
    ) -> np.ndarray | None:
        """Step 1: solve the raise LP and lift the active jobs' levels; returns the raise rows'
        |duals| (one per active class), or None when the LP failed after an earlier success."""
        classes = space.classes
        rep = classes.representative
        raised = active[rep]
        k_c = problem.scale[rep[raised]] / weights[rep[raised]]
        lp, column, raise_rows = raise_lp(space, norm_c, floor_c, raised, k_c)
        build_s = time.perf_counter() - started
        try:
            begun = time.perf_counter()
            solver = load_matrix(lp, method=self.method, policy=self.name)
            result = run_loaded(solver, policy=self.name)
            assert result is not None
        except SolverError as exc:
            if fill.last is None:
                raise
            fill.stopped = str(exc)  # spec §4.3.4: a failed LP keeps the previous allocation
            return None
        values, z_star = result
        fill.solve_s += time.perf_counter() - begun
        x, z = space.read(values, column)
        fill.last = Solved(space, x, z, build_s)
        grown = fill.level[rep] + z_star * weights[rep] / problem.scale[rep]
        members = raised[classes.index]
        fill.level[members] = grown[classes.index][members]
        return row_duals(solver, raise_rows)

    def _freeze_by_milp(
        self, space: Space, norm_c: np.ndarray, floor_c: np.ndarray, active: np.ndarray, big_m: float, fill: Filling
    ) -> bool:
        """Step 2 as Gavel does it: freeze the active classes the MILP cannot lift by σ above
        their new level; False when filling is over (none frozen, or the MILP failed)."""
        classes = space.classes
        rep = classes.representative
        active_c = active[rep]
        milp, column, grow = freeze_milp(space, norm_c, floor_c, fill.level[rep], active_c, big_m)
        try:
            values, _, solve_s = solve_matrix(milp, method="mip", policy=self.name)
        except SolverError:
            try:  # the all-zero point is feasible: a failure here is HiGHS presolve
                values, _, solve_s = solve_matrix(milp, method="mip-no-presolve", policy=self.name)
            except SolverError as exc:
                fill.stopped = str(exc)
                return False
        fill.solve_s += solve_s
        assert fill.last is not None
        # The pair cells reported are those of the latest solve, this MILP's point, while x
        # stays the raise LP's: kept for identical results, but the two can together exceed a
        # job's time or a type's GPUs (docs/lp_route.md, "Kept as they were").
        fill.last.z = space.read(values, column)[1]
        stuck = active_c & (values[column[grow]] < 0.5)
        fill.frozen[stuck[classes.index]] = True
        return bool(stuck.any())

    def _allocation(self, problem: Problem, fill: Filling) -> Allocation:
        last = fill.last
        assert last is not None  # the first LP either succeeds or raises
        return last.space.allocation(
            problem,
            last.x,
            last.z,
            float(fill.level.min()),
            method=self.method,
            build_s=last.build_s,
            solve_s=fill.solve_s,
            iterations=fill.iterations,
            levels=fill.level.tolist(),
            **({"stopped_early": fill.stopped} if fill.stopped else {}),
        )


def freeze_blocked(space: Space, active: np.ndarray, duals: np.ndarray, fill: Filling) -> bool:
    """Step 2 by duals — exact, and one LP cheaper than the MILP: a job whose raise row has a
    positive dual cannot rise above its new level while the others keep theirs (the optimal
    dual weights make Σ λ_i k_i (n_i - L_i) <= z* for every x). False if none is blocked."""
    classes = space.classes
    blocked = np.zeros(classes.n, dtype=bool)
    blocked[np.flatnonzero(active[classes.representative])[duals > DUAL_THRESHOLD]] = True
    fill.frozen[blocked[classes.index]] = True
    return bool(blocked.any())


def raise_lp(
    space: Space, norm_c: np.ndarray, floor_c: np.ndarray, raised: np.ndarray, k_c: np.ndarray
) -> tuple[MatrixLP, np.ndarray, np.ndarray]:
    """maximise z  s.t.  n_c >= L_c (less a hair) for every class, and for the raised ones
    z - k_c (n_c - L_c) <= 0; returns (LP, column of each variable, the raise rows)."""
    lp = space.builder()
    z = int(lp.variables(1, 0.0, INF)[0])
    levels = space.throughput_rows(norm_c)
    lp.add(space.head)
    # levels reached so far, less a hair: the LP solution is only accurate to ~1e-9
    lp.add(levels.bounded(floor_c * (1 - LEVEL_SLACK), INF))
    lp.add(space.tail)
    lifts = levels.select(raised).scaled(k_c).scaled(-1.0).led_by(z, 1.0)
    rows = lp.add(lifts.bounded(-INF, 0.0 - k_c * floor_c[raised]))
    cost = np.zeros(lp.n_vars)
    cost[z] = 1.0
    matrix, column = lp.build(cost, maximize=True)
    return matrix, column, rows


def freeze_milp(
    space: Space,
    norm_c: np.ndarray,
    floor_c: np.ndarray,
    level_c: np.ndarray,
    active_c: np.ndarray,
    big_m: float,
) -> tuple[MatrixLP, np.ndarray, np.ndarray]:
    """Gavel's freeze test: maximise Σ grow_c over binaries, grow_c = 1 => n_c >= σ L_c (the
    levels just raised), while every class keeps the floor of the raise LP; inactive
    classes' binaries are held at 0. Returns (MILP, column of each variable, the binaries' ids)."""
    lp = space.builder()
    grow = lp.variables(len(active_c), 0.0, np.where(active_c, 1.0, 0.0), integer=True)
    levels = space.throughput_rows(norm_c)
    lp.add(space.head)
    lp.add(levels.bounded(floor_c * (1 - LEVEL_SLACK), INF))
    lp.add(space.tail)
    # σL - n_c - M (1 - grow_c) <= 0. Gavel also forces grow = 1 when n > σL - ε; maximising
    # Σ grow makes that row redundant, and dropping it keeps the MILP feasible (all zeros)
    # whatever the rounding of the LP levels.
    tests = levels.select(active_c).scaled(-1.0).led_by(grow[active_c], big_m)
    lp.add(tests.bounded(-INF, 0.0 - (SIGMA * level_c[active_c] - big_m)))
    cost = np.zeros(lp.n_vars)
    cost[grow[active_c]] = 1.0
    matrix, column = lp.build(cost, maximize=True)
    return matrix, column, grow


def largest_level(space: Space, norm_c: np.ndarray) -> float:
    """The largest normalised throughput any class could reach (the MILP's big M)."""
    best = 0.0
    pairs_of_class = space.pairs_of_class or {}
    coef = space.pairs.coef if space.pairs is not None else []
    for c in range(space.classes.n):
        value = float(np.max(space.throughput[c]) * norm_c[c])
        for n in pairs_of_class.get(c, []):
            value = max(value, float(coef[n] * norm_c[c]))
        best = max(best, value)
    return best
