"""Wake-up loads that count and time their own wake-ups, to check `scxctl trace wakeup` against.

  pingpong  two processes (both named NAME) bounce a futex semaphore pair, each pinned to its own
            CPU so a wake never preempts the waker; every FUTEX_WAIT that slept and was woken is a
            wake-up, timed from just before the partner's FUTEX_WAKE to just after the wait returns
            (scxctl.bench.futex, the same timestamps `scxctl bench` reports)
  sleep     one process (named NAME) sleeping PERIOD in a loop with 1 ns timer slack; every sleep is
            a wake-up, timed as the oversleep (elapsed minus PERIOD)

Prints one JSON object: wakeups, round_trips (pingpong), rate_per_s, p50_ns/p90_ns of the latencies
the load's own clock saw. `--cgroup DIR` moves the load into that
cgroup v2 directory first.

Usage: python3 -m benchmarks.trace_load {pingpong,sleep} --name NAME --seconds S [--period-us P]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from scxctl.bench.futex import Arena

PR_SET_NAME = 15
PR_SET_TIMERSLACK = 29
_libc = ctypes.CDLL(None, use_errno=True)


def _name(name: str) -> None:
    _libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def _pct(samples: list[int], q: float) -> int | None:
    if not samples:
        return None
    s = sorted(samples)
    return s[min(int(q * len(s)), len(s) - 1)]


def _cpus() -> list[int]:
    cpus = sorted(os.sched_getaffinity(0))
    return cpus if len(cpus) >= 2 else cpus * 2


CPUS = _cpus()  # pingpong: A on the first, B on the second; sleep: the first


def pingpong(name: str, seconds: float) -> dict[str, object]:
    arena = Arena()
    ping, pong = arena.semaphore(), arena.semaphore()
    stop = arena.counter()
    trips = arena.counter()
    cpu_a, cpu_b = CPUS[:2]
    child = os.fork()
    if child == 0:  # B: answers every ping until told to stop
        try:
            _name(name)
            os.sched_setaffinity(0, {cpu_b})
            while True:
                ping.wait()
                if stop.value:
                    break
                pong.post()
        finally:
            os._exit(0)
    _name(name)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu_a})
    end = time.monotonic() + seconds
    n = 0
    t0 = time.monotonic()
    while time.monotonic() < end:
        ping.post()
        pong.wait()
        n += 1
    elapsed = time.monotonic() - t0
    trips.value = n
    stop.value = 1
    ping.post()
    os.waitpid(child, 0)
    os.sched_setaffinity(0, allowed)  # a caller's later children are not pinned
    a, seen_a = ping.collect()
    b, seen_b = pong.collect()
    # the stop post's wake-up of B is a real wake-up too (its sample is in `a`)
    samples = a + b
    return {
        "mode": "pingpong",
        "wakeups": seen_a + seen_b,
        "round_trips": n,
        "rate_per_s": round(n / elapsed, 1),
        "p50_ns": _pct(samples, 0.5),
        "p90_ns": _pct(samples, 0.9),
        "samples": len(samples),
    }


def sleeper(name: str, seconds: float, period_ns: int) -> dict[str, object]:
    _name(name)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {CPUS[0]})
    _libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    samples: list[int] = []
    clock = time.clock_gettime_ns
    mono = time.CLOCK_MONOTONIC
    end = clock(mono) + int(seconds * 1e9)
    while clock(mono) < end:
        t0 = clock(mono)
        time.sleep(period_ns / 1e9)
        samples.append(clock(mono) - t0 - period_ns)
    os.sched_setaffinity(0, allowed)
    return {
        "mode": "sleep",
        "wakeups": len(samples),
        "rate_per_s": round(len(samples) / seconds, 1),
        "p50_ns": _pct(samples, 0.5),
        "p90_ns": _pct(samples, 0.9),
        "mean_ns": round(statistics.fmean(samples)) if samples else None,
        "samples": len(samples),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("pingpong", "sleep"))
    p.add_argument("--name", required=True, help="task name (comm) of the load's processes")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--period-us", type=float, default=1000.0, help="sleep: the sleep length")
    p.add_argument("--cgroup", type=Path, help="move into this cgroup v2 directory first")
    args = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if args.cgroup is not None:
        (args.cgroup / "cgroup.procs").write_text(f"{os.getpid()}\n")
    if args.mode == "pingpong":
        out = pingpong(args.name, args.seconds)
    else:
        out = sleeper(args.name, args.seconds, int(args.period_us * 1000))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
