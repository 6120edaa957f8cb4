"""Catalogue of candidate node types for `rota capacity` (YAML or JSON).

    format: rota.catalogue/v1
    note: example prices, not quotes          # optional, shown with the results
    node_types:
      h100x8:
        worker_type: h100        # the throughput table's worker type (default: the node type's name)
        gpus_per_node: 8
        price_per_node: 280000   # buying: money per node
        rent_per_gpu_hour: 2.99  # renting: money per GPU-hour
        power_per_gpu_w: 700
        lead_time_weeks: 12      # shown, not optimised
        max_nodes: 4             # at most this many added (default 4)

Every number is non-negative and finite; a node type needs a price (to buy or to rent) when the
question has a money budget or compares costs, and a power figure when it has a power budget.
Errors name the file and the field path (node_types.h100x8.price_per_node).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.formats.cluster import MAX_NAME
from planner.formats.fields import COUNT, PRICE, Where, parse_float, parse_int, short, versioned_mapping
from planner.formats.files import parse_json, read_text
from planner.formats.safe_yaml import load_yaml

CATALOGUE_FORMAT = "rota.catalogue/v1"
DEFAULT_MAX_NODES = 4
MAX_NODES_PER_TYPE = 1000  # a search over more nodes of one type is a typo, not a question
HOURS_PER_MONTH = 730.0
_KEYS = (
    "worker_type",
    "gpus_per_node",
    "price_per_node",
    "rent_per_gpu_hour",
    "power_per_gpu_w",
    "lead_time_weeks",
    "max_nodes",
)


@dataclass(frozen=True)
class NodeType:
    """A node one could buy or rent: `gpus_per_node` GPUs of the table's `worker_type`."""

    name: str
    worker_type: str
    gpus_per_node: int
    price_per_node: float | None = None
    rent_per_gpu_hour: float | None = None
    power_per_gpu_w: float | None = None
    lead_time_weeks: float | None = None
    max_nodes: int = DEFAULT_MAX_NODES

    def rent_per_month(self) -> float | None:
        """Renting one node for a month (730 h)."""
        return None if self.rent_per_gpu_hour is None else self.rent_per_gpu_hour * self.gpus_per_node * HOURS_PER_MONTH

    def break_even_months(self) -> float | None:
        """After how many months of renting buying would have been cheaper (None: not both priced)."""
        monthly = self.rent_per_month()
        if self.price_per_node is None or not monthly:
            return None
        return self.price_per_node / monthly


@dataclass(frozen=True)
class Catalogue:
    node_types: dict[str, NodeType]
    note: str | None = None
    path: str = "<catalogue>"

    @property
    def names(self) -> list[str]:
        return list(self.node_types)


def _name(value: Any, at: Where, field: str) -> str:
    text = str(value)
    if not text or not text.isprintable() or len(text) > MAX_NAME or text != text.strip():
        raise at.error(field, f"{short(value)} is not a valid name (printable, at most {MAX_NAME} characters)")
    return text


def _optional(spec: dict, key: str, at: Where, where: str) -> float | None:
    value = spec.get(key)
    return None if value is None else parse_float(value, at, f"{where}.{key}", minimum=0, strict=True, wording=PRICE)


def _node_type(name: str, spec: Any, at: Where) -> NodeType:
    where = f"node_types.{name}"
    if not isinstance(spec, dict):
        raise at.error(where, f"expected a mapping ({', '.join(_KEYS)})")
    unknown = sorted(str(k) for k in spec if k not in _KEYS)
    if unknown:
        raise at.error(f"{where}.{unknown[0]}", f"unknown key (expected {', '.join(_KEYS)})")
    if "gpus_per_node" not in spec:
        raise at.error(f"{where}.gpus_per_node", "is required (GPUs in one node of this type)")
    per_node = parse_int(spec["gpus_per_node"], at, f"{where}.gpus_per_node", positive=True, strict=True, wording=COUNT)
    max_nodes = parse_int(
        spec.get("max_nodes", DEFAULT_MAX_NODES), at, f"{where}.max_nodes", minimum=0, strict=True, wording=COUNT
    )
    if max_nodes > MAX_NODES_PER_TYPE:
        raise at.error(f"{where}.max_nodes", f"{max_nodes} is more than the {MAX_NODES_PER_TYPE} a search may add")
    return NodeType(
        name=name,
        worker_type=_name(spec.get("worker_type", name), at, f"{where}.worker_type"),
        gpus_per_node=per_node,
        price_per_node=_optional(spec, "price_per_node", at, where),
        rent_per_gpu_hour=_optional(spec, "rent_per_gpu_hour", at, where),
        power_per_gpu_w=_optional(spec, "power_per_gpu_w", at, where),
        lead_time_weeks=_optional(spec, "lead_time_weeks", at, where),
        max_nodes=max_nodes,
    )


def catalogue_from_dict(data: Any, path: object = "<catalogue>") -> Catalogue:
    """The catalogue in a parsed YAML / JSON document; InputError naming the field path."""
    types = versioned_mapping(data, path, fmt=CATALOGUE_FORMAT, items="node_types", keys=("note",), what="node type")
    at = Where(path)
    node_types = {}
    for raw_name, spec in types.items():
        name = _name(raw_name, at, "node_types")
        node_types[name] = _node_type(name, spec, at)
    note = data.get("note")
    if note is not None and not isinstance(note, str):
        raise InputError(f"expected text, got {short(note)}", path=path, field="note")
    return Catalogue(node_types, note, str(path))


def read_catalogue(path: str | os.PathLike) -> Catalogue:
    path = Path(path)
    text = read_text(path, "catalogue")
    data = parse_json(text, path) if path.suffix.lower() == ".json" else load_yaml(text, path)
    return catalogue_from_dict(data, path=path)
