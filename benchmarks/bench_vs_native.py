"""`scxctl bench`'s worker against an independent native implementation, side by side in one run.

tests/native/schtest_ref.c implements schtest's adaptive_priority and a plain futex ping-pong from
schtest's definitions alone. This runs, in turn on the same CPU under whatever scheduler is loaded:
the bench's floor (its uncontended ping-pong) and the reference's plain ping-pong, then the bench's
adaptive_priority and the reference's, and prints the p50/p90 of each and their ratios. Targets:
floor within 1.5x of the plain ping-pong, fast-wake p90 within 2x of the reference's.

    make -C native && make -C tests/native
    .venv/bin/python -m benchmarks.bench_vs_native [--cpu N] [--seconds S] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from scxctl.bench import adaptive
from scxctl.bench.converge import Measurement
from scxctl.bench.env import Env
from scxctl.bench.overhead import ROUND_TRIPS, measure_overhead

REF = Path(__file__).resolve().parent.parent / "tests" / "native" / "build" / "schtest-ref"


def reference(*args: str) -> dict[str, object]:
    out = subprocess.run([str(REF), *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def line(what: str, mine: dict[str, float], ref: dict[str, float]) -> str:
    r50, r90 = mine["p50_ns"] / ref["p50_ns"], mine["p90_ns"] / ref["p90_ns"]
    return (f"{what:28} bench {mine['p50_ns'] / 1e3:7.1f} / {mine['p90_ns'] / 1e3:7.1f} us   "
            f"reference {ref['p50_ns'] / 1e3:7.1f} / {ref['p90_ns'] / 1e3:7.1f} us   "
            f"ratio p50 {r50:.2f}  p90 {r90:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, default=min(os.sched_getaffinity(0)))
    ap.add_argument("--seconds", type=float, default=5.0, help="adaptive_priority: min-time (max is 2x)")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    if not REF.is_file():
        raise SystemExit(f"{REF} is missing: run make -C tests/native")
    print("p50 / p90 of wake latencies; ratio = bench / reference")
    for _ in range(args.repeat):
        floor = measure_overhead(Env(), args.cpu)["wake"]
        plain = reference("pingpong", str(args.cpu), str(ROUND_TRIPS))["wake"]
        print(line("floor vs plain ping-pong", floor, plain))  # type: ignore[arg-type]
        out: list[Measurement] = []
        final = adaptive.run(Env(), args.cpu, args.seconds, 2 * args.seconds, out)
        ref = reference("adaptive", str(args.cpu), str(2 * args.seconds))
        print(line("adaptive fast wake", final.detail["fast"], ref["fast"]))  # type: ignore[arg-type]
        print(f"{'':28} metric bench {final.metric} (slow n={final.detail['slow']['count']}), "
              f"reference {ref['metric']} (slow n={ref['slow']['count']})")  # type: ignore[index]


if __name__ == "__main__":
    main()
