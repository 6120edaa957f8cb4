"""Any `MatrixLP` as a Pyomo model: for inspection, .lp/.mps files and other solvers.

Policies build their LPs as arrays and hand them to HiGHS directly; Pyomo
stays the modelling interface through this export:

    model = to_pyomo(lp)
    model.write("las.lp")                                  # or .mps
    pyo.SolverFactory("appsi_highs").solve(model)          # any Pyomo solver
    model.x[3].value, pyo.value(model.objective)

Column n of the LP is `model.x[n]`, row r is `model.row[r]` (an equality where
its bounds agree), integrality becomes the Integers domain.
"""

from __future__ import annotations

import pyomo.environ as pyo
from pyomo.core.expr.numeric_expr import LinearExpression

from planner.policies.lp.matrix import MatrixLP


def _bound(value: float) -> float | None:
    return None if abs(value) == float("inf") else float(value)


def to_pyomo(lp: MatrixLP) -> pyo.ConcreteModel:
    """A Pyomo model with the same columns, rows, bounds, integrality and objective as `lp`."""
    model = pyo.ConcreteModel()
    columns = range(lp.n_cols)
    integer = lp.integer.tolist() if lp.integer is not None else [False] * lp.n_cols
    lower, upper = lp.lower.tolist(), lp.upper.tolist()
    model.x = pyo.Var(
        columns,
        domain=lambda _, n: pyo.Integers if integer[n] else pyo.Reals,
        bounds=lambda _, n: (_bound(lower[n]), _bound(upper[n])),
    )
    start, index, value = lp.row_start.tolist(), lp.row_index.tolist(), lp.row_value.tolist()
    row_lower, row_upper = lp.row_lower.tolist(), lp.row_upper.tolist()

    def row(_, r: int):
        body = LinearExpression(
            constant=0.0,
            linear_coefs=value[start[r] : start[r + 1]],
            linear_vars=[model.x[n] for n in index[start[r] : start[r + 1]]],
        )
        low, high = _bound(row_lower[r]), _bound(row_upper[r])
        return body == low if low is not None and low == high else (low, body, high)

    model.row = pyo.Constraint(range(lp.n_rows), rule=row)
    cost = lp.cost.tolist()
    used = [n for n in columns if cost[n] != 0.0]
    model.objective = pyo.Objective(
        expr=LinearExpression(
            constant=0.0, linear_coefs=[cost[n] for n in used], linear_vars=[model.x[n] for n in used]
        ),
        sense=pyo.maximize if lp.maximize else pyo.minimize,
    )
    return model
