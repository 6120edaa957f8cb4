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
    seen: dict[tuple, int] = {}  # row -> its number in order of first appearance
    first: list[int] = []  # per number: the first job with that row
    provisional = []
    for i, row in enumerate(map(tuple, np.hstack([a.reshape(n, -1) for a in arrays]).tolist())):
        c = seen.setdefault(row, len(seen))
        if c == len(first):
            first.append(i)
        provisional.append(c)
    # Classes in sorted key order (as np.unique would number them, ~50x slower on small inputs):
    # the LP's row order, and so the interior-point answer, depends on it.
    rows = list(seen)
    ordered = sorted(range(len(rows)), key=rows.__getitem__)  # sorted(seen), as numbers
    number = np.empty(len(rows), dtype=np.int64)
    number[ordered] = np.arange(len(rows))
    index = number[provisional]
    counts = np.bincount(index, minlength=len(rows)).astype(float)
    return Classes(index, np.array(first)[ordered], counts)
