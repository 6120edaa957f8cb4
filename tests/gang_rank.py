"""A torch-free rank of a profiled gang (tests): records what it was started with, then steps.

    python gang_rank.py OUT_DIR FAIL_RANK

Writes OUT_DIR/w<WORLD_SIZE>-rank<RANK>.json (its torchrun variables, ROTA_* and the Slurm node
it runs on), then spins 2 ms per step; rank 0 prints `ROTA_STEP <n>`; rank FAIL_RANK (-1: none)
exits 3 at its fifth step, saying why on stderr.
"""

import json
import os
import sys
import time

KEYS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "ROTA_DIST_BACKEND",
    "ROTA_DEVICE",
    "ROTA_BATCH_SIZE",
    "OMP_NUM_THREADS",
    "SLURMD_NODENAME",
)


def main() -> None:
    out, fail_rank = sys.argv[1], int(sys.argv[2])
    seen = {key: os.environ.get(key) for key in KEYS}
    name = f"w{os.environ.get('WORLD_SIZE', '1')}-rank{os.environ.get('RANK', '0')}.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(seen, f)
    rank = int(os.environ.get("RANK", "0"))
    step = 0
    while True:
        step += 1
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
        if rank == fail_rank and step == 5:
            print("rank gives up: bad shard", file=sys.stderr, flush=True)
            sys.exit(3)
        if rank == 0:
            print(f"ROTA_STEP {step}", flush=True)


if __name__ == "__main__":
    main()
