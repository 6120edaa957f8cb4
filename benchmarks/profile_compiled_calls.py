"""Time `Engine._compiled_arrays` and `Engine._compiled_rounds` per compiled call on recorded points.

python benchmarks/profile_compiled_calls.py 2 7   # indices into bench_simulate.recorded_points()
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare_round_loops as compare  # noqa: E402
from bench_simulate import GAVEL_TABLE, recorded_points  # noqa: E402

from planner.formats.gavel_json import import_gavel  # noqa: E402
from planner.rounds.engine import Engine  # noqa: E402

ACC = {"arrays": 0.0, "rounds": 0.0, "calls": 0}
_arrays, _rounds = Engine._compiled_arrays, Engine._compiled_rounds


def timed_arrays(self):
    started = time.perf_counter()
    out = _arrays(self)
    ACC["arrays"] += time.perf_counter() - started
    return out


def timed_rounds(self, until_s):
    started = time.perf_counter()
    out = _rounds(self, until_s)
    ACC["rounds"] += time.perf_counter() - started
    ACC["calls"] += 1
    return out


def main() -> None:
    Engine._compiled_arrays, Engine._compiled_rounds = timed_arrays, timed_rounds
    table = import_gavel(GAVEL_TABLE)
    for index in [int(a) for a in sys.argv[1:]]:
        ACC.update(arrays=0.0, rounds=0.0, calls=0)
        point = recorded_points()[index]
        _, wall = compare.run(table, point, "compiled")
        n = max(ACC["calls"], 1)
        print(
            f"{index} {point}: wall {wall:.2f} s, {ACC['calls']} calls, "
            f"_compiled_rounds {ACC['rounds']:.3f} s ({1e6 * ACC['rounds'] / n:.0f} us/call), "
            f"of which _compiled_arrays {ACC['arrays']:.3f} s ({1e6 * ACC['arrays'] / n:.0f} us/call)"
        )


if __name__ == "__main__":
    main()
