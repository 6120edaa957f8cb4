"""Classes of identical jobs: the rows of an allocation LP.

Identical jobs (same throughput row, scale factor and weight, and whatever else
a policy keys on) are interchangeable in these convex problems: averaging an
optimal solution over permutations of a class gives one where all members
share x, so one variable per class with the class size as multiplicity has
the same optimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Classes:
    """Rows of the LP: class c has `multiplicity[c]` members, `representative[c]` among them."""

    index: np.ndarray  # (n,) class of each job
    representative: np.ndarray  # (k,) one job index per class
    multiplicity: np.ndarray  # (k,) class sizes

    @property
    def n(self) -> int:
        return len(self.representative)


def make_classes(*arrays: np.ndarray, aggregate: bool = True) -> Classes:
    """Group jobs whose rows agree in every given array (each (n,) or (n, m))."""
    n = len(arrays[0])
    if not aggregate or n == 0:
        idx = np.arange(n)
        return Classes(idx, idx, np.ones(n, dtype=float))
    rows = [tuple(r) for r in np.hstack([a.reshape(n, -1) for a in arrays]).tolist()]
    first: dict[tuple, int] = {}
    for i, row in enumerate(rows):
        first.setdefault(row, i)
    # Classes in sorted key order (as np.unique would number them, ~50x slower on small inputs):
    # the LP's row order, and so the interior-point answer, depends on it.
    ordered = sorted(first)
    number = {row: c for c, row in enumerate(ordered)}
    index = np.array([number[row] for row in rows])
    counts = np.bincount(index, minlength=len(ordered)).astype(float)
    return Classes(index, np.array([first[row] for row in ordered]), counts)
