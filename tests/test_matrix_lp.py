"""The direct HiGHS route for max-min fairness against the Pyomo formulation."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SPEC_T, SPEC_TYPES, make_problem
from hypothesis import assume, given, settings
from hypothesis import strategies as st

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
@given(
    problems(),
    st.sampled_from(["max_min_fairness", "max_min_fairness_perf"]),
    st.booleans(),
    st.sampled_from(["ipm", "simplex"]),
)
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
    lp = MatrixLP(
        cost=np.array([1.0]),
        lower=np.array([0.0]),
        upper=np.array([1.0]),
        row_start=np.array([0, 1], dtype=np.int32),
        row_index=np.array([0], dtype=np.int32),
        row_value=np.array([1.0]),
        row_lower=np.array([2.0]),
        row_upper=np.array([INF]),
    )
    with pytest.raises(SolverError, match="not optimal"):
        solve_matrix(lp, method="ipm", policy="test")


def test_no_solver_banner_on_stdout():
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, '.');"
        "from conftest import make_problem; from planner.policies import make_policy;"
        "make_policy('max_min_fairness_perf').allocate(make_problem([[1.0, 2.0]], [1, 1]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(__import__("pathlib").Path(__file__).parent),
    )
    assert out.stdout == ""


def test_unknown_backend_is_an_input_error():
    with pytest.raises(InputError, match="unknown LP backend"):
        make_policy("max_min_fairness_perf", lp_backend="gurobi")


@st.composite
def packed_problems(draw):
    from planner.formats.table import JobType, ThroughputTable

    m = draw(st.integers(1, 3))
    names = [f"w{j}" for j in range(m)]
    kinds = draw(
        st.lists(
            st.sampled_from(
                [
                    JobType("A", None, 1),
                    JobType("B", None, 1),
                    JobType("C", None, 1),
                    JobType("A", None, 2),
                    JobType("B", None, 2),
                ]
            ),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    records, solo = [], {}
    for w in names:
        for jt in kinds:
            solo[w, jt] = draw(st.sampled_from([1.0, 2.0, 3.0]))
            records.append(dict(worker_type=w, model=jt.model, scale_factor=jt.scale_factor, throughput=solo[w, jt]))
        for a_i, a in enumerate(kinds):
            for b in kinds[a_i:]:
                if a.scale_factor != b.scale_factor or not draw(st.booleans()):
                    continue
                for own, partner in ((a, b), (b, a)) if a != b else ((a, a),):
                    records.append(
                        dict(
                            worker_type=w,
                            model=own.model,
                            scale_factor=own.scale_factor,
                            partner_model=partner.model,
                            throughput=solo[w, own] * draw(st.sampled_from([0.4, 0.6, 0.9])),
                        )
                    )
    table = ThroughputTable.from_records(records)
    assume(table.has_pairs())  # without pair rows a packed policy refuses the input (tested elsewhere)
    n = draw(st.integers(1, 8))
    jobs = [draw(st.sampled_from(kinds)) for _ in range(n)]
    # A zero where the table has a rate: the job cannot run there (too few GPUs, say), so some
    # pair cells lose their mirror and are fixed to 0.
    tput = [[0.0 if draw(st.integers(0, 4)) == 0 else solo[w, jt] for w in names] for jt in jobs]
    capacity = [draw(st.integers(1, 4)) for _ in range(m)]
    weight = [draw(st.sampled_from([1.0, 1.0, 2.0])) for _ in range(n)]
    problem = make_problem(tput, capacity, scale=[jt.scale_factor for jt in jobs], weight=weight, names=names)
    problem.job_types, problem.table = jobs, table
    return problem


@settings(max_examples=100, deadline=None)
@given(packed_problems(), st.booleans(), st.sampled_from(["ipm", "simplex"]))
def test_packed_direct_route_equals_pyomo(problem, aggregate, method):
    direct = make_policy("max_min_fairness_packed", aggregate=aggregate, method=method).allocate(problem)
    pyomo = make_policy("max_min_fairness_packed", aggregate=aggregate, method=method, lp_backend="pyomo").allocate(
        problem
    )
    assert direct.objective == pytest.approx(pyomo.objective, rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(direct.x, pyomo.x, atol=1e-9)
    assert direct.pair_x.keys() == pyomo.pair_x.keys()
    for pair, row in pyomo.pair_x.items():
        np.testing.assert_allclose(direct.pair_x[pair], row, atol=1e-9)
    assert direct.n_classes == pyomo.n_classes


@settings(max_examples=60, deadline=None)
@given(problems(), st.sampled_from(["finish_time_fairness", "finish_time_fairness_perf"]), st.booleans(), st.data())
def test_ftf_direct_route_equals_pyomo(problem, name, aggregate, data):
    # FTF bisects with warm-started dual simplex: same matrix, same order, same probes -> same point
    assume((problem.throughput > 0).any(axis=1).all())  # a job that can run nowhere has no finish time
    problem.time_since_start[:] = [data.draw(st.sampled_from([0.0, 50.0, 400.0])) for _ in problem.job_ids]
    direct = make_policy(name, aggregate=aggregate)
    pyomo = make_policy(name, aggregate=aggregate, lp_backend="pyomo")
    for _ in range(2):  # the second call uses the history the first one kept
        a, b = direct.allocate(problem), pyomo.allocate(problem)
        assert a.objective == pytest.approx(b.objective, rel=1e-12)
        np.testing.assert_allclose(a.x, b.x, atol=1e-9)
        assert a.info["probes"] == b.info["probes"] and a.n_classes == b.n_classes
        problem.remaining = problem.remaining * 0.5
