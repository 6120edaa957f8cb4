#!/usr/bin/env bash
# One prepared run of everything GPU-specific, for a machine with an NVIDIA GPU.
# Not part of `make test` / `make bench` (they must pass without a GPU). Writes into $OUT
# (default out/gpu): the GPU tests' log, the device list, a full-scale solo table of every
# reference model with restart costs, a few co-located pairs, and the repeat CV of one model.
# Each phase has its own time limit, and rows are appended as they finish, so a phase cut
# short keeps what it measured and the later phases still run.
#
#   bash benchmarks/gpu_check.sh                   # ~9 minutes at most on one H200
#
# A measurement takes 10-20 s on an H200 (a fresh Python, CUDA start-up, warm-up, the
# budget), so the 180 s box holds about 12 of the 34 job types: run the script again and
# --resume measures the next ones.
#   PY=python3 bash benchmarks/gpu_check.sh        # a Python that already has torch and rota's needs
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
mkdir -p "$OUT"
PY="${PY:-.venv/bin/python}"
[ -x "$PY" ] || command -v "$PY" >/dev/null || make .venv/.profiler
ROTA=("$PY" -m planner.cli)
export PYTHONUNBUFFERED=1
phase() { echo "=== $1 ($(date -u +%T))"; }


phase "devices"
"${ROTA[@]}" profile --list-devices --json | tee "$OUT/devices.json"
TYPE=$("$PY" -c 'import json,sys; d=[x for x in json.load(open(sys.argv[1])) if x["backend"]=="cuda"]; print(d[0]["worker_type"] if d else "")' "$OUT/devices.json")
if [ -z "$TYPE" ]; then echo "no CUDA device found"; exit 1; fi
TABLE="$OUT/$TYPE.csv"

phase "solo rows of every reference model at real scale, with restart costs"
timeout 180 "${ROTA[@]}" profile --device-types "$TYPE" --scale full --pairs none --scale-factors 1 \
  --budget 1.5 --out "$TABLE" --resume

phase "co-located pairs"
timeout 80 "${ROTA[@]}" profile --device-types "$TYPE" --scale full --scale-factors 1 --budget 1.5 \
  --models ResNet-18,ResNet-50,LM,Transformer,Recommendation --batch-sizes 16,32,512,5 \
  --pairs 'ResNet-50@32+ResNet-18@16,ResNet-50@32+LM@5,Transformer@32+LM@5,Recommendation@512+ResNet-18@16,ResNet-50@32+ResNet-50@32' \
  --out "$TABLE" --resume

phase "the table"
"${ROTA[@]}" table validate "$TABLE"
"${ROTA[@]}" table show "$TABLE" | tee "$OUT/$TYPE-table.txt"

phase "repeatability: three fresh measurements of one model"
REPEAT=$(mktemp -d)
for k in 1 2 3; do
  timeout 30 "${ROTA[@]}" profile --device-types "$TYPE" --scale full --models ResNet-50 --batch-sizes 64 \
    --pairs none --scale-factors 1 --no-restart-cost --budget 2 --out "$REPEAT/repeat-$k.csv"
done
"$PY" - "$OUT" "$REPEAT" <<'PY'
import statistics, sys
from pathlib import Path
from planner.formats.table import read_table
out, repeat = Path(sys.argv[1]), Path(sys.argv[2])
files = [repeat / f"repeat-{k}.csv" for k in (1, 2, 3)]
rates = [r["throughput"] for f in files if f.exists() for r in read_table(f).rows]
if len(rates) >= 2:
    cv = statistics.stdev(rates) / statistics.mean(rates) * 100
    print(f"ResNet-50 bs64 steps/s over {len(rates)} runs: {[round(r, 2) for r in rates]}; CV {cv:.2f} %")
    (out / "repeat_cv.txt").write_text(f"{cv:.3f} {' '.join(f'{r:.4f}' for r in rates)}\n")
PY
phase "the GPU tests"
timeout ${TEST_TIMEOUT:-240} "$PY" -m pytest -q -p no:cacheprovider -x --durations=5 tests/test_gpu.py 2>&1 | tee "$OUT/test_gpu.log"
phase "done"
