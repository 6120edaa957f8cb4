"""A small interior-point LP solver, compiled with numba, for the simulator's many tiny LPs.

HiGHS's interior point spends 0.6-1.5 ms on each LAS LP of a simulation (tens of columns),
almost all of it fixed cost around 10-20 iterations. The same primal-dual method, compiled,
on arrays this small, takes a fraction of that. Like HiGHS's interior point without
crossover, it stops in the middle of the optimal face (near its analytic centre), not at a
vertex, which is what keeps schedules close to the reference (`--solver-method ipm`).

Form solved: minimise c'x subject to A x <= b (each row bounded above only) and
lower <= x <= upper, each bound finite or not (a column with neither is free). Method:
Mehrotra's predictor-corrector on the normal equations (A_B Θ⁻¹ A_B' + S Y⁻¹) dy = ..., over
the bounded columns B, with one dense Cholesky factor per iteration (the rows number tens);
the free columns (LAS's t) enter through their Schur complement, so they need no artificial
bounds. A pivot that vanishes as the iterates converge (a row whose every column sits at a
bound) is skipped, which sets that row's step to zero (Wright, "Modified Cholesky
factorizations in interior-point algorithms for linear programming", 1999).

Written in plain loops: numba compiles these without BLAS (its matrix products need SciPy).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from planner.policies.lp.matrix import MatrixLP

OPTIMAL, NOT_CONVERGED, BREAKDOWN = 0, 1, 2
STEP_TO_BOUNDARY = 0.995  # fraction of the way to the nearest bound a step may go
TINY_PIVOT = 1e-30  # relative to the largest diagonal entry: such a pivot is skipped
SKIPPED = 1e128  # a skipped pivot's value: its component of the solution becomes 0
LOST = 1e3  # an iterate this much worse than the best one so far ends the iterations


def _cholesky(M: np.ndarray) -> bool:
    """In place: M's lower triangle becomes L with L L' = M, tiny pivots skipped. False when a
    pivot is negative (M is not positive semi-definite) or not a number."""
    m = M.shape[0]
    largest = 0.0
    for j in range(m):
        largest = max(largest, M[j, j])
    for j in range(m):
        # right-looking: column j is final here; update the columns after it. Zeros are skipped,
        # so with the sparse rows first (see `try_solve`) the work is about linear in the rows.
        d = M[j, j]
        if not d > TINY_PIVOT * largest:
            if d < -1e-8 * largest or d != d:
                return False
            M[j, j] = SKIPPED
            for i in range(j + 1, m):
                M[i, j] = 0.0
            continue
        d = math.sqrt(d)
        M[j, j] = d
        for i in range(j + 1, m):
            M[i, j] /= d
        for k in range(j + 1, m):
            lk = M[k, j]
            if lk != 0.0:
                for i in range(k, m):
                    M[i, k] -= M[i, j] * lk
    return True


def _solve_factored(L: np.ndarray, r: np.ndarray) -> np.ndarray:
    """x with L L' x = r."""
    m = L.shape[0]
    z = r.copy()
    for k in range(m):  # L z = r, by columns, skipping zeros
        z[k] /= L[k, k]
        zk = z[k]
        if zk != 0.0:
            for i in range(k + 1, m):
                z[i] -= L[i, k] * zk
    for i in range(m - 1, -1, -1):  # L' x = z, by rows of L, skipping zeros
        z[i] /= L[i, i]
        zi = z[i]
        if zi != 0.0:
            for k in range(i):
                if L[i, k] != 0.0:
                    z[k] -= L[i, k] * zi
    return z


def _matvec(start: np.ndarray, index: np.ndarray, value: np.ndarray, x: np.ndarray, m: int) -> np.ndarray:
    """A x, A given by rows."""
    out = np.zeros(m)
    for i in range(m):
        for e in range(start[i], start[i + 1]):
            out[i] += value[e] * x[index[e]]
    return out


def _rmatvec(start: np.ndarray, index: np.ndarray, value: np.ndarray, y: np.ndarray, n: int) -> np.ndarray:
    """A' y, A given by rows."""
    out = np.zeros(n)
    for i in range(len(start) - 1):
        for e in range(start[i], start[i + 1]):
            out[index[e]] += value[e] * y[i]
    return out


