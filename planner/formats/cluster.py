"""Cluster spec (YAML or JSON): worker types, GPU counts, nodes, prices.

    format: rota.cluster/v1          # optional
    worker_types:
      v100: {gpus: 8, gpus_per_node: 4, nodes: [v100-a, v100-b], cost_per_gpu_hour: 2.48}
      k80:  {gpus: 4}                # one node of 4 GPUs, named k80-0
      p100: {gpus: 4, restart_s: 30} # seconds a job loses per (re)start here when the table has none
      h100: {gpus: 8, gpu_product: NVIDIA-H100-80GB-HBM3}   # Kubernetes node label value (optional)
      a100: {gpus: 24, gpus_per_node: 8,
             nodes: [{name: a100-0, switch: sw1, nvlink_domain: nvl0}, {name: a100-1, switch: sw1}, a100-2]}

A node in `nodes` is a name, or a mapping {name, switch, nvlink_domain} that also says which
leaf switch it hangs off and which NVLink domain (a multi-node NVLink fabric) it belongs to.
`WorkerType.nodes` stays the names; the domains are `WorkerType.domains` (node -> NodeDomains),
holding only the nodes that declare one. The mechanism keeps a multi-node gang inside one
domain (docs/placement.md); a type that names no switch at all is one flat network.

Tenants (docs/tenants.md): who shares the cluster, by the jobs' `entity`, optional:

    tenants:
      vc_a: {weight: 2, quota: {v100: 8, k80: 4}}   # at most 8 V100s and 4 K80s, time-averaged
      vc_b: {weight: 1}                              # weight only: no quota
      vc_c: 3                                        # shorthand for {weight: 3}
    default_tenant_weight: 1   # the weight of every entity not listed, and of jobs with no entity

An entity not listed is a tenant of its own with `default_tenant_weight` and no quota; the jobs
with no entity are one more such tenant (reported as "(none)"). Weights lie in [1e-6, 1e6]; a
quota maps worker types of this cluster to GPUs (a non-negative number, fractions allowed, more
than the type has allowed: it then limits nothing).

Errors name the file and the field path (e.g. worker_types.v100.gpus, worker_types.a100.nodes[0].switch,
tenants.vc_a.quota.v100).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InputError
from planner.formats.fields import (
    COUNT,
    PRICE,
    Where,
    is_number,
    parse_float,
    parse_int,
    short,
    versioned_mapping,
)
from planner.formats.files import parse_json, read_text
from planner.formats.safe_yaml import load_yaml

if TYPE_CHECKING:
    from planner.formats.table import ThroughputTable

# Gavel's three GPU types in its hard-coded visiting order (spec §5.4); also the order of
# an inline "36:36:36" cluster (Gavel's -c option).
GAVEL_TYPE_ORDER = ("v100", "p100", "k80")

CLUSTER_FORMAT = "rota.cluster/v1"
_WORKER_KEYS = {"gpus", "gpus_per_node", "nodes", "cost_per_gpu_hour", "restart_s", "gpu_product"}
# Bounds (a typo such as 10**12 GPUs must not exhaust memory): GPUs of one worker
# type, and names (worker types, nodes): printable, no line breaks, at most MAX_NAME characters.
MAX_GPUS_PER_TYPE = 100_000
MAX_NAME = 253
_NODE_KEYS = ("name", "nvlink_domain", "switch")
_TENANT_KEYS = ("weight", "quota")
# Tenant weights: the bounds of a job's priority_weight (planner/formats/jobs.py, which imports this module).
MIN_WEIGHT = 1e-6
MAX_WEIGHT = 1e6
# The tenant the jobs with no entity form: the name summaries give it (no tenant may take it).
NO_ENTITY = "(none)"


@dataclass(frozen=True)
class NodeDomains:
    """Where a node sits: its leaf switch and its NVLink domain (None: not declared)."""

    switch: str | None = None
    nvlink_domain: str | None = None


@dataclass(frozen=True)
class WorkerType:
    name: str
    gpus: int
    gpus_per_node: int
    nodes: tuple[str, ...]
    cost_per_gpu_hour: float | None = None
    restart_s: float | None = None  # default restart cost of a job here (None: unknown)
    gpu_product: str | None = None  # the GPU's product name as Kubernetes nodes are labelled with it
    # node -> its switch / NVLink domain, only for nodes that declare one (not hashed: a dict)
    domains: Mapping[str, NodeDomains] = field(default_factory=dict, hash=False)

    @property
    def has_switches(self) -> bool:
        """Whether any node names its switch (if none does, the type is one flat network)."""
        return any(d.switch is not None for d in self.domains.values())

    def shared_domains(self, nodes: Iterable[str]) -> dict[str, str]:
        """{"switch": s, "nvlink_domain": d}, each only where every node in `nodes` declares that same one."""
        out: dict[str, str] = {}
        listed = list(nodes)
        none = NodeDomains()
        for key in ("switch", "nvlink_domain"):
            values = {getattr(self.domains.get(n, none), key) for n in listed}
            if len(values) == 1 and (value := values.pop()) is not None:
                out[key] = value
        return out

    def gpu_slots(self) -> list[tuple[str, int]]:
        """Every GPU as (node name, local GPU index), node by node."""
        return [(node, g) for node in self.nodes for g in range(self.gpus_per_node)]


@dataclass(frozen=True)
class Tenant:
    """One tenant listed in the cluster spec: its weight and its quota (worker type -> GPUs,
    time-averaged; a type not in the quota is not limited)."""

    name: str
    weight: float = 1.0
    quota: Mapping[str, float] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Tenants:
    """The cluster's tenants, by entity name. An entity not listed (and the jobs with no entity,
    entity None) is a tenant with `default_weight` and no quota."""

    listed: Mapping[str, Tenant] = field(default_factory=dict, hash=False)
    default_weight: float = 1.0

    def weight(self, entity: str | None) -> float:
        tenant = self.listed.get(entity) if entity is not None else None
        return self.default_weight if tenant is None else tenant.weight

    def quota(self, entity: str | None) -> Mapping[str, float]:
        """Worker type -> GPUs the entity may hold (time-averaged); empty: no limit."""
        tenant = self.listed.get(entity) if entity is not None else None
        return {} if tenant is None else tenant.quota

    @property
    def has_quotas(self) -> bool:
        return any(t.quota for t in self.listed.values())

    def allows(self, entity: str | None, worker_type: str) -> bool:
        """Whether the entity may use the worker type at all (no quota of 0 there)."""
        return self.quota(entity).get(worker_type, 1.0) > 0


def tenant_name(entity: str | None) -> str:
    """The tenant a job's entity belongs to, as summaries name it ("(none)": no entity)."""
    return NO_ENTITY if entity is None else entity


