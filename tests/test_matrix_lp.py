"""The array route of the LP policies: the builder's rules, the HiGHS adapter, and
`to_pyomo()` — every policy's LP exported to Pyomo and solved there reaches the
objective HiGHS reaches on the arrays."""

from __future__ import annotations

import copy

import numpy as np
import pyomo.environ as pyo
import pytest
from conftest import SPEC_T, SPEC_TYPES, make_problem
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pyomo.contrib.appsi.base import TerminationCondition
from pyomo.contrib.appsi.solvers import Highs as PyomoHighs

from planner.errors import SolverError
from planner.formats.table import JobType, ThroughputTable
from planner.policies import make_policy
from planner.policies.lp import highs
from planner.policies.lp.matrix import INF, LPBuilder, MatrixLP, Rows
from planner.policies.lp.pyomo_export import to_pyomo


def handmade_lp() -> MatrixLP:
    """max x0 + 2 x1  s.t.  x0 + x1 <= 2,  x0 - x1 == 0,  x in [0, 1], x1 integral."""
    return MatrixLP(
        cost=np.array([1.0, 2.0]),
        lower=np.zeros(2),
        upper=np.ones(2),
        row_start=np.array([0, 2, 4], dtype=np.int32),
        row_index=np.array([0, 1, 0, 1], dtype=np.int32),
        row_value=np.array([1.0, 1.0, 1.0, -1.0]),
        row_lower=np.array([-INF, 0.0]),
        row_upper=np.array([2.0, 0.0]),
        integer=np.array([False, True]),
    )


def test_columns_in_order_of_first_appearance_then_unused_by_id():
    lp = LPBuilder()
    a, b, c, d = lp.variables(4)
    lp.add(Rows.from_terms([[(c, 1.0), (a, 2.0)], [(b, 1.0), (c, 3.0)]], [-INF, -INF], [1.0, 1.0]))
    matrix, column = lp.build(np.array([0.0, 0.0, 0.0, 5.0]), maximize=True)
    assert column.tolist() == [1, 2, 0, 3]  # c first, then a, b; d is in no row: last
    assert matrix.row_index.tolist() == [0, 1, 2, 0]
    assert matrix.cost.tolist() == [0.0, 0.0, 0.0, 5.0]


def test_repeated_variable_in_a_row_is_one_entry_summed_where_it_first_appears():
    rows = Rows.from_terms([[(2, 1.5), (0, 1.0), (2, -0.5)]], [0.0], [1.0])
    assert rows.index.tolist() == [2, 0] and rows.value.tolist() == [1.0, 1.0]


def test_fixed_variable_keeps_its_column_but_moves_into_the_bounds():
    lp = LPBuilder()
    x = lp.variables(1)
    held = lp.variables(1, 2.0, 2.0)  # a constant 2
    lp.add(Rows.from_terms([[(held[0], 3.0), (x[0], 1.0)]], [-INF], [10.0]))
    matrix, column = lp.build(np.array([1.0, 7.0]), maximize=True)
    assert column.tolist() == [1, 0]  # numbered where it first appears
    assert matrix.row_index.tolist() == [column[x[0]]] and matrix.row_upper.tolist() == [4.0]
    assert matrix.cost[column[held[0]]] == 0.0


def test_row_blocks_compose():
    rows = Rows.from_terms([[(0, 2.0)], [], [(1, 1.0), (2, 4.0)]], [0.0] * 3, [1.0] * 3)
    led = rows.scaled(np.array([1.0, 5.0, -1.0])).led_by(np.array([7, 8, 9]), 0.5)
    assert led.index.tolist() == [7, 0, 8, 9, 1, 2]
    assert led.value.tolist() == [0.5, 2.0, 0.5, 0.5, -1.0, -4.0]
    picked = led.select(np.array([False, True, True])).bounded(-INF, 3.0)
    assert picked.lengths.tolist() == [1, 3] and picked.upper.tolist() == [3.0, 3.0]


def test_to_pyomo_keeps_bounds_equalities_and_integrality():
    model = to_pyomo(handmade_lp())
    assert model.x[1].domain is pyo.Integers and model.x[0].bounds == (0.0, 1.0)
    assert model.row[1].equality and model.row[0].lower is None and pyo.value(model.row[0].upper) == 2.0
    PyomoHighs().solve(model)
    assert pyo.value(model.objective) == pytest.approx(3.0)  # x = (1, 1)


def test_infeasible_matrix_raises_solver_error():
    lp = handmade_lp()
    lp.row_lower[0] = 3.0  # x0 + x1 >= 3 with x <= 1
    with pytest.raises(SolverError, match="test: HiGHS ended 'Infeasible', not optimal"):
        highs.solve_matrix(lp, method="mip", policy="test")