def _by_columns(start, index, value, n):
    """A's entries grouped by column: (column starts, row of each entry, value of each entry)."""
    m = len(start) - 1
    count = np.zeros(n + 1, dtype=np.int64)
    for e in range(start[m]):
        count[index[e] + 1] += 1
    col_start = np.cumsum(count)
    fill = col_start[:-1].copy()
    rows = np.empty(start[m], dtype=np.int64)
    vals = np.empty(start[m])
    for i in range(m):
        for e in range(start[i], start[i + 1]):
            j = index[e]
            rows[fill[j]] = i
            vals[fill[j]] = value[e]
            fill[j] += 1
    return col_start, rows, vals


def _sparse_rows_first(start, index, value, b):
    """The rows reordered by their number of entries, fewest first (ties keep their order):
    the dense rows (LAS's capacity rows) then come last, and the Cholesky factor stays sparse."""
    m = len(b)
    counts = start[1:] - start[:-1]
    order = np.argsort(counts, kind="mergesort")
    new_start = np.zeros(m + 1, dtype=np.int64)
    new_index = np.empty(len(index), dtype=np.int64)
    new_value = np.empty(len(value))
    new_b = np.empty(m)
    for r in range(m):
        i = order[r]
        new_b[r] = b[i]
        new_start[r + 1] = new_start[r] + counts[i]
        for e in range(counts[i]):
            new_index[new_start[r] + e] = index[start[i] + e]
            new_value[new_start[r] + e] = value[start[i] + e]
    return new_start, new_index, new_value, new_b


def _normal_matrix(cs, cr, cv, free, theta, D, m):
    """A_B Θ⁻¹ A_B' + D over the bounded columns B (lower triangle only)."""
    M = np.zeros((m, m))
    for j in range(len(theta)):
        if free[j]:
            continue
        inv = 1.0 / theta[j]
        for e in range(cs[j], cs[j + 1]):
            i, a = cr[e], cv[e] * inv
            for f in range(cs[j], cs[j + 1]):
                if cr[f] <= i:
                    M[i, cr[f]] += a * cv[f]
    for i in range(m):
        M[i, i] += D[i]
    return M


def _factor(cs, cr, cv, free, free_cols, theta, D, m):
    """Factors for the Newton systems of one iteration: (ok, L of the normal matrix, the free
    columns' M⁻¹ A_F, L of their Schur complement A_F' M⁻¹ A_F)."""
    M = _normal_matrix(cs, cr, cv, free, theta, D, m)
    n_free = len(free_cols)
    MinvAF = np.zeros((m, n_free))
    S = np.zeros((n_free, n_free))
    if not _cholesky(M):
        return False, M, MinvAF, S
    for a in range(n_free):
        j = free_cols[a]
        col = np.zeros(m)
        for e in range(cs[j], cs[j + 1]):
            col[cr[e]] = cv[e]
        MinvAF[:, a] = _solve_factored(M, col)
        for b_ in range(a + 1):
            S[a, b_] = S[b_, a] = _column_dot(cs, cr, cv, free_cols[b_], MinvAF[:, a])
    return _cholesky(S), M, MinvAF, S


def _column_dot(cs, cr, cv, j, v):
    """A[:, j] · v."""
    total = 0.0
    for e in range(cs[j], cs[j + 1]):
        total += cv[e] * v[cr[e]]
    return total


def _newton(cs, cr, cv, free, free_cols, theta, L, MinvAF, S, h, k):
    """(dx, dy) solving A'dy + Θ dx = h, A dx - D dy = k with the iteration's factors."""
    n, m = len(theta), L.shape[0]
    q = -k
    for j in range(n):
        if not free[j]:
            for e in range(cs[j], cs[j + 1]):
                q[cr[e]] += cv[e] * h[j] / theta[j]
    dy = _solve_factored(L, q)
    n_free = len(free_cols)
    dx = np.zeros(n)
    if n_free:  # (A_F' M⁻¹ A_F) dx_F = h_F - A_F' M⁻¹ q, then dy = M⁻¹ (q + A_F dx_F)
        rhs = np.zeros(n_free)
        for a in range(n_free):
            j = free_cols[a]
            rhs[a] = h[j]
            for e in range(cs[j], cs[j + 1]):
                rhs[a] -= cv[e] * dy[cr[e]]
        dxf = _solve_factored(S, rhs)
        for a in range(n_free):
            dx[free_cols[a]] = dxf[a]
            for i in range(m):
                dy[i] += MinvAF[i, a] * dxf[a]
    for j in range(n):
        if not free[j]:
            v = h[j]
            for e in range(cs[j], cs[j + 1]):
                v -= cv[e] * dy[cr[e]]
            dx[j] = v / theta[j]
    return dx, dy


