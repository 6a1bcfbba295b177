"""schtest's fairness: do pinned and unpinned CPU hogs get comparable CPU time?

N = logical CPUs (online): one busy spinner pinned to each CPU plus N unpinned ones, 2N
single-threaded processes. Each round every process spins `iters` ms of wall-clock time. Per-process
CPU time is cumulative (utime + stime over /proc/PID/task/*/stat, as schtest's total_time), so the
later, longer rounds dominate. metric = p10(CPU time) / mean(CPU time); pass when >= 0.60.
"""

from __future__ import annotations

import time
from typing import Any

from scxctl.bench.converge import Measurement, converge, final
from scxctl.bench.env import Env
from scxctl.bench.futex import Arena
from scxctl.bench.procs import Controller, WorkloadGroup, spin_for_ns, wait_ready
from scxctl.bench.stats import TDigest
from scxctl.bench.topology import process_cpu_time_s

NAME = "fairness"
THRESHOLD = 0.60
DIRECTION = ">="


def _spinner(ctl: Controller) -> None:
    while True:
        spin_for_ns(ctl.get_iters() * 1_000_000)


def run(env: Env, cpus: list[int], min_time: float, max_time: float, out: list[Measurement]) -> Measurement:
    arena = Arena()
    with WorkloadGroup(env.sched_ext) as group:
        procs: list[tuple[int, int | None, Controller]] = []  # (pid, pinned cpu or None, controller)
        for cpu in cpus:
            ctl = Controller(arena)
            procs.append((group.spawn(f"pinned{cpu}", lambda c=ctl: _spinner(c), {cpu}), cpu, ctl))
        for i in range(len(cpus)):
            ctl = Controller(arena)
            procs.append((group.spawn(f"float{i}", lambda c=ctl: _spinner(c), set(cpus)), None, ctl))
        ready = [ctl.ready for _, _, ctl in procs]
        wait_ready(ready, group, env.tick, time.monotonic() + env.round_timeout_s, "start-up")

        def measure(iters: int) -> tuple[float | None, dict[str, Any]]:
            for _, _, ctl in procs:
                ctl.begin(iters)
            deadline = time.monotonic() + env.round_timeout_s
            wait_ready(ready, group, env.tick, deadline, f"a round of {iters} ms")
            times = [process_cpu_time_s(pid) for pid, _, _ in procs]
            mean = sum(times) / len(times)
            p10 = TDigest(times).quantile(0.1)
            metric = p10 / mean if (p10 is not None and mean > 0) else None
            detail = {
                "cpu_time_s": {
                    "min": min(times),
                    "p10": None if p10 is None else round(p10, 4),
                    "mean": round(mean, 4),
                    "max": max(times),
                },
                "processes": [
                    {"pinned_cpu": cpu, "cpu_time_s": t} for (_, cpu, _), t in zip(procs, times, strict=True)
                ],
            }
            return metric, detail

        result = converge(measure, min_time, max_time, out, on_start=env.on_start, on_done=env.on_done)
    return final(out) or result
