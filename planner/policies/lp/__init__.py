"""Linear programs of the policies: built as arrays, solved by HiGHS, exported to Pyomo.

classes.py        jobs grouped into classes of identical jobs (the LP's rows)
matrix.py         MatrixLP, Rows and LPBuilder: the one formulation (docs/lp_route.md)
highs.py          HiGHS options, load/solve, duals, status -> SolverError
dense_ipm.py      a compiled interior point for small LPs (--solver-method compiled-ipm)
pyomo_export.py   to_pyomo(lp): the same LP as a Pyomo model
"""

from __future__ import annotations

from planner.policies.lp.highs import DEFAULT_METHOD, LP_METHODS

__all__ = ["DEFAULT_METHOD", "LP_METHODS"]