@dataclass(frozen=True)
class Cluster:
    worker_types: dict[str, WorkerType]
    path: str = "<cluster>"
    tenants: Tenants | None = None  # None: the spec has no tenants section

    @property
    def names(self) -> list[str]:
        return list(self.worker_types)

    def capacity(self, name: str) -> int:
        return self.worker_types[name].gpus

    @property
    def total_gpus(self) -> int:
        return sum(w.gpus for w in self.worker_types.values())


def _check_document(data: Any, path: object) -> dict[str, Any]:
    """The top level: known keys, format, and the worker type mapping it holds."""
    return versioned_mapping(
        data,
        path,
        fmt=CLUSTER_FORMAT,
        items="worker_types",
        keys=("name", "tenants", "default_tenant_weight"),
        what="worker type",
    )


def _worker_spec(spec: Any, at: Where, where: str) -> dict[str, Any]:
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = {"gpus": spec}  # shorthand: v100: 4
    if not isinstance(spec, dict):
        raise at.error(
            where, "expected a mapping (gpus, gpus_per_node, nodes, cost_per_gpu_hour, restart_s, gpu_product)"
        )
    unknown = set(spec) - _WORKER_KEYS
    if unknown:
        raise at.error(f"{where}.{sorted(unknown)[0]}", f"unknown key (expected {', '.join(sorted(_WORKER_KEYS))})")
    if "gpus" not in spec:
        raise at.error(f"{where}.gpus", "is required")
    return spec


