"""A torch-free rank of a profiled gang (tests): records what it was started with, then steps.

    python gang_rank.py OUT_DIR FAIL_RANK

Writes OUT_DIR/w<WORLD_SIZE>-rank<RANK>.json (its torchrun variables, ROTA_* and the node it
runs on, under Slurm or the test Ray cluster), waits for every rank's file (as a real gang waits
in its rendezvous), then spins 2 ms per step; rank 0 prints `ROTA_STEP <n>`; rank FAIL_RANK
(-1: none) exits 3 at its fifth step, saying why on stderr.
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
    "ROTA_TEST_NODE",  # the test Ray cluster's node name
)

RENDEZVOUS_S = 300.0


def main() -> None:
    out, fail_rank = sys.argv[1], int(sys.argv[2])
    seen = {key: os.environ.get(key) for key in KEYS}
    name = f"w{os.environ.get('WORLD_SIZE', '1')}-rank{os.environ.get('RANK', '0')}.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(seen, f)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    deadline = time.monotonic() + RENDEZVOUS_S
    while not all(os.path.exists(os.path.join(out, f"w{world}-rank{r}.json")) for r in range(world)):
        if time.monotonic() > deadline:
            sys.exit(f"rank {rank}: the other ranks did not come within {RENDEZVOUS_S:.0f} s")
        time.sleep(0.05)
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
