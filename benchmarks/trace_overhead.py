"""What `scxctl trace wakeup` costs: a futex ping-pong's round-trip rate with and without it, and the
time from starting `scxctl trace` to its first printed interval (bcc compiles at start).

The tracer's programs (filtered on the load's name, and with no filter) and a floor, empty programs
on the same three tracepoints, are compiled once, then attached in turn between rounds: untraced,
floor, filtered, unfiltered, ROUNDS times, so the machine's drift falls on every row alike. The
floor is what any tracer of these tracepoints costs (the kernel's own dispatch to BPF); the rows
above it are what the program does. Ratios are of the medians. Target: filtered < 5% slower.

The cross-check, independent of the round-trip rate and its noise: the kernel's own accounting of
each program's run time (kernel.bpf_stats_enabled, read from the programs' fdinfo) over one more
traced ping-pong per program, as nanoseconds per round trip. It holds the programs' bodies, not the
dispatch to them (the floor row's time is the accounting's own cost per run).
Needs root, bcc and the running kernel's headers; in the guest:

  python -m tools.vm run --headers -- python3 -m benchmarks.trace_overhead

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
from scxctl.trace.wakeup import Selector, compile_for, compile_program

NAME = "scxtov"
TARGET = 0.05
SCXCTL = [sys.executable, "-m", "scxctl"]
TRACEPOINTS = ("sched_waking", "sched_wakeup_new", "sched_switch")
FLOOR = "".join(f"RAW_TRACEPOINT_PROBE({tp}) {{ return 0; }}\n" for tp in TRACEPOINTS)


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args(argv)
    first, compiled = first_interval_s()
    programs = {"floor (empty programs)": compile_program(FLOOR),
                f"traced --comm {NAME}": compile_for(Selector(comms=(NAME,))),
                "traced, no filter": compile_for(Selector())}
    try:
        for bpf in programs.values():
            attach(bpf, False)
        rows: dict[str, list[float]] = {"untraced": []} | {k: [] for k in programs}
        for _ in range(args.rounds):
            rows["untraced"].append(rate(args.seconds))
            for label, bpf in programs.items():
                attach(bpf, True)
                try:
                    rows[label].append(rate(args.seconds))
                finally:
                    attach(bpf, False)
        was = BPF_STATS.read_text().strip()
        BPF_STATS.write_text("1")
        try:
            per_trip = {k: program_ns_per_trip(bpf, args.seconds) for k, bpf in programs.items()}
        finally:
            BPF_STATS.write_text(was)
    finally:
        for bpf in programs.values():
            bpf.cleanup()
    med = {k: statistics.median(v) for k, v in rows.items()}
    b = med["untraced"]
    print(f"{'futex ping-pong':<24} {'round trips/s':>14} {'vs untraced':>12}  rounds")
    for label, v in rows.items():
        print(f"{label:<24} {med[label]:>14.0f} {med[label] / b:>11.3f}x  {[round(x) for x in v]}")
    overhead = 1 - med[f"traced --comm {NAME}"] / b
    floor = 1 - med["floor (empty programs)"] / b
    print(f"overhead (filtered): {overhead * 100:.1f}% (target < {TARGET * 100:.0f}%); the floor, "
          f"empty programs on the same tracepoints: {floor * 100:.1f}%")
    trip_ns = 1e9 / b
    print(f"program run time per round trip (kernel.bpf_stats; a round trip untraced: {trip_ns:.0f} ns):")
    for label, ns in per_trip.items():
        print(f"  {label:<24} {ns:>8.0f} ns  {ns / trip_ns * 100:5.2f}%")
    print(f"time to first interval: {first:.1f} s (bcc compile and load {compiled:.1f} s)")
    print(json.dumps({"rates": rows, "program_ns_per_trip": {k: round(v) for k, v in per_trip.items()},
                      "overhead_filtered": round(overhead, 4),
                      "overhead_unfiltered": round(1 - med["traced, no filter"] / b, 4),
                      "overhead_floor": round(floor, 4),
                      "first_interval_s": round(first, 2), "compile_s": compiled}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