def _check_name(name: str, at: Where, where: str) -> str:
    if not name or not name.isprintable() or len(name) > MAX_NAME:
        raise at.error(where, f"{short(name)} is not a valid name (printable, 1 to {MAX_NAME} characters)")
    return name


def _node_names(
    name: str, spec: dict[str, Any], n_nodes: int, at: Where, where: str
) -> tuple[list[str], dict[str, NodeDomains]]:
    """The node names, and the domains of the nodes given as mappings."""
    nodes = spec.get("nodes")
    if nodes is None:
        return [f"{name}-{k}" for k in range(n_nodes)], {}
    if not isinstance(nodes, list) or len(nodes) != n_nodes:
        raise at.error(f"{where}.nodes", f"expected a list of {n_nodes} node names (gpus / gpus_per_node)")
    names: list[str] = []
    domains: dict[str, NodeDomains] = {}
    for k, node in enumerate(nodes):
        here = f"{where}.nodes[{k}]"
        if isinstance(node, dict):
            node_name, node_domains = _node_entry(node, at, here)
            names.append(node_name)
            if node_domains != NodeDomains():
                domains[node_name] = node_domains
        elif isinstance(node, list):
            raise at.error(here, "expected a node name or a mapping {name, switch, nvlink_domain}, found a list")
        else:
            names.append(_check_name(str(node), at, f"{where}.nodes"))
    return names, domains


def _node_entry(node: dict[Any, Any], at: Where, where: str) -> tuple[str, NodeDomains]:
    """One node given as {name, switch, nvlink_domain}."""
    unknown = sorted(str(k) for k in node if k not in _NODE_KEYS)
    if unknown:
        raise at.error(f"{where}.{unknown[0]}", f"unknown key (expected {', '.join(_NODE_KEYS)})")
    if "name" not in node:
        raise at.error(f"{where}.name", "is required")
    values: dict[str, str | None] = {}
    for key in _NODE_KEYS:
        value = node.get(key)
        if value is None and key != "name":
            values[key] = None
            continue
        # a name, as YAML writes it: text or a whole number (switch: 1), never a flag or a list
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise at.error(f"{where}.{key}", f"expected a name, got {short(value)}")
        values[key] = _check_name(str(value), at, f"{where}.{key}")
    return str(values["name"]), NodeDomains(values["switch"], values["nvlink_domain"])


