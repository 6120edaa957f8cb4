"""Device discovery: every CUDA device grouped into a worker type by its
normalised model name, plus the host CPU as worker type "cpu".

CUDA is queried in a short child interpreter so the profiler's parent process
never creates a CUDA context (its memory would count against the device).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass

_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro"}
# Packaging and memory-technology words do not change what the planner cares about.
_FORM_FACTOR = re.compile(r"^(sxm\d*|pcie|hbm\d*e?|nvl|dgx|smx\d*)$")


def normalise_name(name: str) -> str:
    """'NVIDIA H200' → 'h200', 'NVIDIA A100-SXM4-80GB' → 'a100-80gb', 'Tesla V100-SXM2-16GB' → 'v100-16gb'."""
    tokens = [t for t in re.split(r"[\s_\-]+", name.strip().lower()) if t]
    kept = [t for t in tokens if t not in _VENDOR_WORDS and not _FORM_FACTOR.match(t)]
    slug = "-".join(re.sub(r"[^a-z0-9.]+", "", t) for t in kept)
    return slug.strip("-") or "gpu"


@dataclass(frozen=True)
class Node:
    """A node of a multi-node allocation: its name (for the launcher) and an address its peers reach."""

    name: str
    address: str
    launcher: str = "slurm"  # how a rank starts there: srun (slurm) or a Ray task (ray)


@dataclass(frozen=True)
class DeviceType:
    """One worker type on this host: its devices and how to address them.

    The CPU is cut into workers of `cores_per_worker` cores each, the way a GPU
    host is cut into GPUs: a solo job gets one worker's cores, a co-located pair
    shares them, a data-parallel job of scale factor k gets k workers: disjoint
    cores, unless more workers were asked for than the cores allow
    (`rota profile --cpu-workers`), when they take the cores in turn and share
    them (a 4-process job on a 2-core laptop: its rows then say so).

    `nodes`: empty on one host; inside a multi-node allocation
    (`rota profile --across-nodes slurm`) the allocation's nodes, this one
    first, each with devices like this host's, ranks numbered node by node.
    """

    worker_type: str  # "h200", "cpu"
    backend: str  # "cuda" | "cpu"
    indices: tuple[int, ...]  # CUDA ordinals; CPU worker numbers
    device_name: str  # full model name(s), kept in provenance
    memory_bytes: int | None = None
    core_ids: tuple[int, ...] = ()  # CPU only: the cores this process may use
    cores_per_worker: int = 1  # CPU only
    nodes: tuple[Node, ...] = ()

    @property
    def per_node(self) -> int:
        return len(self.indices)

    @property
    def count(self) -> int:
        return self.per_node * max(1, len(self.nodes))

    def node_of(self, rank: int) -> Node | None:
        """The node of rank `rank` in a multi-node allocation (None on one host)."""
        return self.nodes[rank // self.per_node] if self.nodes else None

    @property
    def cores(self) -> int:
        return len(self.core_ids)

    @property
    def max_processes(self) -> int:
        """Largest data-parallel scale factor: one process per GPU / per CPU worker."""
        return self.count

    def device(self, rank: int = 0) -> str:
        return f"cuda:{self.indices[rank % self.per_node]}" if self.backend == "cuda" else "cpu"

    def cpu_set(self, rank: int = 0) -> tuple[int, ...]:
        """The cores of CPU worker `rank` (empty for GPUs)."""
        if self.backend != "cpu":
            return ()
        worker, n = self.indices[rank % self.per_node], self.cores_per_worker
        return tuple(self.core_ids[(worker * n + i) % len(self.core_ids)] for i in range(n))


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def available_cores() -> tuple[int, ...]:
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


MAX_CPU_WORKERS = 64  # a data-parallel shape beyond any scale factor a table holds


def cpu_device(cores_per_worker: int = 1, workers: int | None = None) -> DeviceType:
    """The CPU as `workers` workers of `cores_per_worker` cores (default: as many as the cores give)."""
    cores = available_cores()
    if not 1 <= cores_per_worker <= len(cores):
        raise ValueError(f"cores per CPU worker must be between 1 and {len(cores)}, got {cores_per_worker}")
    fit = len(cores) // cores_per_worker
    if workers is not None and not 1 <= workers <= MAX_CPU_WORKERS:
        raise ValueError(f"CPU workers must be between 1 and {MAX_CPU_WORKERS}, got {workers}")
    workers = workers or fit
    name = f"{cpu_model_name()} ({cores_per_worker} of {len(cores)} cores per worker)"
    if workers > fit:  # the rows must not pass for a machine with that many cores
        name = f"{cpu_model_name()} ({workers} workers of {cores_per_worker} core(s) sharing {len(cores)} cores)"
    return DeviceType("cpu", "cpu", tuple(range(workers)), name, core_ids=cores, cores_per_worker=cores_per_worker)


_CUDA_QUERY = """
import json, torch
out = []
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append({"index": i, "name": p.name, "memory": p.total_memory})
print(json.dumps(out))
"""


def query_cuda(timeout_s: float = 120.0) -> list[dict]:
    """[{index, name, memory}] for every visible CUDA device; [] without torch or CUDA."""
    if importlib.util.find_spec("torch") is None:
        return []
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CUDA_QUERY], capture_output=True, text=True, timeout=timeout_s, check=True
        )
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return []


def group_cuda(devices: list[dict]) -> list[DeviceType]:
    groups: dict[str, list[dict]] = {}
    for d in devices:
        groups.setdefault(normalise_name(d["name"]), []).append(d)
    return [
        DeviceType(
            worker_type,
            "cuda",
            tuple(d["index"] for d in members),
            "; ".join(sorted({d["name"] for d in members})),
            memory_bytes=min(d["memory"] for d in members),
        )
        for worker_type, members in sorted(groups.items())
    ]


def discover(include_cuda: bool = True, cores_per_worker: int = 1, cpu_workers: int | None = None) -> list[DeviceType]:
    """All worker types on this host, GPUs first, the CPU last."""
    found = group_cuda(query_cuda()) if include_cuda else []
    return [*found, cpu_device(cores_per_worker, cpu_workers)]


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None
