"""Run every benchmarks/bench_*.py in its own process (`make bench`).

Each benchmark prints its own table of timings and ratios measured in the
same run; this driver only sequences them and fails if one fails.
Pass --quick to forward a smaller configuration to each.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    extra = [a for a in sys.argv[1:] if a == "--quick"]
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"\n=== {script.name} ===", flush=True)
        started = time.perf_counter()
        # only scripts that know --quick get it
        forwarded = extra if "--quick" in script.read_text(encoding="utf-8") else []
        code = subprocess.call([sys.executable, str(script), *forwarded], cwd=HERE.parent)
        print(f"--- {script.name}: exit {code}, {time.perf_counter() - started:.1f} s", flush=True)
        if code:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