def test_malformed_matrix_is_a_solver_error():
    lp = handmade_lp()
    lp.row_index = np.array([0, 5, 0, 1], dtype=np.int32)  # no column 5
    with pytest.raises(SolverError, match="HiGHS refused the model"):
        highs.solve_matrix(lp, method="ipm", policy="test")


@pytest.mark.parametrize("field", ["lower", "upper", "row_upper", "row_value", "row_start"])
def test_an_array_shorter_than_the_lp_says_is_refused_not_read_past(field):
    """HiGHS's array overload of passModel checks no lengths: a short array would be read past its end."""
    lp = handmade_lp()
    setattr(lp, field, getattr(lp, field)[:-1].copy())
    highs.forget_answers()
    with pytest.raises(SolverError, match="HiGHS refused the model: its arrays disagree in length"):
        highs.solve_matrix(lp, method="ipm", policy="test")


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="unknown solver method"):
        highs.highs_options("barrier")


def test_spec_values_on_the_array_route():
    # Spec §11.1, cluster (1, 2, 3): LAS-perf level 48/31 (tests/test_policies.py has the rest)
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


# --- every policy's LP through to_pyomo() ------------------------------------------------


def solved_lps(allocate) -> list[MatrixLP]:
    """The LPs `allocate()` hands to HiGHS, as they were when loaded."""
    seen: list[MatrixLP] = []
    original = highs.pass_model

    def recording(solver, lp: MatrixLP):
        seen.append(copy.deepcopy(lp))
        return original(solver, lp)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(highs, "pass_model", recording)
        highs.forget_answers()  # an LP an earlier example solved would not reach HiGHS again
        allocate()
    return seen


def direct_objective(lp: MatrixLP) -> float | None:
    method = "mip" if lp.integer is not None else "simplex"
    result = highs.run_loaded(highs.load_matrix(lp, method=method, policy="test"), policy="test", allow_infeasible=True)
    return None if result is None else result[1]


def pyomo_objective(lp: MatrixLP) -> float | None:
    solver = PyomoHighs()
    solver.config.load_solution = False
    results = solver.solve(to_pyomo(lp))
    if results.termination_condition in (
        TerminationCondition.infeasible,
        TerminationCondition.infeasibleOrUnbounded,
    ):
        return None
    assert results.termination_condition == TerminationCondition.optimal
    return float(results.best_feasible_objective)


def assert_pyomo_agrees(policy, problem) -> None:
    lps = solved_lps(lambda: policy.allocate(problem))
    assert lps, "the policy solved no LP"
    for lp in lps:
        direct, through_pyomo = direct_objective(lp), pyomo_objective(lp)
        assert (direct is None) == (through_pyomo is None)
        if direct is not None:
            assert through_pyomo == pytest.approx(direct, rel=1e-7, abs=1e-7)


@st.composite
def problems(draw):
    n = draw(st.integers(1, 10))
    m = draw(st.integers(1, 4))
    kinds = draw(st.integers(1, 4))  # few distinct rows, so classes have several members
    rows = [[draw(st.sampled_from([0.0, 0.5, 1.0, 2.5, 4.0])) for _ in range(m)] for _ in range(kinds)]
    for row in rows:
        row[draw(st.integers(0, m - 1))] = draw(st.sampled_from([1.0, 3.0]))  # runs somewhere
    pick = [draw(st.integers(0, kinds - 1)) for _ in range(n)]
    capacity = [draw(st.integers(1, 6)) for _ in range(m)]
    scale = [draw(st.sampled_from([1, 1, 2, 4])) for _ in range(n)]
    weight = [draw(st.sampled_from([1.0, 1.0, 2.0])) for _ in range(n)]
    remaining = [draw(st.sampled_from([100.0, 400.0, 2500.0])) for _ in range(n)]
    problem = make_problem([rows[p] for p in pick], capacity, scale=scale, weight=weight, remaining=remaining)
    problem.time_since_start[:] = [draw(st.sampled_from([0.0, 50.0, 400.0])) for _ in range(n)]
    problem.slo_left_s = np.array([draw(st.sampled_from([np.nan, 5.0, 5000.0])) for _ in range(n)])
    return problem


