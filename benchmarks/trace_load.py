"""Wake-up loads that count and time their own wake-ups, to check `scxctl trace wakeup` against.

  pingpong  two processes (both named NAME) bounce a futex semaphore pair, each pinned to its own
            CPU so a wake never preempts the waker; every FUTEX_WAIT that slept and was woken is a
            wake-up, timed from just before the partner's FUTEX_WAKE to just after the wait returns
  wake      the sleep/wake load: one process (named NAME) sleeps on a futex until a waker process
            (named wake-load-waker, on the second CPU) wakes it once every PERIOD; every wake-up is
            timed from the waker's timestamp just before FUTEX_WAKE to just after the wait returns
  sleep     one process (named NAME) sleeping PERIOD in a loop with 1 ns timer slack; every sleep is
            a wake-up, timed as the oversleep (elapsed minus PERIOD), which also holds how late the
            timer interrupt came: no wake-up tracer sees that part

The loads run in native code (benchmarks/native/build/wake-load, built by `make -C benchmarks/native`):
the load's own clock must hold the wake-up and the syscalls around it, not an interpreter's time.
This module only starts the binary and passes its result on (stdlib only: it also runs in the guest).

Prints one JSON object: wakeups, round_trips (pingpong), rate_per_s, p50_ns/p90_ns (and mean_ns for
wake and sleep) of the latencies the load's own clock saw, and runs/run_delay_ns: the kernel's scheduler
statistics of the load's threads over the same window (waits for a CPU, and their total); wake also gives
voluntary_switches, the kernel's count of the sleeper's sleeps there. `--cgroup
DIR` moves the load into that cgroup v2 directory first.

Usage: python3 -m benchmarks.trace_load {pingpong,wake,sleep} --name NAME --seconds S [--period-us P]
       [--cgroup DIR]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from pathlib import Path

WAKE_LOAD = Path(__file__).resolve().parent / "native" / "build" / "wake-load"


def _run(mode: str, name: str, seconds: float, *extra: str) -> dict[str, object]:
    """Run wake-load MODE and return its JSON object; SystemExit with one line when it fails."""
    if not WAKE_LOAD.is_file():
        raise SystemExit(f"trace_load: {WAKE_LOAD} is missing: run `make -C benchmarks/native`")
    cmd = [str(WAKE_LOAD), mode, "--name", name, "--seconds", repr(float(seconds)), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise SystemExit(lines[-1] if lines else f"trace_load: wake-load exited {proc.returncode}")
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def pingpong(name: str, seconds: float) -> dict[str, object]:
    return _run("pingpong", name, seconds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("pingpong", "wake", "sleep"))
    p.add_argument("--name", required=True, help="task name (comm) of the load's processes")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--period-us", type=float, default=1000.0,
                   help="wake: the waker's period; sleep: the sleep length")
    p.add_argument("--cgroup", type=Path, help="move into this cgroup v2 directory first")
    args = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    extra = ["--cgroup", str(args.cgroup)] if args.cgroup is not None else []
    if args.mode != "pingpong":
        extra += ["--period-us", repr(args.period_us)]
    out = _run(args.mode, args.name, args.seconds, *extra)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