def _worker_type(name: str, raw: Any, at: Where, seen_nodes: dict[str, str]) -> WorkerType:
    """One worker type; `seen_nodes` (node -> worker type) catches a node named twice."""
    where = f"worker_types.{name}"
    spec = _worker_spec(raw, at, where)
    gpus = parse_int(spec["gpus"], at, f"{where}.gpus", positive=True, strict=True, wording=COUNT)
    if gpus > MAX_GPUS_PER_TYPE:
        raise at.error(f"{where}.gpus", f"{gpus} GPUs is more than the {MAX_GPUS_PER_TYPE} one worker type may have")
    per_node = parse_int(
        spec.get("gpus_per_node", gpus), at, f"{where}.gpus_per_node", positive=True, strict=True, wording=COUNT
    )
    if gpus % per_node:
        raise at.error(f"{where}.gpus_per_node", f"{gpus} GPUs do not split into nodes of {per_node}")
    nodes, domains = _node_names(name, spec, gpus // per_node, at, where)
    for node in nodes:
        if node in seen_nodes:
            raise at.error(f"{where}.nodes", f"node name {short(node)} also used by {seen_nodes[node]}")
        seen_nodes[node] = name
    cost = spec.get("cost_per_gpu_hour")
    if cost is not None:
        cost = parse_float(cost, at, f"{where}.cost_per_gpu_hour", minimum=0, strict=True, wording=PRICE)
    restart = spec.get("restart_s")
    if restart is not None:
        restart = parse_float(restart, at, f"{where}.restart_s", minimum=0, strict=True, wording=PRICE)
    product = spec.get("gpu_product")
    if product is not None:
        if not isinstance(product, str):
            raise at.error(f"{where}.gpu_product", f"expected a product name such as Tesla-T4, got {short(product)}")
        product = _check_name(product, at, f"{where}.gpu_product")
    return WorkerType(name, gpus, per_node, tuple(nodes), cost, restart, product, domains)


def _weight(value: Any, at: Where, where: str) -> float:
    weight = parse_float(value, at, where, positive=True, strict=True)
    if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise at.error(
            where, f"{weight:g} is outside [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}] (weights are relative; rescale them)"
        )
    return weight


def _quota(raw: Any, types: Mapping[str, WorkerType], at: Where, where: str) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise at.error(where, f"expected a mapping worker type -> GPUs, e.g. {{v100: 8}}, got {short(raw)}")
    quota: dict[str, float] = {}
    for key, value in raw.items():
        name = str(key)
        if name not in types:
            raise at.error(
                f"{where}.{name if name.isprintable() and len(name) <= 80 else short(name)}",
                f"unknown worker type (the cluster has {', '.join(sorted(types))})",
            )
        quota[name] = parse_float(value, at, f"{where}.{name}", minimum=0, strict=True, wording=PRICE)
    return quota


def _tenants(data: dict[str, Any], types: Mapping[str, WorkerType], at: Where) -> Tenants | None:
    """The `tenants` and `default_tenant_weight` sections; None when the spec has neither."""
    if "tenants" not in data and "default_tenant_weight" not in data:
        return None
    default = 1.0
    if data.get("default_tenant_weight") is not None:
        default = _weight(data["default_tenant_weight"], at, "default_tenant_weight")
    raw = data.get("tenants")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise at.error("tenants", f"expected a mapping tenant -> {{weight, quota}}, got {short(raw)}")
    listed: dict[str, Tenant] = {}
    for key, spec in raw.items():
        name = _check_name(str(key), at, "tenants")
        where = f"tenants.{name}"
        if name == NO_ENTITY:
            raise at.error(where, f"{NO_ENTITY} is the name summaries give the jobs with no entity; rename it")
        if spec is None:
            spec = {}
        elif is_number(spec, finite=False):
            spec = {"weight": spec}  # shorthand: vc_a: 2
        if not isinstance(spec, dict):
            raise at.error(where, f"expected a mapping (weight, quota) or a weight, got {short(spec)}")
        unknown = sorted(str(k) for k in spec if k not in _TENANT_KEYS)
        if unknown:
            raise at.error(f"{where}.{unknown[0]}", f"unknown key (expected {', '.join(_TENANT_KEYS)})")
        weight = default if spec.get("weight") is None else _weight(spec["weight"], at, f"{where}.weight")
        quota = {} if spec.get("quota") is None else _quota(spec["quota"], types, at, f"{where}.quota")
        listed[name] = Tenant(name, weight, quota)
    return Tenants(listed, default)


def cluster_from_dict(data: Any, path: object = "<cluster>") -> Cluster:
    """The cluster in a parsed YAML / JSON document; InputError naming the field path."""
    types = _check_document(data, path)
    at = Where(path)
    seen_nodes: dict[str, str] = {}
    result: dict[str, WorkerType] = {}
    for name, spec in types.items():
        _check_name(str(name), at, "worker_types")
        result[str(name)] = _worker_type(str(name), spec, at, seen_nodes)
    return Cluster(result, path=str(path), tenants=_tenants(data, result, at))


def cluster_to_dict(cluster: Cluster, name: str | None = None) -> dict[str, Any]:
    """The cluster as a document `cluster_from_dict` reads back (what `rota capacity` writes)."""
    types: dict[str, Any] = {}
    for w in cluster.worker_types.values():
        nodes: list[Any] = []
        for node in w.nodes:
            domains = w.domains.get(node)
            extra = {} if domains is None else {k: v for k, v in vars(domains).items() if v is not None}
            nodes.append({"name": node, **extra} if extra else node)
        spec: dict[str, Any] = {"gpus": w.gpus, "gpus_per_node": w.gpus_per_node, "nodes": nodes}
        for key in ("cost_per_gpu_hour", "restart_s", "gpu_product"):
            if getattr(w, key) is not None:
                spec[key] = getattr(w, key)
        types[w.name] = spec
    document: dict[str, Any] = {"format": CLUSTER_FORMAT, **({"name": name} if name else {}), "worker_types": types}
    if cluster.tenants is not None:
        document["tenants"] = {
            t.name: {"weight": t.weight, **({"quota": dict(t.quota)} if t.quota else {})}
            for t in cluster.tenants.listed.values()
        }
        document["default_tenant_weight"] = cluster.tenants.default_weight
    return document


def read_cluster(path: str | os.PathLike) -> Cluster:
    path = Path(path)
    if not path.exists() and _is_inline_spec(str(path)):
        # `plan` records the cluster file in the schedule (exports re-read it), so it needs a file.
        raise InputError(
            "file not found; an inline spec works in simulate, sweep and compare, but plan needs a cluster "
            "file, e.g. data/cluster.yaml (see README: File formats)",
            path=path,
        )
    text = read_text(path, "cluster")
    data = parse_json(text, path) if path.suffix.lower() == ".json" else load_yaml(text, path)
    return cluster_from_dict(data, path=path)


def require_table_rows(cluster: Cluster, table: ThroughputTable, table_path: object) -> None:
    """Every worker type of the cluster must appear in the throughput table."""
    missing = [w for w in cluster.names if w not in table.worker_types]
    if missing:
        raise InputError(
            f"worker type(s) {', '.join(missing)} of cluster {cluster.path} have no rows in the table",
            path=table_path,
            field="worker_type",
        )


def parse_cluster(text: str) -> Cluster:
    """'36:36:36' (Gavel's -c: v100:p100:k80) or 'v100=4,k80=8'; one node per type."""
    text = text.strip()
    if "=" in text:
        types = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, _, count = part.partition("=")
            types[name.strip()] = _count(count, text)
    else:
        counts = [_count(c, text) for c in text.split(":")]
        if len(counts) != 3:
            raise InputError(f"expected V100:P100:K80 GPU counts like 36:36:36, got {short(text)}", field="--cluster")
        types = {w: n for w, n in zip(GAVEL_TYPE_ORDER, counts) if n > 0}
    if not types:
        raise InputError(f"no GPUs in {short(text)}", field="--cluster")
    return cluster_from_dict({"worker_types": types}, path="--cluster")


def _count(raw: str, text: str) -> int:
    try:
        if not re.fullmatch(r"[+-]?[0-9]+", raw.strip()):  # ASCII digits only (int() takes '1_0', '１')
            raise ValueError(raw)
        value = int(raw.strip())
    except ValueError:
        raise InputError(f"bad GPU count {short(raw.strip())} in {short(text)}", field="--cluster") from None
    if value < 0:
        raise InputError(f"GPU counts must not be negative in {short(text)}", field="--cluster")
    return value


def _is_inline_spec(text: str) -> bool:
    try:
        parse_cluster(text)
    except (InputError, ValueError):
        return False
    return True
