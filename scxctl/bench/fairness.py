"""schtest's fairness: do pinned and unpinned CPU hogs get comparable CPU time?

N = logical CPUs (online): one busy spinner pinned to each CPU plus N unpinned ones, 2N
single-threaded processes (the native worker). Each round every process spins `iters` ms of
wall-clock time. Per-process CPU time is cumulative (utime + stime over /proc/PID/task/*/stat, as
schtest's total_time), so the later, longer rounds dominate. metric = p10(CPU time) / mean(CPU time);
pass when >= 0.60.
"""

from __future__ import annotations

from typing import Any

from scxctl.bench import worker
from scxctl.bench.converge import Measurement, converge, final
from scxctl.bench.env import Env
from scxctl.bench.stats import TDigest
from scxctl.bench.topology import process_cpu_time_s

NAME = "fairness"
THRESHOLD = 0.60
DIRECTION = ">="


def pinned_cpu(role: str) -> int | None:
    """The worker names its spinners pinnedCPU and floatI."""
    return int(role[len("pinned"):]) if role.startswith("pinned") else None


def run(env: Env, cpus: list[int], min_time: float, max_time: float, out: list[Measurement]) -> Measurement:
    with worker.start("fairness", cpus, env) as w:
        procs = [(pid, pinned_cpu(role)) for role, pid in w.roles.items()]

        def measure(iters: int) -> tuple[float | None, dict[str, Any]]:
            w.round(iters)
            times = [process_cpu_time_s(pid) for pid, _ in procs]
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
                    {"pinned_cpu": cpu, "cpu_time_s": t} for (_, cpu), t in zip(procs, times, strict=True)
                ],
            }
            return metric, detail

        result = converge(measure, min_time, max_time, out, on_start=env.on_start, on_done=env.on_done)
    return final(out) or result
