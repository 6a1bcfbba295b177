"""The harness's floor: an uncontended ping-pong on one CPU with the very primitives the tests use.

Two processes pinned to the test CPU post/wait two semaphores in turn; each wake-up is timestamped
exactly as in the tests (before FUTEX_WAKE, after FUTEX_WAIT returns). With nothing else runnable
on that CPU, the wake latency is the context switch plus our interpreter's cost around the syscalls:
no measured latency can be lower, and a scheduler cannot be credited for anything below it.
"""

from __future__ import annotations

import time

from scxctl.bench.env import Env
from scxctl.bench.futex import Arena
from scxctl.bench.procs import Controller, WorkloadGroup, wait_ready
from scxctl.bench.stats import LatencySummary, summarize

ROUND_TRIPS = 1000


def measure_overhead(env: Env, cpu: int, round_trips: int = ROUND_TRIPS) -> dict[str, object]:
    arena = Arena()
    ping, pong = arena.semaphore(), arena.semaphore()
    ctl = Controller(arena)

    def pinger() -> None:
        while True:
            for _ in range(ctl.get_iters()):
                ping.post()
                pong.wait()

    def ponger() -> None:
        while True:
            ping.wait()
            pong.post()

    with WorkloadGroup(env.sched_ext) as group:
        group.spawn("pong", ponger, {cpu})
        group.spawn("ping", pinger, {cpu})
        deadline = time.monotonic() + env.round_timeout_s
        wait_ready([ctl.ready], group, env.tick, deadline, "the overhead ping-pong")
        ping.collect()
        pong.collect()
        ctl.begin(round_trips)
        wait_ready([ctl.ready], group, env.tick, deadline, "the overhead ping-pong")
        a, seen_a = ping.collect()
        b, seen_b = pong.collect()
    wake: LatencySummary = summarize(a + b, seen_a + seen_b)
    return {"cpu": cpu, "round_trips": round_trips, "wake": wake.to_json()}
