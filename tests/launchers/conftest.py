"""Fixtures for the launcher integration tests: a real single-host Slurm for the whole session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from conftest import DATA

from launchers.slurm_cluster import SlurmCluster, missing_tools
from planner.formats.cluster import read_cluster


def _skip(reason: str) -> None:
    # printed past pytest's capture, so a skipped integration test is visible in every CI log
    print(f"\nSKIPPING the Slurm integration tests: {reason}", file=sys.__stderr__, flush=True)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> Iterator[SlurmCluster]:
    """Slurm for data/cluster.yaml (7 nodes, typed GPUs a100/v100/t4), started once per session.

    Skips only where it cannot run: Slurm or munge not installed (CI installs Debian's
    slurm-wlm), or not root (slurmd must be). A Slurm that is installed but fails to start
    is an error, with its logs."""
    missing = missing_tools()
    if missing:
        _skip(f"not installed: {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        _skip("slurmd must run as root")
    cluster = SlurmCluster(read_cluster(DATA / "cluster.yaml"), tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(autouse=True)
def _slurm_settled(request) -> None:
    """Each Slurm test starts on an idle cluster (the cluster lives for the whole session, and a
    job or drained node one test leaves behind would delay the next test's jobs)."""
    if "slurm" in request.fixturenames:
        cleaned = request.getfixturevalue("slurm").settle()
        if cleaned:
            print(f"\nbefore {request.node.name}: cleaned up {', '.join(cleaned)}", file=sys.__stderr__, flush=True)
