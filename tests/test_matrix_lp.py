"""The direct HiGHS route for max-min fairness against the Pyomo formulation."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SPEC_T, SPEC_TYPES, make_problem
from planner.errors import InputError, SolverError
from planner.policies import make_policy
from planner.policies.matrix_lp import INF, MatrixLP, solve_matrix


@st.composite
def problems(draw):
    n = draw(st.integers(1, 12))
    m = draw(st.integers(1, 4))
    kinds = draw(st.integers(1, 4))  # few distinct rows, so classes have several members
    rows = [[draw(st.sampled_from([0.0, 0.5, 1.0, 2.5, 4.0])) for _ in range(m)] for _ in range(kinds)]
    pick = [draw(st.integers(0, kinds - 1)) for _ in range(n)]
    capacity = [draw(st.integers(1, 6)) for _ in range(m)]
    scale = [draw(st.sampled_from([1, 1, 2, 4])) for _ in range(n)]
    weight = [draw(st.sampled_from([1.0, 1.0, 2.0])) for _ in range(n)]
    return make_problem([rows[p] for p in pick], capacity, scale=scale, weight=weight)


@settings(max_examples=60, deadline=None)
@given(problems(), st.sampled_from(["max_min_fairness", "max_min_fairness_perf"]), st.booleans(),
       st.sampled_from(["ipm", "simplex"]))
def test_direct_route_equals_pyomo(problem, name, aggregate, method):
    direct = make_policy(name, aggregate=aggregate, method=method).allocate(problem)
    pyomo = make_policy(name, aggregate=aggregate, method=method, lp_backend="pyomo").allocate(problem)
    assert direct.objective == pytest.approx(pyomo.objective, rel=1e-9, abs=1e-9)
    # Same matrix in the same row and column order: HiGHS returns the same point.
    np.testing.assert_allclose(direct.x, pyomo.x, atol=1e-9)
    assert direct.n_classes == pyomo.n_classes


def test_direct_route_spec_values():
    # Spec §11.1, cluster (1, 2, 3): LAS-perf level 48/31 (as the Pyomo route, tests/test_policies.py)
    problem = make_problem(SPEC_T, [1, 2, 3], names=SPEC_TYPES)
    alloc = make_policy("max_min_fairness_perf").allocate(problem)
    assert alloc.objective == pytest.approx(48 / 31, rel=1e-6)
    assert alloc.solver == "highs-ipm"
    assert (alloc.x.sum(axis=1) <= 1 + 1e-9).all()
    assert (alloc.x.sum(axis=0) <= np.array([1, 2, 3]) + 1e-9).all()


def test_job_that_runs_nowhere_gets_nothing():
    problem = make_problem([[0.0, 0.0], [1.0, 2.0]], [1, 1])
    alloc = make_policy("max_min_fairness_perf").allocate(problem)
    assert alloc.objective == pytest.approx(0.0, abs=1e-9)
    assert alloc.x[0].sum() == 0.0


def test_infeasible_matrix_raises_solver_error():
    # x <= 1 and x >= 2 cannot both hold
    lp = MatrixLP(cost=np.array([1.0]), lower=np.array([0.0]), upper=np.array([1.0]),
                  row_start=np.array([0, 1], dtype=np.int32), row_index=np.array([0], dtype=np.int32),
                  row_value=np.array([1.0]), row_lower=np.array([2.0]), row_upper=np.array([INF]))
    with pytest.raises(SolverError, match="not optimal"):
        solve_matrix(lp, method="ipm", policy="test")


def test_no_solver_banner_on_stdout():
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, '.');"
            "from conftest import make_problem; from planner.policies import make_policy;"
            "make_policy('max_min_fairness_perf').allocate(make_problem([[1.0, 2.0]], [1, 1]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).parent))
    assert out.stdout == ""


def test_unknown_backend_is_an_input_error():
    with pytest.raises(InputError, match="unknown LP backend"):
        make_policy("max_min_fairness_perf", lp_backend="gurobi")
