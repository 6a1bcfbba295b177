"""What `scxctl trace wakeup` costs: a futex ping-pong's round-trip rate with and without it, and the
time from starting `scxctl trace` to its first printed interval (bcc compiles at start).

The tracer's programs (filtered on the load's name, and with no filter) and two floors are compiled
once, then attached in turn between rounds: untraced, the floors, filtered, unfiltered, ROUNDS
times, each taking the first place in turn, so the machine's drift and a run's place in its round
fall on every row alike (use a multiple of 5 rounds). The floors are empty programs on the same
three tracepoints (what any tracer of them costs: the kernel's dispatch to BPF) and the same with a
clock read in each (what any tracer that times its events costs at least); the rows above them are
what the tracer's logic adds. Each run is divided by its own round's untraced run; a row's cost is
1 - the median of those ratios, with a bootstrap 95% interval: the interval says what the rounds
can tell apart. Target: filtered < 5% slower.

Run it in a guest whose clock counts instructions (`--icount 0`): there a run's rate repeats to
0.1% and the intervals are a fraction of a point wide. Under plain TCG the rate of a run moves by
7-15% from the next with the host's load and the intervals are 10-25 points wide: too wide for a
5% target. The instruction-counted guest is the harsher measure: an idle vCPU's wake-up, most of
a round trip's time under plain TCG and several microseconds on hardware, costs it no time, so
the tracer's instructions weigh more in a round trip. Time to the first interval is guest time
too: take it from a plain guest.

The cross-check, independent of the round-trip rate: the kernel's own accounting of each
program's run time (kernel.bpf_stats_enabled, read from the programs' fdinfo) over one more traced
ping-pong per program and pass (three passes, taking turns), as nanoseconds per round trip, the
median of the passes. It holds the programs' bodies, not the dispatch to them (the empty
programs' time is the accounting's own cost per run).
Needs root, bcc and the running kernel's headers; in the guest:

  python -m tools.vm run --icount 0 --headers -- python3 -m benchmarks.trace_overhead

Usage: python3 -m benchmarks.trace_overhead [--seconds S] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.trace_load import pingpong
from scxctl.bench.ab_stats import median_ci
from scxctl.bench.workload import rotated
from scxctl.trace.wakeup import Selector, compile_for, compile_program

NAME = "scxtov"
TARGET = 0.05
SCXCTL = [sys.executable, "-m", "scxctl"]
TRACEPOINTS = ("sched_waking", "sched_wakeup_new", "sched_switch")
FLOOR = "".join(f"RAW_TRACEPOINT_PROBE({tp}) {{ return 0; }}\n" for tp in TRACEPOINTS)
# the compiler keeps a helper call whose result decides the return value
CLOCK = "".join(f"RAW_TRACEPOINT_PROBE({tp}) {{ return bpf_ktime_get_ns() == 1; }}\n" for tp in TRACEPOINTS)
EMPTY = "floor (empty programs)"
TIMED = "floor + a clock read"


def first_interval_s() -> tuple[float, float]:
    """(seconds from exec to the first interval line, of which bcc's compile) for a 1 s interval."""
    t0 = time.monotonic()
    cmd = [*SCXCTL, "trace", "wakeup", "--comm", NAME, "--interval", "1", "--duration", "1.5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    first = None
    for line in proc.stdout:
        if line.startswith("[") and first is None:
            first = time.monotonic() - t0
    err = proc.stderr.read()
    proc.wait()
    if first is None or proc.returncode != 0:
        raise SystemExit(f"scxctl trace failed ({proc.returncode}): {err.strip()[-300:]}")
    m = re.search(r"compiled in ([0-9.]+) s", err)
    return first, float(m.group(1)) if m else 0.0


def attach(bpf: Any, on: bool) -> None:
    """Attach or detach a loaded program's raw tracepoint probes (bcc names them raw_tracepoint__TP)."""
    for tp in TRACEPOINTS:
        if on:
            bpf.attach_raw_tracepoint(tp=tp.encode(), fn_name=f"raw_tracepoint__{tp}".encode())
        else:
            bpf.detach_raw_tracepoint(tp=tp.encode())


def rate(seconds: float) -> float:
    return float(pingpong(NAME, seconds)["rate_per_s"])  # type: ignore[arg-type]


BPF_STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def run_time_ns(bpf: Any) -> int:
    """The kernel's total run time of a loaded program's functions (bpf_stats must be on)."""
    total = 0
    for fn in bpf.funcs.values():
        info = Path(f"/proc/self/fdinfo/{fn.fd}").read_text()
        m = re.search(r"^run_time_ns:\s*(\d+)", info, re.M)
        total += int(m.group(1)) if m else 0
    return total


def program_ns_per_trip(bpf: Any, seconds: float) -> float:
    """Run time of the programs per round trip over one traced ping-pong."""
    before = run_time_ns(bpf)
    attach(bpf, True)
    try:
        trips = int(pingpong(NAME, seconds)["round_trips"])  # type: ignore[call-overload]
    finally:
        attach(bpf, False)
    return (run_time_ns(bpf) - before) / max(trips, 1)


def compile_programs() -> dict[str, Any]:
    """The floors and the tracer's programs, compiled and loaded (bcc attaches them): label -> object."""
    return {EMPTY: compile_program(FLOOR), TIMED: compile_program(CLOCK),
            f"traced --comm {NAME}": compile_for(Selector(comms=(NAME,))),
            "traced, no filter": compile_for(Selector())}


def rates_by_round(programs: dict[str, Any], rounds: int, seconds: float) -> dict[str, list[float]]:
    """The round-trip rate of each variant (untraced and each program attached), per round."""
    variants: list[tuple[str, Any]] = [("untraced", None), *programs.items()]
    rows: dict[str, list[float]] = {label: [] for label, _ in variants}
    on: Any = None  # the program attached now
    try:
        for i in range(rounds):
            # each variant takes each place in a round in turn: a run's place (first after a
            # compile, right after an attach) must not fall on one row only
            for label, bpf in rotated(variants, i):
                # The next program is attached before the last one leaves: the tracepoints'
                # static keys then flip only between untraced and traced runs. Each flip
                # patches __schedule's code while the other CPU runs it; under multi-threaded
                # TCG one such patch in some hundreds ended the guest ("Oops: int3").
                if bpf is not None:
                    attach(bpf, True)
                if on is not None:
                    attach(on, False)
                on = bpf
                rows[label].append(rate(seconds))
    finally:
        if on is not None:
            attach(on, False)
    return rows


def run_time_per_trip(programs: dict[str, Any], seconds: float) -> dict[str, float]:
    """Each program's run time per round trip (kernel.bpf_stats), the median of three passes."""
    was = BPF_STATS.read_text().strip()
    BPF_STATS.write_text("1")
    try:
        # three passes, each program first in one: measured once each in a fixed order, the
        # filtered program (always right after the floor) read 1.2-1.6x the unfiltered one's
        # time in four boots; taking turns, the two were alike
        samples: dict[str, list[float]] = {k: [] for k in programs}
        items = list(programs.items())
        for i in range(3):
            for k, bpf in rotated(items, i):
                samples[k].append(program_ns_per_trip(bpf, seconds))
        return {k: statistics.median(v) for k, v in samples.items()}
    finally:
        BPF_STATS.write_text(was)


def report(rows: dict[str, list[float]], per_trip: dict[str, float], first: float, compiled: float) -> None:
    """The table, the verdict against TARGET, the run times, and the whole as one JSON line."""
    med = {k: statistics.median(v) for k, v in rows.items()}
    b = med["untraced"]
    # each run against the untraced run of its own round, seconds apart: the host's drift, which
    # moves whole stretches of rounds by 10-20%, falls out of the ratio
    ratios = {k: [x / u for x, u in zip(v, rows["untraced"], strict=True)] for k, v in rows.items()}
    cost = {k: 1 - statistics.median(r) for k, r in ratios.items()}
    ci = {k: median_ci(r) for k, r in ratios.items()}
    # the same pairs as time added to a round trip: comparable across guests whose round trips
    # differ (an idle CPU's wake-up under emulation is most of one)
    added = {k: statistics.median(1e9 / x - 1e9 / u for x, u in zip(v, rows["untraced"], strict=True))
             for k, v in rows.items()}
    print(f"{'futex ping-pong':<24} {'round trips/s':>14} {'cost':>7} {'95% interval':>16} "
          f"{'ns/trip':>8}  rounds")
    for label, v in rows.items():
        lo, hi = ci[label]
        print(f"{label:<24} {med[label]:>14.0f} {cost[label] * 100:>6.1f}% "
              f"{(1 - hi) * 100:>6.1f}% - {(1 - lo) * 100:>5.1f}% {added[label]:>8.0f}  "
              f"{[round(x) for x in v]}")
    overhead = cost[f"traced --comm {NAME}"]
    floor, timed = cost[EMPTY], cost[TIMED]
    print(f"overhead (filtered): {overhead * 100:.1f}% (target < {TARGET * 100:.0f}%); the floors on the "
          f"same tracepoints: empty programs {floor * 100:.1f}%, with a clock read {timed * 100:.1f}%; "
          "cost = 1 - the median of each run's rate over its round's untraced rate")
    trip_ns = 1e9 / b
    print(f"program run time per round trip (kernel.bpf_stats; a round trip untraced: {trip_ns:.0f} ns):")
    for label, ns in per_trip.items():
        print(f"  {label:<24} {ns:>8.0f} ns  {ns / trip_ns * 100:5.2f}%")
    print(f"time to first interval: {first:.1f} s (bcc compile and load {compiled:.1f} s)")
    print(json.dumps({"rates": rows, "program_ns_per_trip": {k: round(v) for k, v in per_trip.items()},
                      "overhead_filtered": round(overhead, 4),
                      "overhead_unfiltered": round(cost["traced, no filter"], 4),
                      "overhead_floor": round(floor, 4),
                      "overhead_floor_clock": round(timed, 4),
                      "added_ns_per_trip": {k: round(v) for k, v in added.items()},
                      "overhead_95": {k: [round(1 - hi, 4), round(1 - lo, 4)] for k, (lo, hi) in ci.items()},
                      "first_interval_s": round(first, 2), "compile_s": compiled}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args(argv)
    first, compiled = first_interval_s()
    programs = compile_programs()
    try:
        for bpf in programs.values():
            attach(bpf, False)
        rows = rates_by_round(programs, args.rounds, args.seconds)
        per_trip = run_time_per_trip(programs, args.seconds)
    finally:
        for bpf in programs.values():
            bpf.cleanup()
    report(rows, per_trip, first, compiled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