PLAIN_POLICIES = [
    ("max_min_fairness", {}),
    ("max_min_fairness_perf", {"method": "simplex"}),
    ("max_min_fairness_water_filling_perf", {}),
    ("max_min_fairness_water_filling", {"gavel_compat": True}),  # freeze test by MILP
    ("min_total_duration_perf", {}),
    ("min_total_duration_perf", {"gavel_compat": True}),  # bisection
    ("max_sum_throughput_perf", {}),
    ("max_sum_throughput_normalized_by_cost_perf_SLOs", {}),
    ("finish_time_fairness_perf", {}),
]


@settings(max_examples=40, deadline=None)
@given(problems(), st.sampled_from(PLAIN_POLICIES), st.booleans())
def test_policy_lp_through_pyomo_reaches_the_same_objective(problem, policy, aggregate):
    name, options = policy
    assert_pyomo_agrees(make_policy(name, aggregate=aggregate, **options), problem)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.data())
def test_allox_lp_through_pyomo_reaches_the_same_objective(n, gpus, data):
    tput = [[data.draw(st.sampled_from([1.0, 2.0, 4.0])) for _ in range(gpus)] for _ in range(n)]
    remaining = [data.draw(st.sampled_from([10.0, 20.0, 30.0])) for _ in range(n)]
    assert_pyomo_agrees(make_policy("allox"), make_problem(tput, [1] * gpus, remaining=remaining))


@st.composite
def packed_problems(draw):
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
    for row, jt in zip(tput, jobs):
        row[0] = solo[names[0], jt]  # runs somewhere
    capacity = [draw(st.integers(1, 4)) for _ in range(m)]
    weight = [draw(st.sampled_from([1.0, 1.0, 2.0])) for _ in range(n)]
    problem = make_problem(tput, capacity, scale=[jt.scale_factor for jt in jobs], weight=weight, names=names)
    problem.job_types, problem.table = jobs, table
    return problem


PACKED_POLICIES = [
    ("max_min_fairness_packed", {}),
    ("max_min_fairness_water_filling_packed", {"gavel_compat": True}),
    ("min_total_duration_packed", {}),
    ("finish_time_fairness_packed", {}),
    ("max_sum_throughput_normalized_by_cost_packed_SLOs", {}),
]


@settings(max_examples=40, deadline=None)
@given(packed_problems(), st.sampled_from(PACKED_POLICIES), st.booleans())
def test_packed_policy_lp_through_pyomo_reaches_the_same_objective(problem, policy, aggregate):
    name, options = policy
    assert_pyomo_agrees(make_policy(name, aggregate=aggregate, **options), problem)


def test_an_lp_solved_before_gets_the_same_answer_without_a_solve():
    problem = make_problem([[1.0, 2.0], [3.0, 1.0], [1.0, 2.0]], [1, 2])
    policy = make_policy("max_min_fairness_perf")
    highs.forget_answers()
    loaded: list[MatrixLP] = []
    original = highs.pass_model
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(highs, "pass_model", lambda solver, lp: loaded.append(lp) or original(solver, lp))
        first = policy.allocate(problem)
        again = policy.allocate(problem)
    assert len(loaded) == 1  # the second LP was the same: no solve
    assert again.x.tobytes() == first.x.tobytes() and again.objective == first.objective


def test_interior_point_that_stops_short_is_finished_by_crossover(monkeypatch):
    """A degenerate LP on which HiGHS's interior point method alone ends 'Unknown' (found by
    hypothesis in test_mechanism): the policy still returns the optimal allocation."""
    tput = [
        [0, 1, 0],
        [2, 1, 0],
        [1, 0, 0],
        [1, 0, 0],
        [1, 0, 0],
        [1, 0, 0],
        [1, 0, 0],
        [0, 1, 0],
        [1, 3, 0],
        [1, 0, 0],
    ]
    problem = make_problem(tput, capacity=[3.0, 3.0, 3.0])
    vertex = make_policy("max_sum_throughput_perf", method="simplex").allocate(problem)
    with monkeypatch.context() as patched:
        patched.setattr(highs, "_option", lambda solver, name: "on")  # as if crossover were not off: no retry
        with pytest.raises(SolverError, match="Unknown"):
            make_policy("max_sum_throughput_perf", method="ipm").allocate(problem)
    ipm = make_policy("max_sum_throughput_perf", method="ipm").allocate(problem)
    assert ipm.objective == pytest.approx(vertex.objective, rel=1e-7)
    assert (ipm.x.sum(axis=1) <= 1 + 1e-7).all() and (ipm.x.sum(axis=0) <= 3 + 1e-7).all()
    assert highs.highs_options("ipm")["run_crossover"] == "off"  # the shared solver keeps its options
    assert highs._option(highs._solver(highs.highs_options("ipm")), "run_crossover") == "off"
