"""What `scxctl trace wakeup` costs: a futex ping-pong's round-trip rate with and without it, and the
time from starting `scxctl trace` to its first printed interval (bcc compiles at start).

N rounds untraced, N traced (filtered on the load's name), N traced without a filter (every task
stamped), N untraced again (one tracer each: bcc compiles for tens of seconds under TCG); the ratio
is of the medians. Target: < 5% slower.
Needs root, bcc and the running kernel's headers; in the guest:

  python -m tools.vm run --headers -- python3 -m benchmarks.trace_overhead

Usage: python3 -m benchmarks.trace_overhead [--seconds S] [--rounds N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

from benchmarks.trace_load import pingpong

NAME = "scxtov"
TARGET = 0.05
SCXCTL = [sys.executable, "-m", "scxctl"]


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


@contextlib.contextmanager
def tracing(filtered: bool) -> Iterator[None]:
    """`scxctl trace wakeup` attached (filtered on the load's name, or every task) for the block."""
    args = ["--comm", NAME] if filtered else []
    proc = subprocess.Popen([*SCXCTL, "trace", "wakeup", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # attached once it says so
        if line.startswith("tracing"):
            break
    else:
        raise SystemExit(f"scxctl trace exited ({proc.wait()}) before attaching")
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait()


def rates(n: int, seconds: float) -> list[float]:
    return [float(pingpong(NAME, seconds)["rate_per_s"]) for _ in range(n)]  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    first, compiled = first_interval_s()
    base = rates(args.rounds, args.seconds)
    with tracing(filtered=True):
        filt = rates(args.rounds, args.seconds)
    with tracing(filtered=False):
        every = rates(args.rounds, args.seconds)
    base += rates(args.rounds, args.seconds)  # untraced before and after: drift shows as spread
    b = statistics.median(base)
    rows = [("untraced", b), (f"traced --comm {NAME}", statistics.median(filt)),
            ("traced, no filter", statistics.median(every))]
    print(f"{'futex ping-pong':<24} {'round trips/s':>14} {'vs untraced':>12}")
    for label, rate in rows:
        print(f"{label:<24} {rate:>14.0f} {rate / b:>11.3f}x")
    overhead = 1 - statistics.median(filt) / b
    print(f"overhead (filtered): {overhead * 100:.1f}% (target < {TARGET * 100:.0f}%)")
    print(f"time to first interval: {first:.1f} s (bcc compile and load {compiled:.1f} s)")
    print(json.dumps({"rates": {"untraced": base, "filtered": filt, "unfiltered": every},
                      "overhead_filtered": round(overhead, 4),
                      "overhead_unfiltered": round(1 - statistics.median(every) / b, 4),
                      "first_interval_s": round(first, 2), "compile_s": compiled}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
