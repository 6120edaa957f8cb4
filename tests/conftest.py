"""Shared fixtures for the planner tests (no torch needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "data"
GAVEL_DIR = DATA / "gavel"  # Gavel's published tables and traces (see data/gavel/README.md)


@pytest.fixture(scope="session")
def gavel_dir() -> Path:
    """Gavel's data, shipped with the repository: tests that use it never skip."""
    return GAVEL_DIR


def make_problem(throughput, capacity, scale=None, weight=None, remaining=None, names=None):
    """A Problem from plain lists (jobs x types)."""
    from planner.policies.problem import Problem

    tput = np.asarray(throughput, dtype=float)
    n, m = tput.shape
    return Problem(
        job_ids=[f"j{i}" for i in range(n)],
        job_types=[None] * n,
        worker_types=list(names or [f"w{j}" for j in range(m)]),
        capacity=np.asarray(capacity, dtype=float),
        throughput=tput,
        scale=np.asarray(scale if scale is not None else [1] * n, dtype=float),
        weight=np.asarray(weight if weight is not None else [1] * n, dtype=float),
        remaining=np.asarray(remaining if remaining is not None else [100] * n, dtype=float),
        time_since_start=np.arange(n, 0, -1, dtype=float),
        cost=np.arange(1, m + 1, dtype=float),
        slo_left_s=np.full(n, np.nan),
    )


# Spec §11.1: T_0 = (v100 2, p100 1, k80 0.5), T_1 = (v100 3, p100 2, k80 1).
SPEC_T = [[2.0, 1.0, 0.5], [3.0, 2.0, 1.0]]
SPEC_TYPES = ["v100", "p100", "k80"]
