"""The cost of `scxctl bench`'s one-process-per-role harness: its wake-latency floor vs. threads.

Runs, side by side in one invocation, the same futex ping-pong on one CPU (1) between two processes
(what the bench does, `overhead.measure_overhead`) and (2) between two threads of one Python process
(each wake-up must also re-take the GIL). Prints p50/p90 and the ratio: what the process design costs
(or saves) at the floor. It does not model a spinning GIL holder, the case that rules threads out.

    .venv/bin/python -m benchmarks.bench_overhead [--cpu N] [--round-trips N]
"""

from __future__ import annotations

import argparse
import os
import threading

from scxctl.bench.env import Env
from scxctl.bench.futex import Arena
from scxctl.bench.overhead import measure_overhead
from scxctl.bench.stats import summarize


def threads_ping_pong(cpu: int, round_trips: int) -> tuple[float, float]:
    os.sched_setaffinity(0, {cpu})
    arena = Arena()
    ping, pong = arena.semaphore(), arena.semaphore()

    def ponger() -> None:
        for _ in range(round_trips):
            ping.wait()
            pong.post()

    t = threading.Thread(target=ponger)
    t.start()
    for _ in range(round_trips):
        ping.post()
        pong.wait()
    t.join()
    a, sa = ping.collect()
    b, sb = pong.collect()
    s = summarize(a + b, sa + sb)
    return s.p50_ns or 0.0, s.p90_ns or 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cpu", type=int, default=min(os.sched_getaffinity(0)))
    ap.add_argument("--round-trips", type=int, default=1000)
    args = ap.parse_args()
    w = measure_overhead(Env(), args.cpu, args.round_trips)["wake"]
    p50, p90 = w["p50_ns"], w["p90_ns"]
    t50, t90 = threads_ping_pong(args.cpu, args.round_trips)
    print(f"{'harness':42} {'p50':>10} {'p90':>10}")
    print(f"{'processes (scxctl bench)':42} {p50 / 1e3:9.1f}us {p90 / 1e3:9.1f}us")
    print(f"{'threads, one process':42} {t50 / 1e3:9.1f}us {t90 / 1e3:9.1f}us")
    print(f"ratio threads/processes: p50 {t50 / p50:.2f}, p90 {t90 / p90:.2f}")


if __name__ == "__main__":
    main()
