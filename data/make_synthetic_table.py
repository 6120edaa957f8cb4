"""Generate data/throughputs.csv: a SYNTHETIC throughput table for the demo.

Nothing here is measured. Numbers come from a deliberately simple model: a
base rate per model on the 'v100' type, a per-family speed-up for the other
types (compute-bound models gain most on newer GPUs, the memory-bound
recommender least), a data-parallel efficiency of 0.9 per doubling, and a
co-location factor in [0.45, 0.95] drawn from a seeded RNG. Every row says
source=synthetic so no one mistakes it for a measurement; replace it with a
table from `rota profile` (or `rota table import-gavel`) for real planning.

Run: python data/make_synthetic_table.py [--out FILE] [--types a100,v100,t4]   (deterministic)

`--types h100,a100,l4 --out data/examples/capacity/h100_lab/throughputs.csv` writes the table of
the capacity example of newer GPUs (docs/capacity.md), from the same model.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.formats.table import ThroughputTable, write_table  # noqa: E402

# (model, batch size, v100 steps/s, family, distributable)
MODELS = [
    ("ResNet-18", 64, 22.0, "conv", True),
    ("ResNet-18", 128, 12.0, "conv", True),
    ("ResNet-50", 32, 6.5, "conv", True),
    ("ResNet-50", 64, 3.4, "conv", True),
    ("Transformer", 64, 9.0, "attention", True),
    ("Transformer", 128, 4.8, "attention", True),
    ("LM", 20, 30.0, "recurrent", True),
    ("LM", 40, 17.0, "recurrent", True),
    ("Recommendation", 1024, 60.0, "memory", False),
    ("Recommendation", 4096, 18.0, "memory", False),
    ("A3C", None, 8.0, "small", False),
    ("CycleGAN", None, 2.2, "conv", False),
]
# Speed relative to v100 per family: the heterogeneity the planner exploits.
SPEEDUP = {
    "a100": {"conv": 2.2, "attention": 3.1, "recurrent": 1.7, "memory": 1.4, "small": 1.1},
    "v100": {"conv": 1.0, "attention": 1.0, "recurrent": 1.0, "memory": 1.0, "small": 1.0},
    "t4": {"conv": 0.38, "attention": 0.30, "recurrent": 0.45, "memory": 0.70, "small": 0.85},
    # newer types for the capacity example (same crude model: compute-bound families gain most)
    "h100": {"conv": 3.6, "attention": 6.0, "recurrent": 2.6, "memory": 2.0, "small": 1.3},
    "l4": {"conv": 0.85, "attention": 0.9, "recurrent": 0.8, "memory": 0.9, "small": 1.0},
}
DEFAULT_TYPES = ("a100", "v100", "t4")  # data/throughputs.csv
SCALES = (1, 2, 4)


def rows(types: tuple[str, ...] = DEFAULT_TYPES) -> list[dict]:
    rng = random.Random(20261203)
    out = []
    common = {"status": "ok", "source": "synthetic", "device_name": "synthetic model (not measured)"}
    for worker in types:
        speed = SPEEDUP[worker]
        for model, batch, base, family, dist in MODELS:
            for s in SCALES if dist else (1,):
                rate = base * speed[family] * s * 0.9 ** (s.bit_length() - 1)
                if worker == "t4" and model == "ResNet-50" and batch == 64 and s == 1:
                    out.append(
                        {
                            "worker_type": worker,
                            "model": model,
                            "batch_size": batch or "",
                            "scale_factor": s,
                            "throughput": "",
                            **common,
                            "status": "oom",
                        }
                    )
                    continue
                out.append(
                    {
                        "worker_type": worker,
                        "model": model,
                        "batch_size": batch or "",
                        "scale_factor": s,
                        "throughput": round(rate, 4),
                        "samples_per_s": round(rate * (batch or 1), 3),
                        **common,
                    }
                )
        solo = {
            (r["model"], r["batch_size"]): r
            for r in out
            if r["worker_type"] == worker and r["scale_factor"] == 1 and r["status"] == "ok"
        }
        for a, b in itertools.combinations_with_replacement(sorted(solo, key=str), 2):
            factors = (rng.uniform(0.45, 0.95), rng.uniform(0.45, 0.95))
            members = [(a, b, factors[0])] if a == b else [(a, b, factors[0]), (b, a, factors[1])]
            for own, partner, factor in members:
                out.append(
                    {
                        "worker_type": worker,
                        "model": own[0],
                        "batch_size": own[1],
                        "scale_factor": 1,
                        "partner_model": partner[0],
                        "partner_batch_size": partner[1],
                        "throughput": round(solo[own]["throughput"] * factor, 4),
                        **common,
                    }
                )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).with_name("throughputs.csv"),
        help="where to write the table (default: data/throughputs.csv, the demo's table)",
    )
    parser.add_argument("--types", default=",".join(DEFAULT_TYPES), help=f"worker types, of {', '.join(SPEEDUP)}")
    args = parser.parse_args(argv)
    types = tuple(t.strip() for t in args.types.split(",") if t.strip())
    unknown = [t for t in types if t not in SPEEDUP]
    if unknown:
        parser.error(f"unknown type(s) {', '.join(unknown)}; the model knows {', '.join(SPEEDUP)}")
    table = ThroughputTable.from_records(rows(types))
    write_table(table, args.out)
    print(f"wrote {args.out}: {len(table)} rows")


if __name__ == "__main__":
    main()
