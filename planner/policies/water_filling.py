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
`fifo` gives all of W_e to its oldest unfrozen job.
Identical jobs share a class (same levels by symmetry of the unique answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyomo.environ as pyo

from planner.errors import InputError, SolverError
from planner.policies.base import Allocation, empty_allocation
from planner.policies.lp.pyomo_model import build_pyomo_space as build_space
from planner.policies.lp.pyomo_model import read_pyomo_allocation as read_allocation
from planner.policies.max_min_fairness import seen_throughput
from planner.policies.problem import Problem

SIGMA = 1.0001
MAX_ITERATIONS = 200
DUAL_THRESHOLD = 1e-6  # duals sum to 1; interior-point noise on slack rows is ~1e-9
LEVEL_SLACK = 1e-5  # well below sigma - 1 = 1e-4, the resolution of the freeze test


@dataclass
class WaterFilling:
    perf_aware: bool = True
    packed: bool = False
    aggregate: bool = True
    method: str = "ipm"
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

    def _check_entities(self, problem: Problem) -> None:
        if self.entity_weights is None:
            return
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
        for entity, policy in self.entity_policies.items():
            if policy not in ("fairness", "fifo"):
                raise InputError(
                    f"entity {entity!r}: policy must be 'fairness' or 'fifo', got {policy!r}", field="entity_policies"
                )

    def _weights(self, problem: Problem, frozen: np.ndarray) -> np.ndarray:
        """Effective weights w'_i of this iteration (0 for frozen jobs)."""
        if self.entity_weights is None:
            return np.where(frozen, 0.0, problem.weight)
        weights = np.zeros(problem.n_jobs)
        for entity, total in self.entity_weights.items():
            members = [i for i, e in enumerate(problem.entity) if e == entity and not frozen[i]]
            if not members:
                continue
            if self.entity_policies.get(entity, "fairness") == "fifo":
                oldest = max(members, key=lambda i: problem.time_since_start[i])  # ties: input order
                weights[oldest] = total
            else:
                share = sum(problem.weight[i] for i in members)
                for i in members:
                    weights[i] = total * problem.weight[i] / share
        return weights

    def _class_keys(self, problem: Problem) -> tuple[np.ndarray, ...]:
        keys = [problem.weight]
        if self.entity_weights is not None:
            codes: dict = {}
            per_job = []
            for i, entity in enumerate(problem.entity):
                fifo_entity = self.entity_policies.get(entity, "fairness") == "fifo"
                per_job.append(codes.setdefault((entity, i if fifo_entity else None), len(codes)))
            keys.append(np.array(per_job, dtype=float))
        return tuple(keys)

    def allocate(self, problem: Problem) -> Allocation:
        if problem.n_jobs == 0:
            return empty_allocation(problem)
        self._check_entities(problem)
        seen, prop = seen_throughput(problem, self.perf_aware or self.packed)
        norm = 1.0 / prop  # n_i = y_i / prop_i
        n = problem.n_jobs
        frozen = np.zeros(n, dtype=bool)
        level = np.zeros(n)
        keys = self._class_keys(problem)
        last = None
        total_solve = 0.0
        iterations = 0
        big_m = None
        stopped = None
        while iterations < MAX_ITERATIONS:
            iterations += 1
            weights = self._weights(problem, frozen)
            active = (~frozen) & (weights > 0)
            if not active.any():
                break
            lp, classes = build_space(
                problem, seen, *keys, frozen.astype(float), packed=self.packed, aggregate=self.aggregate
            )
            rep = classes.representative
            model = lp.model
            levels = [lp.throughput_expr(c, norm[i]) for c, i in enumerate(rep)]
            if big_m is None:
                big_m = _big_m(lp, norm[rep]) * 2.0 + 1.0
            model.z = pyo.Var(bounds=(0.0, None))
            model.raise_rows = pyo.ConstraintList()
            raised = []  # (class, its raise row)
            for c, i in enumerate(rep):
                # levels reached so far, less a hair: the LP solution is only accurate to ~1e-9
                model.extra.add(levels[c] >= float(level[i]) * (1 - LEVEL_SLACK))
                if active[i]:
                    k_i = problem.scale[i] / weights[i]
                    raised.append((c, model.raise_rows.add(model.z <= k_i * (levels[c] - float(level[i])))))
            try:
                x, z_star, solve_s = lp.solve(model.z, method=self.method, policy=self.name)
            except SolverError as exc:
                if last is None:
                    raise
                stopped = str(exc)  # spec §4.3.4: a failed LP keeps the previous allocation
                break
            total_solve += solve_s
            last = (lp, classes, x)
            for c, i in enumerate(rep):
                if active[i]:
                    level[classes.index == c] = level[i] + z_star * weights[i] / problem.scale[i]

            if not self.gavel_compat:
                # Exact and one LP cheaper than the MILP: a job whose raise row has a positive
                # dual cannot rise above its new level while the others keep theirs (the
                # optimal dual weights make Σ λ_i k_i (n_i - L_i) <= z* for every x).
                duals = lp.duals([row for _, row in raised])
                blocked = [c for (c, _), d in zip(raised, duals) if d > DUAL_THRESHOLD]
                if blocked:
                    for c in blocked:
                        frozen[classes.index == c] = True
                    continue
            # MILP (Gavel): who can still grow by a factor sigma?
            model.del_component(model.raise_rows)
            model.del_component(model.z)
            model.grow = pyo.Var(range(classes.n), domain=pyo.Binary)
            model.milp = pyo.ConstraintList()
            for c, i in enumerate(rep):
                if active[i]:
                    # grow = 1 => n >= σL. Gavel also forces grow = 1 when n > σL - ε; maximising
                    # Σ grow makes that row redundant, and dropping it keeps the MILP feasible
                    # (all zeros) whatever the rounding of the LP levels.
                    model.milp.add(big_m * (1 - model.grow[c]) >= SIGMA * level[i] - levels[c])
                else:
                    model.grow[c].fix(0)
            count = pyo.quicksum(model.grow[c] for c in range(classes.n))
            try:
                _, _, solve_s = lp.solve(count, method="mip", policy=self.name)
            except SolverError:
                try:  # the all-zero point is feasible: a failure here is HiGHS presolve
                    _, _, solve_s = lp.solve(count, method="mip-no-presolve", policy=self.name)
                except SolverError as exc:
                    stopped = str(exc)
                    break
            total_solve += solve_s
            newly = 0
            for c, i in enumerate(rep):
                if active[i] and (model.grow[c].value or 0.0) < 0.5:
                    frozen[classes.index == c] = True
                    newly += 1
            if newly == 0:
                break
        lp, classes, x = last
        return read_allocation(
            lp,
            classes,
            problem,
            x,
            float(level.min()),
            total_solve,
            self.method,
            iterations=iterations,
            levels=level.tolist(),
            **({"stopped_early": stopped} if stopped else {}),
        )


def _big_m(lp, norm_rep: np.ndarray) -> float:
    """M = the largest normalised throughput any job could reach."""
    best = 0.0
    for c in range(lp.k):
        value = float(np.max(lp.throughput[c]) * norm_rep[c])
        if hasattr(lp, "pairs_of_row"):
            for n in lp.pairs_of_row.get(c, []):
                value = max(value, float(lp.pair_coef[n] * norm_rep[c]))
        best = max(best, value)
    return best
