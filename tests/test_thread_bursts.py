"""benchmarks/thread_bursts.py against a process whose bursts are known: 20 ms of CPU, then a sleep."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.thread_bursts import snapshot

# 20 ms of the thread's own CPU time (contention on the host does not change it), then 5 ms asleep
BURSTER = """
import time
while True:
    end = time.thread_time() + 0.020
    while time.thread_time() < end:
        pass
    time.sleep(0.005)
"""


def test_a_threads_burst_is_its_cpu_time_per_sleep() -> None:
    child = subprocess.Popen([sys.executable, "-c", BURSTER])
    try:
        time.sleep(0.3)
        before = snapshot(child.pid)
        time.sleep(1.0)
        after = snapshot(child.pid)
    finally:
        child.kill()
        child.wait()
    (tid,) = after  # one thread
    _, run0, vol0, _ = before[tid]
    comm, run_ns, vol, _ = after[tid]
    sleeps = vol - vol0
    assert comm.startswith("python") and sleeps >= 5, (comm, sleeps)
    burst_ms = (run_ns - run0) / sleeps / 1e6
    assert 15 <= burst_ms <= 30, burst_ms
