"""schtest's adaptive_priority: does the scheduler favour the task that sleeps a lot?

Two processes, each a controller thread and a worker thread, all four pinned to one CPU (the native
worker, native/scxctl-bench-worker.c). Slow worker: wait slow_sem, spin 10 ms, post slow_sem_ret.
Fast worker: wait fast_sem, spin 100 us, sleep 9.9 ms, post fast_sem_ret. Each controller does
`iters` round trips of post(sem) then wait(sem_ret). Only the controller -> worker wake-ups are
sampled. metric = p90(fast wake latency) / p90(slow wake latency); pass when < 0.50.
"""

from __future__ import annotations

from typing import Any

from scxctl.bench import worker
from scxctl.bench.converge import Measurement, converge, final
from scxctl.bench.env import Env
from scxctl.bench.stats import summarize

NAME = "adaptive_priority"
THRESHOLD = 0.50
DIRECTION = "<"  # pass when metric < THRESHOLD
MIN_SAMPLES = 20  # below this on either side the ratio is flagged UNRELIABLE


def run(env: Env, cpu: int, min_time: float, max_time: float, out: list[Measurement]) -> Measurement:
    """Run to convergence, appending every measurement to `out`; returns the final one."""
    with worker.start("adaptive", [cpu], env) as w:

        def measure(iters: int) -> tuple[float | None, dict[str, Any]]:
            sems = w.round(iters)
            fast = summarize(*sems["fast"])
            slow = summarize(*sems["slow"])
            metric = None
            if fast.p90_ns is not None and slow.p90_ns:
                metric = fast.p90_ns / slow.p90_ns
            unreliable = min(fast.count, slow.count) < MIN_SAMPLES
            return metric, {"unreliable": unreliable, "fast": fast.to_json(), "slow": slow.to_json()}

        result = converge(measure, min_time, max_time, out, on_start=env.on_start, on_done=env.on_done)
    return final(out) or result
