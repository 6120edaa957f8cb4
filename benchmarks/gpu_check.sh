#!/usr/bin/env bash
# One prepared run of everything GPU-specific, for a machine with an NVIDIA GPU.
# Not part of `make test` / `make bench` (they must pass without a GPU). Writes into $OUT
# (default out/gpu): the device list, a full-scale solo table of every reference model,
# a sample of co-located pairs (reference:3, then estimated), and the repeat CV of one model.
#
#   bash benchmarks/gpu_check.sh            # ~10 minutes on one H200 with the budgets below
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
mkdir -p "$OUT"
ROTA=.venv/bin/rota
[ -x "$ROTA" ] || make .venv/.profiler
"$ROTA" profile --list-devices --json | tee "$OUT/devices.json"
TYPE=$("$ROTA" profile --list-devices --json | .venv/bin/python -c \
  'import json,sys; d=[x for x in json.load(sys.stdin) if x["backend"]=="cuda"]; print(d[0]["worker_type"] if d else "")')
if [ -z "$TYPE" ]; then echo "no CUDA device found"; exit 1; fi
# solo rows of every model at real scale, then pairs against 3 reference job types
"$ROTA" profile --device-types "$TYPE" --scale full --pairs none --budget 4 --out "$OUT/$TYPE.csv" --resume
"$ROTA" profile --device-types "$TYPE" --scale full --pairs reference:3 --budget 3 --out "$OUT/$TYPE.csv" --resume
"$ROTA" table validate "$OUT/$TYPE.csv"
"$ROTA" table show "$OUT/$TYPE.csv" | tee "$OUT/$TYPE-solo.txt"
# repeatability: five fresh measurements of one model
for k in 1 2 3 4 5; do
  "$ROTA" profile --device-types "$TYPE" --scale full --models ResNet-50 --batch-sizes 64 --pairs none \
      --budget 3 --out "$OUT/repeat-$k.csv"
done
.venv/bin/python - "$OUT" <<'PY'
import statistics, sys
from pathlib import Path
from planner.formats.table import read_table
out = Path(sys.argv[1])
rates = [r["throughput"] for k in range(1, 6) for r in read_table(out / f"repeat-{k}.csv").rows]
cv = statistics.stdev(rates) / statistics.mean(rates) * 100
print(f"ResNet-50 bs64 steps/s over 5 runs: {[round(r, 2) for r in rates]}; CV {cv:.2f} %")
(out / "repeat_cv.txt").write_text(f"{cv:.3f}\n")
PY