def _inside_bounds(lower, upper, has_l, has_u):
    """A starting point inside every bound: the middle of a box, one unit inside a one-sided bound."""
    x = np.zeros(len(lower))
    for j in range(len(lower)):
        if has_l[j] and has_u[j]:
            x[j] = 0.5 * (lower[j] + upper[j])
        elif has_l[j]:
            x[j] = lower[j] + 1.0
        elif has_u[j]:
            x[j] = upper[j] - 1.0
    return x


def _error(rp, b, rd, primal, dual, norm_c):
    """The largest of the relative primal infeasibility (each row against its own bound, so that
    one large bound does not loosen the others), dual infeasibility and duality gap; infinite
    when any is not a number."""
    if np.isnan(primal - dual) or np.isnan(rp).any() or np.isnan(rd).any():  # (max() would drop a nan)
        return np.inf
    error = abs(primal - dual) / (1.0 + abs(primal))
    for i in range(len(rp)):
        error = max(error, abs(rp[i]) / (1.0 + abs(b[i])))
    for j in range(len(rd)):
        error = max(error, abs(rd[j]) / norm_c)
    return error


def _step_lengths(s, y, g, w, zl, zu, dx, dy, ds, dzl, dzu, has_l, has_u):
    """(primal, dual) step lengths in [0, 1] that keep every slack and dual at or above 0."""
    ap, ad = 1.0, 1.0
    for i in range(len(s)):
        if ds[i] < 0.0:
            ap = min(ap, -s[i] / ds[i])
        if dy[i] < 0.0:
            ad = min(ad, -y[i] / dy[i])
    for j in range(len(g)):
        if has_l[j]:
            if dx[j] < 0.0:
                ap = min(ap, -g[j] / dx[j])
            if dzl[j] < 0.0:
                ad = min(ad, -zl[j] / dzl[j])
        if has_u[j]:
            if dx[j] > 0.0:
                ap = min(ap, w[j] / dx[j])
            if dzu[j] < 0.0:
                ad = min(ad, -zu[j] / dzu[j])
    return ap, ad


def _direction(cs, cr, cv, free, free_cols, theta, L, MinvAF, S, rp, rd, rs, rl, ru, s, y, g, w, zl, zu, has_l, has_u):
    """The Newton direction (dx, dy, ds, dzl, dzu) for complementarity right-hand sides rs
    (s·y), rl (g·zl) and ru (w·zu), with the iteration's factors."""
    n, m = len(theta), len(s)
    h = np.empty(n)
    for j in range(n):
        v = -rd[j]
        if has_l[j]:
            v += rl[j] / g[j]
        if has_u[j]:
            v -= ru[j] / w[j]
        h[j] = v
    k = np.empty(m)
    for i in range(m):
        k[i] = rp[i] - rs[i] / y[i]
    dx, dy = _newton(cs, cr, cv, free, free_cols, theta, L, MinvAF, S, h, k)
    ds = np.empty(m)
    for i in range(m):
        ds[i] = (rs[i] - s[i] * dy[i]) / y[i]
    dzl = np.zeros(n)
    dzu = np.zeros(n)
    for j in range(n):
        if has_l[j]:
            dzl[j] = (rl[j] - zl[j] * dx[j]) / g[j]
        if has_u[j]:
            dzu[j] = (ru[j] + zu[j] * dx[j]) / w[j]
    return dx, dy, ds, dzl, dzu


def _iterate_terms(x, s, y, zl, zu, b, c, lower, upper, has_l, has_u, g, w, theta, D, rs, rl, ru):
    """Fill the bounds' slacks g and w, Θ, D = S/Y and the predictor's targets (rs, rl, ru: the
    complementarity products, negated); return (complementarity, primal and dual objective)."""
    complementarity, primal, dual = 0.0, 0.0, 0.0
    for i in range(len(s)):
        complementarity += s[i] * y[i]
        dual -= b[i] * y[i]
        D[i] = s[i] / y[i]
        rs[i] = -s[i] * y[i]
    for j in range(len(x)):
        primal += c[j] * x[j]
        theta[j] = 0.0
        if has_l[j]:
            g[j] = x[j] - lower[j]
            complementarity += g[j] * zl[j]
            dual += lower[j] * zl[j]
            theta[j] += zl[j] / g[j]
            rl[j] = -g[j] * zl[j]
        if has_u[j]:
            w[j] = upper[j] - x[j]
            complementarity += w[j] * zu[j]
            dual -= upper[j] * zu[j]
            theta[j] += zu[j] / w[j]
            ru[j] = -w[j] * zu[j]
    return complementarity, primal, dual


