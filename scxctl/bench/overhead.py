"""The harness's floor: an uncontended ping-pong on one CPU with the very primitives the tests use.

Two threads of one worker process pinned to the test CPU post/wait two semaphores in turn; each
wake-up is timestamped exactly as in the tests (before FUTEX_WAKE, after FUTEX_WAIT returns). With
nothing else runnable on that CPU, the wake latency is the context switch plus the harness's own
cost around the syscalls: no measured latency can be lower, and a scheduler cannot be credited for
anything below it.
"""

from __future__ import annotations

from scxctl.bench import worker
from scxctl.bench.env import Env
from scxctl.bench.stats import LatencySummary, summarize

ROUND_TRIPS = 5000  # ~10k wake-ups, 2048 kept: enough for a stable p90 of the floor


def measure_overhead(env: Env, cpu: int, round_trips: int = ROUND_TRIPS) -> dict[str, object]:
    with worker.start("floor", [cpu], env) as w:
        sems = w.round(round_trips)
    (a, seen_a), (b, seen_b) = sems["ping"], sems["pong"]
    wake: LatencySummary = summarize(a + b, seen_a + seen_b)
    return {"cpu": cpu, "round_trips": round_trips, "wake": wake.to_json()}
