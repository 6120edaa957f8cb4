"""Gavel's throughput JSON <-> rota's long table, without loss.

Gavel layout (spec §1): {worker_type: {"('<model name>', s)": {"null": solo,
"('<partner>', s)": [own, partner]}}}. Each entry becomes one row; the pair
value's second element is the mirror row's throughput, so export rebuilds it.
Zeros ("could not run / not profiled") become status 'failed' with throughput 0.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.formats.atomic import write_text_atomic
from planner.formats.fields import Where, parse_float, short
from planner.formats.files import read_json
from planner.formats.table import COLUMNS, ThroughputTable, model_label, row_key, split_model_label


def _parse_key(key: str, *, path: object, where: str) -> tuple[str, int]:
    try:
        value = ast.literal_eval(key)
        model, scale = value
        if not isinstance(model, str) or not isinstance(scale, int):
            raise ValueError
    except (ValueError, SyntaxError, TypeError):
        raise InputError(f"key {short(key)} is not \"('<model>', <scale factor>)\"", path=path, field=where) from None
    return model, scale


def _row(
    worker_type: str, name: str, scale: int, partner: str | None, value: Any, *, path: object, where: str
) -> dict[str, Any]:
    """A raw table record; the table's own checks then run on it (NaN is reported there)."""
    throughput = parse_float(value, Where(path), where, strict=True, finite=False)
    model, batch = split_model_label(name)
    row: dict[str, Any] = {
        "worker_type": worker_type,
        "model": model,
        "batch_size": batch or "",
        "scale_factor": scale,
        "partner_model": "",
        "partner_batch_size": "",
        "throughput": throughput,
        "status": "ok" if throughput > 0 else "failed",
        "source": "imported",
    }
    if partner is not None:
        p_model, p_batch = split_model_label(partner)
        row["partner_model"], row["partner_batch_size"] = p_model, p_batch or ""
    return row


def import_gavel(path: str | os.PathLike) -> ThroughputTable:
    path = Path(path)
    data = read_json(path, "gavel")
    if not isinstance(data, dict):
        raise InputError("top level must be an object {worker_type: {...}}", path=path)
    if not data:
        raise InputError("no rows: an empty object has no throughputs", path=path)
    records = []
    for worker_type, entries in data.items():
        if not isinstance(entries, dict):
            raise InputError("must map job keys to objects", path=path, field=worker_type)
        for key, entry in entries.items():
            where = f"{worker_type}/{key}"
            name, scale = _parse_key(key, path=path, where=where)
            if not isinstance(entry, dict) or "null" not in entry:
                raise InputError("needs a 'null' (solo throughput) entry", path=path, field=where)
            for partner_key, value in entry.items():
                if partner_key == "null":
                    records.append(_row(worker_type, name, scale, None, value, path=path, where=where))
                    continue
                p_where = f"{where}/{partner_key}"
                partner, p_scale = _parse_key(partner_key, path=path, where=p_where)
                if p_scale != scale:
                    raise InputError("co-location across scale factors is not supported", path=path, field=p_where)
                if not isinstance(value, list) or len(value) != 2:
                    raise InputError(f"expected [own, partner], got {short(value)}", path=path, field=p_where)
                records.append(_row(worker_type, name, scale, partner, value[0], path=path, where=p_where))
    return ThroughputTable.from_records(records, columns=COLUMNS, path=path)


def to_gavel(table: ThroughputTable) -> dict[str, dict[str, dict[str, Any]]]:
    """Gavel's nested dict; key order follows the table's row order."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    pair_value: dict[tuple, float] = {}
    for r in table.rows:
        if r["partner_model"] is not None:
            pair_value[row_key(r)] = r["throughput"]
    for r in table.rows:
        key = repr((model_label(r["model"], r["batch_size"]), r["scale_factor"]))
        entry = out.setdefault(r["worker_type"], {}).setdefault(key, {})
        if r["partner_model"] is None:
            entry["null"] = r["throughput"]
            continue
        p_key = repr((model_label(r["partner_model"], r["partner_batch_size"]), r["scale_factor"]))
        mirror = pair_value[
            (
                r["worker_type"],
                r["partner_model"],
                r["partner_batch_size"],
                r["scale_factor"],
                r["model"],
                r["batch_size"],
            )
        ]
        entry[p_key] = [r["throughput"], mirror]
    # Gavel puts "null" first in every entry.
    for entries in out.values():
        for key, entry in entries.items():
            if "null" in entry:
                entries[key] = {"null": entry.pop("null"), **entry}
    return out


def export_gavel(table: ThroughputTable, path: str | os.PathLike) -> None:
    write_text_atomic(path, json.dumps(to_gavel(table), indent=2) + "\n")
