"""Each thread's average burst (CPU time per voluntary sleep) over a window, from /proc.

A policy that classifies tasks by their bursts sees what this prints; under TCG a load's computation
slows down several times while its sleeps do not, so the same program can fall in another class
in the guest than on hardware. Linux only (schedstat is in every Debian kernel).

Usage: python3 benchmarks/thread_bursts.py PID [--delay S] [--window S]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def snapshot(pid: int) -> dict[int, tuple[str, int, int, int]]:
    """{tid: (comm, CPU ns, voluntary switches, involuntary switches)} of the threads alive now."""
    out: dict[int, tuple[str, int, int, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            run_ns = int((task / "schedstat").read_text().split()[0])
            fields = dict(ln.split(":", 1) for ln in (task / "status").read_text().splitlines() if ":" in ln)
        except (OSError, ValueError):
            continue  # the thread exited between the listing and the reads
        out[int(task.name)] = (comm, run_ns, int(fields["voluntary_ctxt_switches"]),
                               int(fields["nonvoluntary_ctxt_switches"]))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pid", type=int)
    p.add_argument("--delay", type=float, default=2.0, help="seconds to wait first (start-up)")
    p.add_argument("--window", type=float, default=3.0)
    args = p.parse_args()
    time.sleep(args.delay)
    before = snapshot(args.pid)
    time.sleep(args.window)
    after = snapshot(args.pid)
    for tid, (comm, run_ns, vol, invol) in sorted(after.items()):
        if tid not in before:
            continue
        _, run0, vol0, invol0 = before[tid]
        sleeps = vol - vol0
        print(f"{comm:16s} {tid:>7}: CPU {(run_ns - run0) / 1e6 / args.window:6.0f} ms/s, "
              f"{sleeps / args.window:6.1f} sleeps/s, {(invol - invol0) / args.window:6.1f} preempted/s, "
              f"burst {(run_ns - run0) / max(sleeps, 1) / 1e6:7.2f} ms")


if __name__ == "__main__":
    main()
