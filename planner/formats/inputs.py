"""Inputs named on the command line, in whichever form rota accepts them.

A throughput table may be a rota table (.csv / .parquet) or Gavel's JSON; a
cluster may be a file (.yaml / .json) or an inline spec such as '36:36:36'.
"""

from __future__ import annotations

import os
from pathlib import Path

from planner.formats.cluster import Cluster, parse_cluster, read_cluster
from planner.formats.gavel_json import import_gavel
from planner.formats.table import ThroughputTable, read_table


def load_table(path: str | os.PathLike) -> ThroughputTable:
    """A rota table (.csv / .parquet) or Gavel's throughput JSON (.json)."""
    if Path(path).suffix.lower() == ".json":
        return import_gavel(path)
    return read_table(path)


def load_cluster(text: str) -> Cluster:
    """A cluster file (.yaml / .json) or an inline spec: '36:36:36' (v100:p100:k80) or 'v100=4,k80=8'."""
    if Path(text).suffix.lower() in (".yaml", ".yml", ".json") or Path(text).exists():
        return read_cluster(text)
    return parse_cluster(text)