def _corrector_targets(s, y, g, w, zl, zu, dx, dy, ds, dzl, dzu, ap, ad, mu, n_pairs, has_l, has_u, rs, rl, ru):
    """Mehrotra's corrector right-hand sides, in place: centring towards sigma·mu, where sigma
    is (what the predictor's step would leave of mu)³, with the predictor's second-order term."""
    affine = 0.0
    for i in range(len(s)):
        affine += (s[i] + ap * ds[i]) * (y[i] + ad * dy[i])
    for j in range(len(g)):
        if has_l[j]:
            affine += (g[j] + ap * dx[j]) * (zl[j] + ad * dzl[j])
        if has_u[j]:
            affine += (w[j] - ap * dx[j]) * (zu[j] + ad * dzu[j])
    target = (affine / n_pairs / mu) ** 3 * mu
    for i in range(len(s)):
        rs[i] = target - s[i] * y[i] - ds[i] * dy[i]
    for j in range(len(g)):
        if has_l[j]:
            rl[j] = target - g[j] * zl[j] - dx[j] * dzl[j]
        if has_u[j]:
            ru[j] = target - w[j] * zu[j] + dx[j] * dzu[j]


def solve(start, index, value, b, c, lower, upper, tol, accept, max_iter):
    """(status, x, iterations) for min c'x s.t. A x <= b, lower <= x <= upper; A's rows given
    as in a CSR matrix (row starts, column indices, values). Optimal: the relative primal and
    dual infeasibility and duality gap are within `tol`, or within `accept` when no further
    step keeps its accuracy."""
    m, n = len(b), len(c)
    start, index, value, b = _sparse_rows_first(start, index, value, b)
    cs, cr, cv = _by_columns(start, index, value, n)
    has_l = np.isfinite(lower)
    has_u = np.isfinite(upper)
    free = ~has_l & ~has_u
    free_cols = np.flatnonzero(free)
    x = _inside_bounds(lower, upper, has_l, has_u)
    s = np.maximum(b - _matvec(start, index, value, x, m), 1.0)
    y = np.ones(m)
    zl = np.where(has_l, 1.0, 0.0)
    zu = np.where(has_u, 1.0, 0.0)
    n_pairs = m + int(has_l.sum()) + int(has_u.sum())
    norm_c = 1.0 + (np.max(np.abs(c)) if n else 0.0)
    g, w, theta, D = np.ones(n), np.ones(n), np.zeros(n), np.empty(m)
    rs, rl, ru = np.empty(m), np.zeros(n), np.zeros(n)
    best_error, best_x = np.inf, x.copy()
    it = 0
    for it in range(max_iter):
        rp = b - _matvec(start, index, value, x, m) - s
        rd = c + _rmatvec(start, index, value, y, n) - zl + zu
        complementarity, primal, dual = _iterate_terms(
            x, s, y, zl, zu, b, c, lower, upper, has_l, has_u, g, w, theta, D, rs, rl, ru
        )
        mu = complementarity / n_pairs
        error = _error(rp, b, rd, primal, dual, norm_c)
        if error <= tol:
            return OPTIMAL, x, it
        if error == np.inf:
            break  # not a number: an LP without an optimum drives the iterates there
        if error < best_error:
            best_error, best_x = error, x.copy()
        elif error > LOST * best_error:
            break  # the last step went wrong: the normal equations lost their accuracy
        ok, L, MinvAF, S = _factor(cs, cr, cv, free, free_cols, theta, D, m)
        if not ok:
            break
        # predictor: the affine direction (complementarity targets 0)
        dx, dy, ds, dzl, dzu = _direction(
            cs, cr, cv, free, free_cols, theta, L, MinvAF, S, rp, rd, rs, rl, ru, s, y, g, w, zl, zu, has_l, has_u
        )
        ap, ad = _step_lengths(s, y, g, w, zl, zu, dx, dy, ds, dzl, dzu, has_l, has_u)
        _corrector_targets(s, y, g, w, zl, zu, dx, dy, ds, dzl, dzu, ap, ad, mu, n_pairs, has_l, has_u, rs, rl, ru)
        dx, dy, ds, dzl, dzu = _direction(
            cs, cr, cv, free, free_cols, theta, L, MinvAF, S, rp, rd, rs, rl, ru, s, y, g, w, zl, zu, has_l, has_u
        )
        ap, ad = _step_lengths(s, y, g, w, zl, zu, dx, dy, ds, dzl, dzu, has_l, has_u)
        ap, ad = STEP_TO_BOUNDARY * ap, STEP_TO_BOUNDARY * ad
        s += ap * ds
        y += ad * dy
        x += ap * dx
        zl += ad * dzl
        zu += ad * dzu
    # Near the end the normal matrix's entries span ~18 orders of magnitude, and a step can
    # lose its accuracy before `tol` is met: the best iterate counts if it is within `accept`.
    if best_error <= accept:
        return OPTIMAL, best_x, it
    return NOT_CONVERGED, best_x, it


