"""Reference training workloads with synthetic inputs (see models/registry.py).

Importing this package does not import torch.
"""

from models.registry import GAVEL_WORKLOADS, get, gpt_workload, workloads
from models.spec import SCALES, BuildContext, Built, WorkloadSpec, build, load_builder

__all__ = [
    "GAVEL_WORKLOADS",
    "SCALES",
    "BuildContext",
    "Built",
    "WorkloadSpec",
    "build",
    "get",
    "gpt_workload",
    "load_builder",
    "workloads",
]