def _compile(cache: bool) -> None:
    """Replace this module's functions by their numba-compiled versions: numba compiles a call
    between compiled functions only when the callee is compiled too, and it resolves the callee
    by its global name."""
    import numba

    # every function above this one: `solve` and what it calls
    names = [
        name for name, value in globals().items() if callable(value) and getattr(value, "__module__", None) == __name__
    ]
    names = names[: names.index("_compile")]
    for name in names:
        # error_model numpy: a division by zero gives inf or nan, as in numpy, instead of raising
        # (an LP without an optimum drives the iterates there; the iterations then stop)
        globals()[name] = numba.njit(cache=cache, nogil=True, error_model="numpy")(globals()[name])


TOLERANCE = 1e-8  # relative primal and dual infeasibility and duality gap at the end
ACCEPTED = 1e-7  # ... or this, when the iterations cannot go further (#31: objectives within 1e-6)
MAX_ITERATIONS = 40  # these LPs take 8-20; one that needs more goes to HiGHS instead
MAX_ROWS = 400  # the normal matrix is dense: rows² memory, rows³ work per iteration
_OFF: list[str] = []  # why the compiled solver is off in this process


@functools.cache
def _kernel() -> Callable | None:
    """`solve`, compiled (once per machine, a few seconds; then loaded from numba's cache),
    tried on a two-column LP; None without numba or when compiling fails (HiGHS then solves)."""
    try:
        try:
            _compile(cache=True)
        except RuntimeError:  # no writable cache location at all: compile in every process instead
            _compile(cache=False)
        kernel = globals()["solve"]
        trial = kernel(
            np.array([0, 2], dtype=np.int64), np.array([0, 1], dtype=np.int64), np.array([1.0, 1.0]),
            np.array([1.0]), np.array([0.0, -1.0]), np.array([0.0, -np.inf]), np.array([1.0, np.inf]),
            TOLERANCE, ACCEPTED, MAX_ITERATIONS,
        )  # fmt: skip
    except Exception as exc:  # numba absent, or one whose errors vary by release: HiGHS solves
        _OFF.append(f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__)
        return None
    if trial[0] != OPTIMAL:
        _OFF.append("it failed its trial LP")
        return None
    return kernel


def available() -> bool:
    """Whether the compiled solver runs in this process (numba imports and compiled it)."""
    return _kernel() is not None


def try_solve(lp: MatrixLP) -> tuple[np.ndarray, float] | None:
    """(values, objective) of `lp`, or None when this solver does not take it: an LP with
    integer columns, a fixed column, no rows, a row bounded below or not bounded above, more than
    MAX_ROWS rows, numba missing, or no convergence within MAX_ITERATIONS (the caller then asks HiGHS). An LP with
    no optimum (infeasible, unbounded) never converges here, so HiGHS is the one to say so."""
    if lp.integer is not None or not 0 < lp.n_rows <= MAX_ROWS or lp.n_cols == 0:
        return None
    if np.any(lp.lower >= lp.upper):  # a fixed column (or an empty range) has no interior to start in
        return None
    if not (np.all(np.isneginf(lp.row_lower)) and np.all(np.isfinite(lp.row_upper))):
        return None
    kernel = _kernel()
    if kernel is None:
        return None
    cost = -lp.cost if lp.maximize else lp.cost
    status, x, _ = kernel(
        lp.row_start.astype(np.int64), lp.row_index.astype(np.int64), lp.row_value.astype(float, copy=False),
        lp.row_upper.astype(float, copy=False), cost.astype(float, copy=False),
        lp.lower.astype(float, copy=False), lp.upper.astype(float, copy=False), TOLERANCE, ACCEPTED, MAX_ITERATIONS,
    )  # fmt: skip
    if status != OPTIMAL or not np.all(np.isfinite(x)):
        return None
    return x, float(np.dot(lp.cost, x))


def why_off() -> str:
    """Why the compiled solver does not run here (after `available()` said False)."""
    return _OFF[0] if _OFF else "numba is not installed"
